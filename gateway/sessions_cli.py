"""``gateway sessions …``: the session tools' data for admins.

    list [--kinds main,group] [--active-minutes N] [--limit N] [--archived] [--json]
    history KEY|ID [--limit N] [--include-tools] [--json]
    tail KEY|ID [--lines N] [--json]
    send-policy KEY allow|deny|inherit
    cancel CHILD_KEY
    pin | compact | uncompact | branch    (gateway.session_edits_cli)

``list``, ``history`` and ``tail`` read the session store directly, whether
or not a gateway runs (store readers never lock); ``tail`` follows the
session as it is written, until Ctrl-C. ``send-policy`` writes: with a
gateway running it goes through the control socket, so the running gateway
applies it at once; with none it writes the session in the store
(docs/decisions/sessions-06-sessions-cli.md). ``cancel`` stops a child's
delegation in the running gateway, which records it ``canceled``.

Keys are accepted in every shape the session tools accept (``main``,
``agent:<agentId>:<channel>:group:<id>``, a session id ``s_…``; see
docs/session-keys.md). Exit codes: 0 done; 1 no such session, or the call
failed; 2 refused input.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Annotated, Any, TypeVar
from zoneinfo import ZoneInfo

import orjson
import typer
from rich.table import Table

from config import GatewayConfig
from gateway.cli_kit import (
    EXIT_USAGE,
    App,
    ConfigOption,
    JsonOption,
    console,
    fail,
    load,
    print_json,
)
from gateway.control import ControlClient
from gateway.errors import ControlError
from gateway.session_tail import NotWatchableError, follow
from gateway.terminal import StopSignals, first_of
from threads.errors import InvalidKeyError, NotFoundError, ThreadsError, UnreachableError
from threads.sessions.catalog import HISTORY_DEFAULT, LIST_DEFAULT, Catalog
from threads.sessions.errors import ReservedSessionKeyError, UnknownSessionError
from threads.sessions.keys import KINDS, resolve, translate
from threads.sessions.policy import SETTINGS, write_override
from threads.store import check_reachable, open_store
from threads.store.base import StoreOptions

T = TypeVar("T")

app = App(name="sessions", help="Read sessions and their transcripts; set a session's send policy.")

KeyArgument = Annotated[
    str, typer.Argument(help="a session key (main, telegram:123, …) or a session id (s_…)")
]


@app.command("list")
def list_sessions(
    kinds: Annotated[
        list[str] | None,
        typer.Option(
            "--kinds", help="only these kinds (repeat, or comma-separate): " + ", ".join(KINDS)
        ),
    ] = None,
    active_minutes: Annotated[
        int | None,
        typer.Option("--active-minutes", min=1, help="only sessions updated in N minutes"),
    ] = None,
    limit: Annotated[
        int, typer.Option("--limit", min=1, help="most rows (max 500)")
    ] = LIST_DEFAULT,
    archived: Annotated[
        bool, typer.Option("--archived", help="include archived sub-agent sessions")
    ] = False,
    config: ConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Sessions, newest first: key, kind, channel, agent, last update, tokens, send policy."""
    settings = load(config)
    wanted = _kinds(kinds)

    async def go(catalog: Catalog) -> list[dict[str, Any]]:
        return await catalog.rows(
            kinds=wanted, limit=limit, active_minutes=active_minutes, include_archived=archived
        )

    rows = _read(settings, go)
    if as_json:
        print_json({"count": len(rows), "sessions": rows})
        return
    out = console()
    if not rows:
        out.print("no sessions")
        return
    table = Table(title=f"sessions ({len(rows)})", expand=False)
    table.add_column("key", overflow="fold", ratio=3)
    table.add_column("kind", overflow="ellipsis", no_wrap=True)
    table.add_column("channel", overflow="ellipsis", no_wrap=True)
    table.add_column("agent", overflow="ellipsis", no_wrap=True)
    table.add_column("updated (UTC)", overflow="fold", ratio=2)
    table.add_column("tokens", justify="right", overflow="fold")
    table.add_column("send", overflow="ellipsis", no_wrap=True)
    table.add_column("id", overflow="fold", ratio=2)
    for row in rows:
        updated = datetime.fromtimestamp(row["updatedAt"] / 1000, UTC)
        table.add_row(
            row["key"],
            row["kind"],
            row["channel"],
            row["agent"],
            updated.strftime("%Y-%m-%d %H:%M:%S"),
            "-" if row["totalTokens"] is None else str(row["totalTokens"]),
            row["sendPolicy"] or "inherit",
            row["sessionId"],
        )
    out.print(table)


@app.command()
def history(
    ref: KeyArgument,
    limit: Annotated[
        int, typer.Option("--limit", min=1, help="most messages (max 500)")
    ] = HISTORY_DEFAULT,
    include_tools: Annotated[
        bool, typer.Option("--include-tools", help="include tool results")
    ] = False,
    config: ConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """One session's transcript, oldest first (tool results only with --include-tools)."""
    settings = load(config)

    async def go(catalog: Catalog) -> dict[str, Any]:
        return await catalog.history(ref, limit=limit, include_tools=include_tools)

    data = _read(settings, go)
    if as_json:
        print_json(data)
        return
    out = console()
    out.print(f"[bold]{data['sessionKey']}[/bold]  {data['sessionId']}", markup=True)
    for message in data["messages"]:
        out.print(f"\n[{message['created']}] {message['role']}", markup=False)
        for part in message["content"]:
            out.print(_part_text(part), markup=False)


@app.command()
def tail(
    ref: KeyArgument,
    lines: Annotated[
        int, typer.Option("--lines", "-n", min=0, help="entries shown before following")
    ] = 10,
    config: ConfigOption = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="each entry's stored JSON, one per line")
    ] = False,
) -> None:
    """Follow a session as it is written: messages, tool calls and turns, one line each."""
    settings = load(config)
    target = _translate(ref, settings)
    tz = ZoneInfo(settings.timezone)

    def write(line: str) -> None:
        typer.echo(line)

    async def go() -> None:
        options = StoreOptions(salvage=settings.store.salvage, no_lock=True)
        store = open_store(settings.store.url, options)
        try:
            await check_reachable(store)
            session_id = (await resolve(target, store, settings)).session_id
            with StopSignals(waiting_for="the store to close") as stop:
                following = follow(
                    store, session_id, last=lines, tz=tz, write=write, as_json=as_json
                )
                await first_of(stop.wait(), following)
        finally:
            await store.close()

    try:
        asyncio.run(go())
    except UnknownSessionError as exc:
        fail(unknown_session(exc.ref))
    except (InvalidKeyError, ReservedSessionKeyError) as exc:
        fail(str(exc), code=EXIT_USAGE)
    except NotFoundError as exc:
        fail(f"the session went away while it was followed: {exc}")
    except (NotWatchableError, ThreadsError, OSError) as exc:
        fail(f"cannot follow the session in {settings.store.safe_url}: {exc}")


@app.command("send-policy")
def send_policy(
    key: KeyArgument,
    setting: Annotated[str, typer.Argument(help="allow, deny, or inherit (the configured policy)")],
    config: ConfigOption = None,
) -> None:
    """Set a session's send policy: allow or deny its replies to the channel user, or inherit."""
    settings = load(config)
    if setting not in SETTINGS:
        fail(f"send policy {setting!r} is not one of allow, deny, inherit", code=EXIT_USAGE)
    target = _translate(key, settings)

    async def go() -> dict[str, Any]:
        store = open_store(settings.store.url, StoreOptions(salvage=settings.store.salvage))
        try:
            await check_reachable(store)
            name = str((await resolve(target, store, settings)).key)
            client = await ControlClient.connect(settings.data_dir / "gateway.sock")
            if client is not None:
                try:
                    return await client.call("send_policy", key=name, setting=setting)
                finally:
                    await client.close()
            decision = await write_override(store, settings, name, setting)
        finally:
            await store.close()
        return {"key": name, "policy": decision.action, "reason": decision.reason}

    try:
        answer = asyncio.run(go())
    except UnknownSessionError as exc:
        fail(unknown_session(exc.ref))
    except (ControlError, ThreadsError, ValueError, LookupError) as exc:
        fail(str(exc))
    typer.echo(f"send policy for {answer['key']}: {answer['policy']} ({answer['reason']})")


@app.command()
def cancel(
    key: Annotated[str, typer.Argument(help="the child session's key (agent:…:subagent:…)")],
    config: ConfigOption = None,
) -> None:
    """Cancel a delegation: stop its child (or its wait for a slot); its parent records it canceled."""
    settings = load(config)

    async def go() -> dict[str, Any]:
        client = await ControlClient.connect(settings.data_dir / "gateway.sock")
        if client is None:
            raise ControlError(
                "no gateway is running here, and a delegation runs only inside one: "
                "there is nothing to cancel (start it with `gateway run`)"
            )
        try:
            return await client.call("cancel_delegation", key=key)
        finally:
            await client.close()

    try:
        answer = asyncio.run(go())
    except (ControlError, ThreadsError) as exc:
        fail(str(exc))
    was = "waiting for a slot" if answer["state"] == "accepted" else "running"
    typer.echo(
        f"canceled the delegation to {answer['key']} ({was}); "
        f"{answer['parent']} records it canceled"
    )


# --- helpers ----------------------------------------------------------------------------


def _kinds(values: list[str] | None) -> list[str] | None:
    if not values:
        return None
    kinds = [k.strip() for value in values for k in value.split(",") if k.strip()]
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        fail(f"--kinds {', '.join(unknown)}: a kind is one of {', '.join(KINDS)}", code=EXIT_USAGE)
    return kinds


def _translate(key: str, settings: GatewayConfig) -> str:
    if key.startswith("s_"):
        return key  # a session id: resolved against the store
    try:
        return str(translate(key, settings))
    except (InvalidKeyError, ReservedSessionKeyError) as exc:
        fail(str(exc), code=EXIT_USAGE)


def _read(settings: GatewayConfig, read: Callable[[Catalog], Awaitable[T]]) -> T:
    async def go() -> T:
        options = StoreOptions(salvage=settings.store.salvage, no_lock=True)
        store = open_store(settings.store.url, options)
        try:
            await check_reachable(store)
            return await read(Catalog(store, settings))
        finally:
            await store.close()

    try:
        return asyncio.run(go())
    except UnknownSessionError as exc:
        fail(unknown_session(exc.ref))
    except (InvalidKeyError, ReservedSessionKeyError) as exc:
        fail(str(exc), code=EXIT_USAGE)
    except UnreachableError as exc:
        fail(str(exc))
    except (ThreadsError, OSError) as exc:
        fail(f"cannot read the session store {settings.store.safe_url}: {exc}")


def _part_text(part: dict[str, Any]) -> str:
    kind = part.get("type")
    if kind == "text":
        return str(part.get("text", ""))
    if kind == "tool_call":
        args = orjson.dumps(part.get("args", {})).decode()
        return f"→ {part.get('name')}({args})"
    if kind == "tool_result":
        prefix = "← error from " if part.get("is_error") else "← "
        return f"{prefix}{part.get('name')}: {part.get('content', '')}"
    if kind == "reasoning":
        return f"(reasoning) {part.get('text', '')}"
    return f"({kind}) {part.get('url', '')}"


def unknown_session(ref: str) -> str:
    """An unknown key or id, in an operator's words (the tools' error speaks to the model)."""
    what = "session id" if ref.startswith("s_") else "session key"
    return f"{what} {ref!r} names no session; `gateway sessions list` shows them"
