"""``gateway health``, ``check-session`` and ``stop-session``: the running threads, for operators.

``health`` and ``stop-session`` ask the running gateway through its control
socket; ``check-session`` asks it when one runs, and reads the session store
otherwise. Text output shows everything the ``--json`` object holds, in
sections; a key the text does not know yet (a newer gateway, a part added
later) is still printed, under its own name.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer

from config import GatewayConfig
from gateway.cli_kit import (
    EXIT_FAILED,
    EXIT_USAGE,
    App,
    ConfigOption,
    JsonOption,
    duration_text,
    fail,
    load,
    print_json,
    size_text,
    yes_no,
)
from gateway.control import ask_at
from gateway.errors import ControlError
from gateway.node_views import cluster_lines, node_lines
from threads.errors import InvalidKeyError, ThreadsError
from threads.keys import SessionKey
from threads.store import check_reachable

if TYPE_CHECKING:
    from threads.manager import ThreadManager
    from threads.store.base import SessionStore


def register(app: App) -> None:
    """Put the three commands on the ``gateway`` app."""
    app.command("health")(health)
    app.command("check-session")(check_session)
    app.command("stop-session")(stop_session)


# --- commands ----------------------------------------------------------------------------


def health(config: ConfigOption = None, as_json: JsonOption = False) -> None:
    """The running gateway: threads, model, sessions, cron, channels and the process."""
    settings = load(config)
    try:
        answer = asyncio.run(ask(settings, "health"))
    except ControlError as exc:
        fail(str(exc))
    if answer is None:
        fail(no_gateway(settings))
    info = dict(answer["health"])
    if as_json:
        print_json(info)
        return
    typer.echo("\n".join(health_lines(info)))


def check_session(
    key: Annotated[str, typer.Argument(help="the session key, e.g. cli or telegram:123")],
    config: ConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """One session: on disk, and its live thread when a running gateway has it loaded.

    Exits 1 when no session has this key (the JSON still says so: ``exists: false``).
    """
    settings = load(config)
    try:
        SessionKey(key)
    except InvalidKeyError as exc:
        fail(str(exc), code=EXIT_USAGE)

    async def go() -> dict[str, Any]:
        answer = await ask(settings, "check_session", key=key)
        if answer is not None:
            return dict(answer["session"])
        manager, store = await _offline_manager(settings)
        try:
            await check_reachable(store)
            return await manager.check_session(key)
        finally:
            await store.close()

    try:
        info = asyncio.run(go())
    except (ControlError, ThreadsError) as exc:
        fail(str(exc))
    if as_json:
        print_json(info)
    else:
        typer.echo("\n".join(session_lines(info)))
    if not info.get("exists"):
        raise typer.Exit(EXIT_FAILED)


def stop_session(
    key: Annotated[
        str | None, typer.Argument(help="the session key whose turn to stop, e.g. cli")
    ] = None,
    every: Annotated[
        bool, typer.Option("--all", help="stop every running turn and queued system wake")
    ] = False,
    drain: Annotated[
        bool, typer.Option("--drain", help="also drop the user messages queued there")
    ] = False,
    config: ConfigOption = None,
) -> None:
    """Stop a turn and the exchanges it is part of (needs a running gateway).

    A chat session's turn ends at once and its user is told; a child's winds down
    at its next step boundary. The queued system wakes of those exchanges are
    dropped everywhere; the user's own queued messages stay unless --drain.
    """
    if (key is None) == (not every):
        fail("name one session key, or pass --all", code=EXIT_USAGE)
    settings = load(config)
    fields: dict[str, Any] = {"drain": drain}
    if every:
        fields["all"] = True
    else:
        fields["key"] = key
    try:
        answer = asyncio.run(ask(settings, "stop_session", **fields))
    except ControlError as exc:
        fail(str(exc))
    if answer is None:
        fail(f"{no_gateway(settings)}: there is nothing to stop")
    typer.echo(f"{key or 'all sessions'}: {answer['text']}")


# --- talking to the gateway ----------------------------------------------------------------


def no_gateway(settings: GatewayConfig) -> str:
    """The one way every command says that no gateway is running."""
    return (
        f"no gateway is running (no control socket at {settings.data_dir / 'gateway.sock'}); "
        "start one with `gateway run`"
    )


async def ask(config: GatewayConfig, op: str, **fields: Any) -> dict[str, Any] | None:
    """The running gateway's answer to ``op``, or None when no gateway is running."""
    return await ask_at(config.data_dir / "gateway.sock", op, **fields)


async def _offline_manager(config: GatewayConfig) -> tuple[ThreadManager, SessionStore]:
    """A manager over the store with no threads: answers from disk when no gateway runs."""
    from threads.manager import ThreadManager
    from threads.store import open_store
    from threads.store.base import StoreOptions

    store = open_store(config.store.url, StoreOptions(salvage=config.store.salvage))
    return ThreadManager(store=store, agent=_NoAgent(), config=config), store


class _NoAgent:
    async def run(self, run: Any) -> Any:
        raise RuntimeError("this manager only reads")


# --- text ------------------------------------------------------------------------------------


def session_lines(info: dict[str, Any]) -> list[str]:
    """``check-session`` as text: yes/no, durations and sizes with units."""
    key = info.get("session_key", "?")
    if not info.get("exists"):
        return [f"{key}: no such session (nothing stored under this key)"]
    lines = [f"{key}", f"  session id      {info.get('session_id', '-')}"]
    if info.get("quarantined"):
        record = info["quarantined"]
        lines.append("  readable        no: set aside, its key answers with an error")
        lines.append(f"  where           {place_text(record)}")
        lines.append(f"  why             {record.get('reason', '?')}")
        return lines
    lines.append(f"  agent           {info.get('agent', '-')}")
    lines.append(
        f"  on disk         {info.get('message_count', 0)} messages, "
        f"{info.get('turn_count', 0)} turns, {size_text(info.get('size_bytes', 0))}"
    )
    if info.get("last_modified"):
        lines.append(f"  last change     {_when(info['last_modified'])}")
    lines.append(f"  thread loaded   {yes_no(info.get('thread_active'))}")
    if info.get("thread_active"):
        state = str(info.get("thread_state", "?"))
        if state == "running":
            state += f" for {duration_text(float(info.get('thread_elapsed_sec', 0.0)))}"
            state += f", {info.get('thread_iterations', 0)} model calls so far"
            if info.get("thread_current_tool"):
                state += f", in tool {info['thread_current_tool']}"
        for request in info.get("thread_awaiting_approval", []):
            state += f", waiting for approval of {request['tool']} ({request['id']})"
        lines.append(f"  state           {state}")
        lines.append(f"  waiting         {info.get('thread_pending', 0)} message(s)")
    uncertain = info.get("delivery_uncertain") or []
    if uncertain:
        lines.append(f"  delivery uncertain: {len(uncertain)} send(s) a restart could not confirm")
        lines += _uncertain_lines(uncertain, "    ")
    known = {
        "session_key", "exists", "session_id", "agent", "message_count", "turn_count",
        "size_bytes", "last_modified", "thread_active", "thread_state", "thread_elapsed_sec",
        "thread_iterations", "thread_current_tool", "thread_pending", "thread_awaiting_approval",
        "delivery_uncertain",
    }  # fmt: skip
    lines += [f"  {name:<15} {_value(value)}" for name, value in info.items() if name not in known]
    return lines


def _uncertain_lines(sends: list[dict[str, Any]], indent: str) -> list[str]:
    """One line per send whose delivery is uncertain: when, what, to whom, its start."""
    return [
        f"{indent}{_when(str(s.get('recorded', '')))}  {s.get('kind', '?')} to "
        f"{s.get('session_key', '') + ' → ' if s.get('session_key') else ''}{s.get('to', '?')}: "
        f"{s.get('text', '')}"
        for s in sends
    ]


def _outbound_section(info: dict[str, Any]) -> list[str]:
    sends = info["outbound"].get("uncertain") or []
    if not sends:
        return ["outbound:", "  delivery uncertain  none"]
    return [
        "outbound:",
        f"  delivery uncertain  {len(sends)} send(s) found unconfirmed at start-up, not repeated",
        *_uncertain_lines(sends, "    "),
    ]


def health_lines(info: dict[str, Any]) -> list[str]:
    """``health`` as text: one section per part of the JSON, in a fixed order, then the rest."""
    lines: list[str] = []
    renderers = {
        "node": node_lines,
        "cluster": _cluster_section,
        "threads": _threads_section,
        "provider": _provider_section,
        "sessions": _sessions_section,
        "cron": _cron_section,
        "channels": _channels_section,
        "mcp": _mcp_section,
        "approvals": _approvals_section,
        "outbound": _outbound_section,
        "process": _process_section,
    }
    for name, render in renderers.items():
        if name in info:
            lines += render(info)
    for name, value in info.items():
        if name not in renderers and name != "all_threads":
            lines += [f"{name}:", *_generic(value, "  ")]
    return lines


def _cluster_section(info: dict[str, Any]) -> list[str]:
    return cluster_lines(info["cluster"])


def _threads_section(info: dict[str, Any]) -> list[str]:
    figures = info.get("threads", {})
    threads = info.get("all_threads", [])
    lines = [
        f"threads: {figures.get('active', len(threads))} loaded, "
        f"{figures.get('running', 0)} running, {figures.get('pending', 0)} waiting to run; "
        f"{figures.get('turns_in_flight', 0)} of {figures.get('max_concurrent_turns', '?')} "
        "turn slots in use"
    ]
    for thread in threads:
        state = str(thread.get("state", "?"))
        if state == "running":
            state += f" {duration_text(float(thread.get('elapsed_sec', 0.0)))}"
            if thread.get("iterations"):
                state += f", {thread['iterations']} model calls"
        line = (
            f"  {thread.get('session_key', '?')}  agent {thread.get('agent', '?')}  {state}"
            f"  {thread.get('pending', 0)} waiting"
        )
        if thread.get("current_tool"):
            line += f"  in tool {thread['current_tool']}"
        for request in thread.get("awaiting_approval", []):
            line += f"  awaiting approval of {request['tool']} ({request['id']})"
        detail = [f"session {thread.get('session_id', '?')}"]
        if thread.get("run_id"):
            detail.append(f"run {thread['run_id']}")
        if "idle_seconds" in thread:
            detail.append(f"last active {duration_text(float(thread['idle_seconds']))} ago")
        lines += [line, f"    {' · '.join(detail)}"]
    extra = set(figures) - {
        "active",
        "running",
        "pending",
        "turns_in_flight",
        "max_concurrent_turns",
    }
    lines += [f"  {name}: {_value(figures[name])}" for name in sorted(extra)]
    return lines


def _approvals_section(info: dict[str, Any]) -> list[str]:
    approvals = info["approvals"]
    lines = [f"approvals: {approvals.get('pending', 0)} waiting for a decision"]
    for request in approvals.get("requests", []):
        line = f"  {request['id']}  {request['tool']} in {request['session_key']}"
        if request.get("expiry"):
            line += f", denied if undecided by {_when(request['expiry'])}"
        lines.append(line)
    return lines


def _mcp_section(info: dict[str, Any]) -> list[str]:
    lines = ["mcp servers:"]
    for name, server in sorted(info["mcp"].items()):
        line = f"  {name}: {server.get('state', '?')}, {len(server.get('tools', []))} tools"
        if server.get("error"):
            line += f" ({server['error']})"
        lines.append(line)
    return lines


def _provider_section(info: dict[str, Any]) -> list[str]:
    provider = info["provider"]
    providers = provider.get("providers") or []
    lines = [
        "model:",
        f"  default          {provider.get('default_model', '?')}",
        f"  providers        {', '.join(providers) if providers else 'none (offline echo model)'}",
    ]
    extra = set(provider) - {"default_model", "providers"}
    return lines + [f"  {name:<16} {_value(provider[name])}" for name in sorted(extra)]


def _sessions_section(info: dict[str, Any]) -> list[str]:
    sessions = info["sessions"]
    lines = [
        "sessions:",
        f"  store            {sessions.get('store', '?')} ({sessions.get('backend', '?')})",
        f"  keys             {sessions.get('keys', '?')}",
    ]
    if sessions.get("writable") is False:
        lines.append(
            f"  writable         no, for {duration_text(float(sessions.get('down_seconds', 0)))}"
            f"; {sessions.get('writes_waiting', 0)} write(s) wait for it: {sessions.get('error')}"
        )
    quarantined = sessions.get("quarantined") or []
    lines.append(f"  quarantined      {len(quarantined) or 'none'}")
    lines += [f"    {quarantine_text(record)}" for record in quarantined]
    shown = {"store", "backend", "keys", "writable", "down_seconds", "writes_waiting", "error"}
    extra = set(sessions) - shown - {"quarantined"}
    return lines + [f"  {name:<16} {_value(sessions[name])}" for name in sorted(extra)]


def quarantine_text(record: dict[str, Any]) -> str:
    """One quarantined session: its key, where it is kept (and the line), and why."""
    return f"{record.get('session_key', '?')}: {place_text(record)} — {record.get('reason', '?')}"


def place_text(record: dict[str, Any]) -> str:
    """Where a quarantined session is kept, with the line that could not be read."""
    where = str(record.get("where", "?"))
    return f"{where}, line {record['line']}" if record.get("line") else where


def _cron_section(info: dict[str, Any]) -> list[str]:
    cron = info["cron"]
    lines = [
        "cron:",
        f"  running          {yes_no(cron.get('running'))}",
        f"  jobs             {cron.get('jobs', 0)} ({cron.get('enabled', 0)} enabled)",
    ]
    upcoming = cron.get("next") or []
    lines.append("  next fires" if upcoming else "  next fires       none")
    for item in upcoming:
        lines.append(
            f"    {_when(item.get('next_fire', ''))}  {item.get('id')} → {item.get('target')}"
        )
    extra = set(cron) - {"running", "jobs", "enabled", "next"}
    return lines + [f"  {name:<16} {_value(cron[name])}" for name in sorted(extra)]


def _channels_section(info: dict[str, Any]) -> list[str]:
    channels = info["channels"] or {}
    lines = ["channels:" if channels else "channels: none running"]
    for name, entry in channels.items():
        details = dict(entry) if isinstance(entry, dict) else {"state": entry}
        running = details.pop("running", None)
        words = [] if running is None else ["running" if running else "stopped"]
        if details.get("stopped"):
            words.append(f"({details.pop('stopped')})")
        words += [f"{k} {_value(v)}" for k, v in details.items() if v not in ("", None)]
        lines.append(f"  {name:<16} {'  '.join(words)}")
    return lines


def _process_section(info: dict[str, Any]) -> list[str]:
    process = info["process"]
    lines = [
        "process:",
        f"  pid              {process.get('pid', '?')}",
        f"  up               {duration_text(float(process.get('uptime_seconds', 0.0)))}",
        f"  memory           {size_text(process.get('rss_bytes', 0))} resident "
        f"(peak {size_text(process.get('max_rss_bytes', 0))})",
        f"  cpu              {duration_text(float(process.get('cpu_seconds', 0.0)))}",
    ]
    extra = set(process) - {"pid", "uptime_seconds", "rss_bytes", "max_rss_bytes", "cpu_seconds"}
    return lines + [f"  {name:<16} {_value(process[name])}" for name in sorted(extra)]


def _generic(value: Any, indent: str) -> list[str]:
    if isinstance(value, dict):
        out: list[str] = []
        for name, inner in value.items():
            if isinstance(inner, dict | list) and inner:
                out += [f"{indent}{name}:", *_generic(inner, indent + "  ")]
            else:
                out.append(f"{indent}{name}: {_value(inner)}")
        return out
    if isinstance(value, list):
        return [line for item in value for line in _generic(item, indent + "- ")] or [
            f"{indent}none"
        ]
    return [f"{indent}{_value(value)}"]


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return yes_no(value)
    if value is None or value == "":
        return "-"
    return str(value)


def _when(text: str) -> str:
    """An ISO time as ``2026-12-01 09:00:00 UTC`` (its own offset kept when not UTC)."""
    try:
        moment = datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return str(text)
    offset = moment.utcoffset()
    if offset is not None and not offset:
        return moment.strftime("%Y-%m-%d %H:%M:%S UTC")
    return moment.strftime("%Y-%m-%d %H:%M:%S %z").strip()
