"""``gateway sessions pin|compact|uncompact|branch``: edit a session between its turns.

    pin KEY ENTRY_ID
    compact KEY [--preview] [--focus TEXT] [--json]
    uncompact KEY
    branch KEY ENTRY_ID [--summary TEXT | --no-summary]

Entry ids are in ``gateway sessions history KEY --json`` (and ``tail --json``).
With a gateway running the edit goes through its control socket and is made
on the live session; with none it is made in the store (docs/decisions/
seed003-04-compaction-controls.md). ``compact --preview`` shows the cut and
the estimated savings and writes nothing, without asking a model.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

import typer

from gateway.cli_kit import EXIT_USAGE, ConfigOption, JsonOption, fail, load, print_json
from gateway.errors import ControlError
from gateway.ops_cli import ask
from gateway.session_edits import Editor
from gateway.sessions_cli import KeyArgument, _translate, app, unknown_session
from threads.agent.models import Models
from threads.errors import InvalidKeyError, ThreadsError
from threads.llm.errors import ModelError
from threads.session import Session
from threads.sessions.errors import ReservedSessionKeyError, UnknownSessionError
from threads.sessions.keys import resolve
from threads.store import check_reachable, open_store
from threads.store.base import StoreOptions
from threads.turns import NoRuns

__all__ = ["app"]  # the sessions app, with these commands added

EntryArgument = Annotated[
    str, typer.Argument(help="an entry id (e_…) from `gateway sessions history KEY --json`")
]


def _edit(ref: str, action: str, args: dict[str, Any], config_path: Any) -> dict[str, Any]:
    """Make one edit, through a running gateway or in the store; fail in one line."""
    settings = load(config_path)
    target = _translate(ref, settings)

    async def go() -> dict[str, Any]:
        store = open_store(settings.store.url, StoreOptions(salvage=settings.store.salvage))
        try:
            await check_reachable(store)
            found = await resolve(target, store, settings)
            answer = await ask(
                settings, "session_edit", key=str(found.key), action=action, args=args
            )
            if answer is not None:
                return answer
            models = Models(settings.models)
            session = await Session.open(store, found.session_id, NoRuns())
            try:
                done = await Editor(config=settings, models=models).edit(session, action, args)
            finally:
                await session.close()
                await models.close()
            return {"key": str(found.key), **done}
        finally:
            await store.close()

    try:
        return asyncio.run(go())
    except UnknownSessionError as exc:
        fail(unknown_session(exc.ref))
    except (InvalidKeyError, ReservedSessionKeyError) as exc:
        fail(str(exc), code=EXIT_USAGE)
    except (ControlError, ThreadsError, ModelError, ValueError, LookupError) as exc:
        fail(str(exc))


@app.command("pin")
def pin_entry(ref: KeyArgument, entry: EntryArgument, config: ConfigOption = None) -> None:
    """Keep a message in the context through every compaction (a requirement, a decision)."""
    done = _edit(ref, "pin", {"entry": entry}, config)
    typer.echo(f"pinned {done['pinned']} in {done['key']}: every compaction keeps it word for word")


@app.command()
def compact(
    ref: KeyArgument,
    preview: Annotated[
        bool, typer.Option("--preview", help="show the cut and the savings; write nothing")
    ] = False,
    focus: Annotated[str, typer.Option("--focus", help="what the summary should keep")] = "",
    config: ConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Summarize a session's older part now (or, with --preview, show what would be)."""
    done = _edit(ref, "compact", {"preview": preview, "focus": focus}, config)
    if as_json:
        print_json(done)
        return
    if preview:
        typer.echo(
            f"{done['key']}: would summarize {done['summarized_messages']} messages and keep "
            f"from {done['first_kept']}"
            + (f", {len(done['pinned'])} pinned shown again" if done["pinned"] else "")
        )
        typer.echo(
            f"context now about {done['tokens_before']:,} tokens; kept word for word "
            f"{done['tokens_kept']:,}; the summary adds at most {done['summary_cap']:,} — "
            f"saves at least {done['saves_at_least']:,} tokens"
        )
        return
    typer.echo(
        f"compacted {done['key']}: a summary by {done['summary_model'] or 'the model'} now "
        f"stands for everything before {done['first_kept']} (about {done['tokens_before']:,} "
        "tokens of context before); nothing was deleted — `gateway sessions uncompact` undoes it"
    )


@app.command()
def uncompact(ref: KeyArgument, config: ConfigOption = None) -> None:
    """Undo a session's latest compaction: its context is what it was before (nothing is lost)."""
    done = _edit(ref, "uncompact", {}, config)
    typer.echo(f"undid compaction {done['undone']} of {done['key']}")


@app.command()
def branch(
    ref: KeyArgument,
    entry: EntryArgument,
    summary: Annotated[
        str, typer.Option("--summary", help="what the line left behind held, in your words")
    ] = "",
    summarize: Annotated[
        bool,
        typer.Option(
            "--summarize/--no-summary",
            help="without --summary the model summarizes the line left behind; "
            "--no-summary leaves none",
        ),
    ] = True,
    config: ConfigOption = None,
) -> None:
    """Move a session back to an earlier entry; the line it leaves stays in the file."""
    if summary and not summarize:
        fail("--summary gives a summary and --no-summary asks for none: give one", code=EXIT_USAGE)
    done = _edit(
        ref, "branch", {"entry": entry, "summary": summary, "summarize": summarize}, config
    )
    said = f"; the line left behind is summarized: {done['summary']}" if done["summary"] else ""
    typer.echo(f"{done['key']} goes on from {done['leaf'] or 'the start'}{said}")
