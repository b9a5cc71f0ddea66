"""``gateway heartbeat …``: which sessions get a periodic check-in, and what each beat did.

    set KEY --every 30m [--active 08:00-22:00] [--tz ZONE] [--prompt TEXT]
    off KEY
    list [--json]
    runs KEY [--limit N] [--json]

Settings and the ledger live in the state store (``state_store_url()``); a
running gateway reads the settings at every tick, so a change applies within
``heartbeat.tick_seconds`` without a restart. The first beat comes one
interval after ``set``. Exit codes: 0 done; 1 no such session, or the store
failed; 2 refused input.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Annotated, Any, TypeVar

import typer
from pydantic import ValidationError

from config import GatewayConfig
from cron.base import WallClock
from cron.heartbeat import Heartbeats, HeartbeatSetting
from cron.models import parse_interval
from gateway.cli_kit import EXIT_USAGE, App, ConfigOption, JsonOption, fail, load, print_json
from gateway.sessions_cli import _translate, unknown_session
from threads.errors import ThreadsError
from threads.sessions.errors import UnknownSessionError
from threads.sessions.keys import resolve
from threads.state import StateStoreError, open_state_store
from threads.store import check_reachable, open_store
from threads.store.base import StoreOptions

T = TypeVar("T")

app = App(name="heartbeat", help="Periodic check-ins: which sessions get one, and what each did.")
KeyArgument = Annotated[str, typer.Argument(help="a session key (main, telegram:123, …)")]


class _NoTarget:
    """The CLI writes settings and reads the ledger; it never beats."""

    async def wake_turn(self, key: Any, wake: Any) -> Any:
        raise RuntimeError("the CLI does not run heartbeats")

    async def session_exists(self, key: Any) -> bool:
        return False

    def busy(self, key: Any) -> bool:
        return False

    async def last_user_message(self, key: Any) -> datetime | None:
        return None


def _run(settings: GatewayConfig, work: Callable[[Heartbeats], Awaitable[T]]) -> T:
    async def go() -> T:
        state = await open_state_store(settings.state_store_url())
        try:
            beats = Heartbeats(
                state, _NoTarget(), settings.heartbeat, clock=WallClock(), zone=settings.timezone
            )
            return await work(beats)
        finally:
            await state.close()

    try:
        return asyncio.run(go())
    except UnknownSessionError as exc:
        fail(unknown_session(exc.ref))
    except (StateStoreError, ThreadsError, OSError) as exc:
        fail(f"cannot use the state store {settings.state_store_url()}: {exc}")


async def _session_key(settings: GatewayConfig, ref: str) -> str:
    """Our key for ``ref``, which must name a session."""
    store = open_store(
        settings.store.url, StoreOptions(salvage=settings.store.salvage, no_lock=True)
    )
    try:
        await check_reachable(store)
        return str((await resolve(_translate(ref, settings), store, settings)).key)
    finally:
        await store.close()


@app.command("set")
def set_heartbeat(
    key: KeyArgument,
    every: Annotated[str, typer.Option("--every", help="how often: 30m, 2h, 1d (at least 1m)")],
    active: Annotated[
        str, typer.Option("--active", help="only within these hours, such as 08:00-22:00")
    ] = "",
    tz: Annotated[
        str, typer.Option("--tz", help="the hours' time zone (default: the gateway's)")
    ] = "",
    prompt: Annotated[str, typer.Option("--prompt", help="what each beat should look at")] = "",
    config: ConfigOption = None,
) -> None:
    """Give a session a heartbeat (or change it): a check-in wake every interval."""
    settings = load(config)
    try:
        seconds = parse_interval(every).total_seconds()
    except ValueError as exc:
        fail(f"--every: {exc}", code=EXIT_USAGE)

    async def work(beats: Heartbeats) -> HeartbeatSetting:
        name = await _session_key(settings, key)
        try:
            setting = HeartbeatSetting(
                key=name,
                every_seconds=seconds,
                active=active,
                tz=tz,
                prompt=prompt,
                since=datetime.now(UTC),
            )
        except ValidationError as exc:
            problems = "; ".join(
                f"--{str(e['loc'][0]).replace('every_seconds', 'every')}: {e['msg']}"
                for e in exc.errors(include_url=False)
            )
            fail(problems.replace("Value error, ", ""), code=EXIT_USAGE)
        await beats.set(setting)
        return setting

    setting = _run(settings, work)
    when = (
        f" between {setting.active} ({setting.tz or settings.timezone})" if setting.active else ""
    )
    typer.echo(f"heartbeat for {setting.key}: every {every}{when}; the first one in {every}")


@app.command()
def off(key: KeyArgument, config: ConfigOption = None) -> None:
    """Stop a session's heartbeat (its ledger stays)."""
    settings = load(config)
    name = _translate(key, settings)
    had = _run(settings, lambda beats: beats.off(name))
    if not had:
        fail(f"{name} has no heartbeat; `gateway heartbeat list` shows the ones set")
    typer.echo(f"heartbeat for {name}: off")


@app.command("list")
def list_heartbeats(config: ConfigOption = None, as_json: JsonOption = False) -> None:
    """The sessions with a heartbeat, and how they are set."""
    settings = load(config)
    found = _run(settings, lambda beats: beats.settings())
    rows = [s.model_dump(mode="json") for s in found]
    if as_json:
        print_json({"count": len(rows), "heartbeats": rows})
        return
    if not rows:
        typer.echo("no heartbeats")
        return
    for s in found:
        hours = f" {s.active} {s.tz or settings.timezone}" if s.active else " all day"
        typer.echo(
            f"{s.key}: every {_every(s.every_seconds)},{hours}"
            + (f" · {s.prompt}" if s.prompt else "")
        )


@app.command()
def runs(
    key: KeyArgument,
    limit: Annotated[int, typer.Option("--limit", min=1, max=100, help="most beats")] = 20,
    config: ConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """A session's latest beats, oldest first: fired (and its delivery), skipped, failed."""
    settings = load(config)
    name = _translate(key, settings)
    found = _run(settings, lambda beats: beats.runs(name, limit))
    if as_json:
        print_json({"key": name, "runs": [r.model_dump(mode="json") for r in found]})
        return
    if not found:
        typer.echo(f"{name}: no beats yet")
        return
    for r in found:
        what = r.status + (f" {r.run_id}" if r.run_id else "")
        after = f": {r.delivery or 'running'}" if r.status == "fired" else f": {r.reason}"
        typer.echo(f"{r.at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC  {what}{after}")


def _every(seconds: float) -> str:
    for unit, size in (("d", 86_400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"
