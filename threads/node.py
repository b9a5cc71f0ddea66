"""This gateway process's identity: a node id kept in the data directory, and a boot counter.

Locks a process takes in a store other processes share (a Redis lock key, a
SQLite lock row) name their owner as ``<node id>/<boot>``. The node id is
generated once and kept in ``<state>/node.json`` (or set in the config's
``node_id``); the boot counter there goes up by one at every start.

While it runs, the process holds an exclusive ``flock`` on
``<state>/node.lock``, so at most one live process has a node's identity at a
time. That is what makes a lock of this node with an older boot *provably*
abandoned: the process that took it let go of the node lock, which the kernel
does for a process that died. A start reclaims such locks at once instead of
waiting for them to lapse (decision reliability-03).
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

import orjson

from threads.errors import NodeBusyError
from threads.store.private import fsync_dir, make_private_dir, open_private, read_private

log = logging.getLogger(__name__)

NODE_FILE = "node.json"
LOCK_FILE = "node.lock"
_OWNER = re.compile(r"(?P<node>[A-Za-z0-9_-]{1,64})/(?P<boot>[0-9]{1,18})(?:/.*)?")
_NODE_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeIdentity:
    """Who owns a lock: a node (one data directory) and the boot of its current process."""

    node_id: str
    boot: int

    @property
    def owner(self) -> str:
        """The owner string a lock carries: ``<node id>/<boot>``."""
        return f"{self.node_id}/{self.boot}"

    def left_by_earlier_boot(self, owner: str) -> bool:
        """Whether a lock owned by ``owner`` was taken by an earlier process of this node.

        Such a process is gone (this one holds the node lock), so its locks
        can be taken over at once. An owner string of another shape — another
        node, an older build's random token — is never taken over here.
        """
        parsed = parse_owner(owner)
        return parsed is not None and parsed[0] == self.node_id and parsed[1] < self.boot


def parse_owner(owner: str) -> tuple[str, int] | None:
    """The (node id, boot) an owner string names, or None when it names none."""
    found = _OWNER.fullmatch(owner)
    if found is None:
        return None
    return found["node"], int(found["boot"])


def check_node_id(value: str) -> str:
    """``value`` when it can be a node id (1-64 letters, digits, '_' or '-'); else ValueError."""
    if not _NODE_ID.fullmatch(value):
        raise ValueError(
            f"node_id {value!r} must be 1 to 64 letters, digits, '_' or '-' "
            "(it is written into every lock this gateway takes)"
        )
    return value


class NodeClaim:
    """This process's hold on its node identity, from :func:`claim_node` until :meth:`close`."""

    def __init__(self, identity: NodeIdentity, fd: int, directory: Path) -> None:
        self.identity = identity
        self.directory = directory
        self._fd = fd

    def close(self) -> None:
        """Let go of the node lock (the kernel does the same if the process dies)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def claim_node(directory: Path, *, node_id: str = "") -> NodeClaim:
    """Take this data directory's node identity for the life of the process, with a new boot.

    ``directory`` is the gateway's state directory (made private if missing);
    ``node_id`` overrides the stored id (from config). Raises
    :class:`NodeBusyError` when a live process holds the identity.
    """
    make_private_dir(directory)
    fd = open_private(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise NodeBusyError(str(directory.parent), _holder_pid(fd)) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        identity = _next_boot(directory / NODE_FILE, node_id)
    except BaseException:
        os.close(fd)
        raise
    log.info("node %s, boot %d", identity.node_id, identity.boot)
    return NodeClaim(identity, fd, directory)


def _next_boot(path: Path, configured: str) -> NodeIdentity:
    """Read the node record, count this start, write it back durably; the identity now."""
    stored_id, boot = "", 0
    try:
        record = orjson.loads(read_private(path))
        stored_id = str(record.get("node_id", ""))
        boot = int(record.get("boot", 0))
    except FileNotFoundError:
        pass
    except (orjson.JSONDecodeError, ValueError, TypeError, AttributeError) as exc:
        # The boot counter only has to grow: a fresh id makes every old lock another node's.
        log.warning("node record %s not read (%s); this node takes a new id", path, exc)
        stored_id, boot = "", 0
    node_id = configured or stored_id or f"n_{secrets.token_hex(8)}"
    identity = NodeIdentity(node_id=check_node_id(node_id), boot=boot + 1)
    record_bytes = orjson.dumps({"node_id": stored_id or node_id, "boot": identity.boot})
    tmp = path.with_name(path.name + ".tmp")
    fd = open_private(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        os.write(fd, record_bytes)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(str(path.parent))
    return identity


def _holder_pid(fd: int) -> int:
    """The pid the holder of the node lock wrote into it (0 when it cannot be read)."""
    try:
        return int(os.pread(fd, 32, 0).split()[0])
    except (OSError, ValueError, IndexError):
        return 0
