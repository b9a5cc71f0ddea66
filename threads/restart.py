"""What a starting manager does with what the last run left: continue it, key by key.

The keys come from the recovery log (:mod:`threads.recovery`). Each session
with unsettled input is loaded and continued: a turn a crash cut short is
recorded as canceled and resumed, accepted wakes run in acceptance order,
each once. A session with a call waiting for approval is loaded too: its
request is listed again, and a decided one whose resume never ran resumes.

One session never stops the start: a session that cannot be read is set
aside (:mod:`threads.quarantine`); one another live process holds, or that
the store cannot give now, is logged in one line and kept in the recovery
log for the next start; every other key continues.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from threads import outbound
from threads.approvals.boundary import has_boundary
from threads.errors import (
    LockedError,
    NotFoundError,
    OwnedElsewhereError,
    QuarantinedError,
    UnavailableError,
)
from threads.keys import SessionKey
from threads.tree import unfinished_runs, unsettled_receipts

if TYPE_CHECKING:
    from threads.manager import ThreadManager

log = logging.getLogger(__name__)


async def continue_keys(manager: ThreadManager, keys: list[str]) -> None:
    """Continue every key's unsettled input; a key that cannot start never stops the others."""
    for key in keys:
        try:
            # The manager's: scaled out, a key another node owns is left to it.
            await manager.continue_key(SessionKey(key))
        except OwnedElsewhereError:
            continue
        except NotFoundError:
            log.warning("session key %s names a session that is gone; nothing to continue", key)
        except QuarantinedError:
            pass  # logged, with where the session is kept, when it was set aside
        except LockedError as exc:
            log.warning("session key %s not continued here: %s", key, exc)
            manager.recovery.carry([key])
        except UnavailableError as exc:
            log.warning("session key %s not continued: %s; the next start looks again", key, exc)
            manager.recovery.carry([key])


async def continue_key(manager: ThreadManager, key: SessionKey) -> None:
    """Run what the key's session holds but does not run; nothing when it holds nothing."""
    thread = manager.thread(key)
    if thread is not None:
        await thread.session.continue_()
        return
    session_id = await manager.store.resolve(key)
    if session_id is None:
        return
    loaded = await manager.load_stored(key, session_id)
    if not has_unsettled(loaded.entries) and not has_boundary(loaded):
        return
    thread = await manager.open_thread(key, loaded=loaded)
    if thread is not None:
        if manager.chains.any_cut:
            # Wakes of a chain stopped before the restart stay stopped.
            await thread.session.drop_queued(manager.chains.refused)
        await thread.session.continue_()


def has_unsettled(entries: list[Any]) -> bool:
    """Whether a session holds input it accepted and never settled, a turn left running,
    or a send it recorded and never marked (:mod:`threads.outbound`)."""
    return bool(
        unsettled_receipts(entries) or unfinished_runs(entries) or outbound.unsettled(entries)
    )
