"""The ``gateway`` command.

    gateway run            start the gateway (terminal, web chat, control socket)
    gateway chat           chat in this terminal: attached to a running gateway, else in-process
    gateway config check   validate a configuration file
    gateway health         every active thread and the gateway's figures
    gateway check-session  one session by key
    gateway stop-session   soft-stop a running thread
    gateway cron …         operate scheduled jobs (see ``gateway cron --help``)
    gateway sessions …     list sessions, read transcripts, set a send policy
    gateway pairing …      approve, deny and revoke who may message the bot directly

Every command takes ``--config PATH`` (else ``GATEWAY_CONFIG``, else
``./gateway.toml`` when present, else the embedded defaults).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import sys
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import orjson
import typer

from config import ConfigError, ConfigFileError, GatewayConfig, Problem, load_config
from config.loading import config_path
from config.redaction import redact_text
from gateway.control import ControlClient
from gateway.cron_cli import app as cron_app
from gateway.errors import ControlError, GatewayError, GatewayGoneError
from gateway.pairing_cli import app as pairing_app
from gateway.sessions_cli import app as sessions_app
from gateway.terminal import StopSignals, first_of, input_lines
from threads.errors import ThreadsError
from threads.store import check_reachable

if TYPE_CHECKING:
    from channels.cli import CliChannel
    from threads.manager import ThreadManager
    from threads.store.base import SessionStore

# The gateway itself (aiohttp, the channels, the model clients) is imported by
# the commands that run it, so that quick commands start quickly.

app = typer.Typer(
    name="gateway",
    help="A chat-bot gateway: channels in, durable agent threads behind them.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
config_app = typer.Typer(help="Inspect the configuration.", no_args_is_help=True)
app.add_typer(config_app, name="config")
app.add_typer(sessions_app, name="sessions")
app.add_typer(cron_app, name="cron")
app.add_typer(pairing_app, name="pairing")

ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config", "-c", help="gateway.toml to load (default: $GATEWAY_CONFIG, ./gateway.toml)"
    ),
]
VerboseOption = Annotated[bool, typer.Option("--verbose", "-v", help="log what the gateway does")]


def load_or_exit(path: Path | None) -> GatewayConfig:
    """The configuration, or every problem printed (credentials redacted) and exit code 2."""
    try:
        return load_config(path)
    except ConfigError as exc:
        typer.echo(redact_text(str(exc)), err=True)
        raise typer.Exit(2) from None


def setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def run_or_exit(main: Coroutine[Any, Any, None]) -> None:
    """Run ``main``; a gateway error is printed as one line, without a traceback (exit 1).

    The line is scrubbed of URL credentials, whatever part of the gateway wrote it.
    """
    try:
        asyncio.run(main)
    except GatewayError as exc:
        typer.echo(f"error: {redact_text(str(exc))}", err=True)
        raise typer.Exit(1) from None


@app.command()
def run(config: ConfigOption = None, verbose: VerboseOption = False) -> None:
    """Start the gateway and keep it running until Ctrl-C."""
    setup_logging(verbose)
    run_or_exit(_run(load_or_exit(config)))


async def _run(config: GatewayConfig) -> None:
    from gateway.app import Gateway

    deadline = config.threads.close_deadline_seconds
    with StopSignals(waiting_for=f"running turns have up to {deadline:g} s to finish") as stop:
        async with Gateway(config) as gw:
            # What start-up allocated lives as long as the process: keep it out of the
            # collector's full passes, which would otherwise pause turns and cron fires.
            gc.collect()
            gc.freeze()
            model = config.models.default
            print(
                f"gateway running · sessions: {config.store.safe_url} · model: {model}", flush=True
            )
            if model == "echo":
                print(
                    "  no model is configured: replies come from the offline echo model",
                    flush=True,
                )
            if gw.web is not None:
                print(f"  web chat:  {gw.web.url}", flush=True)
            if gw.api is not None and gw.http is not None:
                print(f"  API:       {gw.http.url}v1 (OpenAI-compatible)", flush=True)
            if gw.admin is not None:
                print(f"  dashboard: {gw.admin.url} (log in with the admin token)", flush=True)
            typing_here = gw.cli is not None and sys.stdin.isatty()
            if gw.cli is not None:
                print("  terminal:  run `gateway chat` in another terminal", flush=True)
                if typing_here:
                    print("             or type here (Ctrl-D or Ctrl-C to stop)", flush=True)
            print("  stop with Ctrl-C", flush=True)
            if gw.cli is not None and typing_here:
                gw.cli.listeners.append(_print_reply)
                await first_of(stop.wait(), gw.serve_forever(), _read_lines(gw.cli.submit))
            else:
                await first_of(stop.wait(), gw.serve_forever())


def _print_reply(text: str) -> None:
    print(text, flush=True)


async def _read_lines(submit: Callable[[str], Awaitable[None]]) -> None:
    """Read stdin lines until end of input and hand each non-empty one to ``submit``."""
    async for line in input_lines(sys.stdin.fileno()):
        text = line.strip()
        if text:
            await submit(text)


@app.command()
def chat(config: ConfigOption = None, verbose: VerboseOption = False) -> None:
    """Chat in this terminal: attached to a running gateway, or in-process when none runs.

    Ctrl-C (or SIGTERM) stops at once; at the end of input (Ctrl-D, or the end
    of what was piped in) it waits for the answers first.
    """
    setup_logging(verbose)
    run_or_exit(_chat(load_or_exit(config)))


async def _chat(config: GatewayConfig) -> None:
    deadline = config.threads.close_deadline_seconds
    with StopSignals(waiting_for=f"running turns have up to {deadline:g} s to finish") as stop:
        client = await ControlClient.connect(config.data_dir / "gateway.sock")
        if client is not None:
            await _chat_attached(client, stop)
            return
        channels = config.channels.model_copy(
            update={"web": config.channels.web.model_copy(update={"enabled": False})}
        )
        local = config.model_copy(update={"channels": channels})
        from gateway.app import Gateway

        async with Gateway(local) as gw:
            if gw.cli is None:
                raise ControlError(
                    "the terminal channel is disabled ([channels.cli] enabled = false)"
                )
            gw.cli.listeners.append(_print_reply)

            async def converse(cli: CliChannel) -> None:
                await _read_lines(cli.submit)
                await gw.wait_idle()

            await first_of(converse(gw.cli), stop.wait())


async def _chat_attached(client: ControlClient, stop: StopSignals) -> None:
    """Chat through a running gateway until input ends, a stop, or the gateway goes away.

    The gateway going away raises :class:`GatewayGoneError` (one line, exit 1),
    after the replies that arrived before it are printed.
    """
    printer = asyncio.create_task(_print_replies(client), name="replies")

    async def submit(text: str) -> None:
        await client.call("chat", text=text)

    async def converse() -> None:
        await _read_lines(submit)
        # Replies sent before the idle answer are already queued: the socket is ordered.
        await client.call("idle")

    async def gone() -> None:
        await client.wait_disconnected()
        raise GatewayGoneError()

    try:
        await first_of(converse(), stop.wait(), gone())
    finally:
        printer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await printer
        while not client.replies.empty():
            _print_reply(client.replies.get_nowait())
        await client.close()


async def _print_replies(client: ControlClient) -> None:
    while True:
        _print_reply(await client.replies.get())


JsonOption = Annotated[bool, typer.Option("--json", help="print JSON instead of text")]


async def _ask(config: GatewayConfig, op: str, **fields: Any) -> dict[str, Any] | None:
    """The running gateway's answer to ``op``, or None when no gateway is running."""
    client = await ControlClient.connect(config.data_dir / "gateway.sock")
    if client is None:
        return None
    try:
        return await client.call(op, **fields)
    finally:
        await client.close()


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


def _print_json_or(data: dict[str, Any], as_json: bool, text: str) -> None:
    if as_json:
        typer.echo(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode())
    else:
        typer.echo(text)


@app.command("check-session")
def check_session(
    key: Annotated[str, typer.Argument(help="the session key, e.g. cli:threads:find-news")],
    config: ConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Inspect a session by key: on disk, and its live thread when a gateway runs it."""
    settings = load_or_exit(config)

    async def go() -> dict[str, Any]:
        answer = await _ask(settings, "check_session", key=key)
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
    except (ControlError, ThreadsError, ValueError) as exc:
        typer.echo(f"error: {redact_text(str(exc))}", err=True)
        raise typer.Exit(1) from None
    lines = [f"{k}: {v}" for k, v in info.items()]
    _print_json_or(info, as_json, "\n".join(lines))
    if not info.get("exists"):
        raise typer.Exit(1)


@app.command()
def health(config: ConfigOption = None, as_json: JsonOption = False) -> None:
    """Every active thread, with provider, session, cron, channel and memory figures."""
    settings = load_or_exit(config)
    try:
        answer = asyncio.run(_ask(settings, "health"))
    except ControlError as exc:
        typer.echo(f"error: {redact_text(str(exc))}", err=True)
        raise typer.Exit(1) from None
    if answer is None:
        typer.echo(
            f"no gateway is running (no control socket at {settings.data_dir / 'gateway.sock'})",
            err=True,
        )
        raise typer.Exit(1)
    info = dict(answer["health"])
    threads = info.get("all_threads", [])
    lines = [
        f"threads: {len(threads)} active",
        *(
            f"  {t['session_key']:<40} {t['agent']:<12} {t['state']:<8} pending {t['pending']}"
            + (f"  tool {t['current_tool']}" if t.get("current_tool") else "")
            for t in threads
        ),
        f"model: {info['provider']['default_model']}",
        f"sessions: {info['sessions']['keys']} keys in {info['sessions']['store']}",
        *(
            f"mcp {name}: {server['state']}, {len(server['tools'])} tools"
            + (f" ({server['error']})" if server.get("error") else "")
            for name, server in info.get("mcp", {}).items()
        ),
        f"memory: {info['process']['rss_bytes'] // 1024 // 1024} MiB resident",
    ]
    _print_json_or(info, as_json, "\n".join(lines))


@app.command("stop-session")
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
    """Stop a turn and the exchange chains it is part of (via the control socket).

    A chat session's turn ends at once and its user is told; a child's winds down
    at its next step boundary. The queued system wakes of those chains are dropped
    everywhere; the user's own queued messages stay unless --drain.
    """
    if (key is None) == (not every):
        typer.echo("error: name one session key, or pass --all", err=True)
        raise typer.Exit(2)
    settings = load_or_exit(config)
    fields: dict[str, Any] = {"drain": drain}
    if every:
        fields["all"] = True
    else:
        fields["key"] = key
    try:
        answer = asyncio.run(_ask(settings, "stop_session", **fields))
    except ControlError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    if answer is None:
        typer.echo(
            f"error: no gateway is running (no control socket at "
            f"{settings.data_dir / 'gateway.sock'}): there is nothing to stop",
            err=True,
        )
        raise typer.Exit(1)
    typer.echo(f"{key or 'all sessions'}: {answer['text']}")


@config_app.command("check")
def config_check(
    file: Annotated[Path | None, typer.Argument(help="the file to check")] = None,
    config: ConfigOption = None,
) -> None:
    """Validate a configuration file: each problem with its dotted path and value.

    Past the file itself, what start-up would refuse on this machine is checked
    too (see :mod:`gateway.preflight`): data directories open to others, a
    provider whose API key variable is not set.
    """
    from gateway.preflight import preflight

    path = file or config
    try:
        settings = load_config(path)
    except ConfigFileError as exc:
        typer.echo(str(exc))
        raise typer.Exit(1) from None
    except ConfigError as exc:
        _print_problems(exc.source, exc.problems)
        raise typer.Exit(1) from None
    source = str(config_path(path) or "the default configuration")
    problems = preflight(settings)
    if problems:
        _print_problems(source, problems)
        raise typer.Exit(1)
    typer.echo(f"{source}: ok")


def _print_problems(source: str, problems: list[Problem]) -> None:
    typer.echo(f"{source}: {len(problems)} problem(s)")
    for problem in problems:
        typer.echo(f"  {problem}")


def main() -> None:
    app()
