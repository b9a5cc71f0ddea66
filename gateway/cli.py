"""The ``gateway`` command.

    gateway run            start the gateway (terminal, web chat, control socket)
    gateway chat           chat in this terminal: attached to a running gateway, else in-process
    gateway init           write a commented starter gateway.toml (asks, or takes flags)
    gateway config check   everything start-up would refuse, without starting
    gateway health         the running gateway: threads, model, sessions, cron, channels
    gateway check-session  one session by key
    gateway stop-session   stop a running turn and the exchanges it is part of
    gateway cron …         operate scheduled jobs (see ``gateway cron --help``)
    gateway sessions …     list sessions, read transcripts, set a send policy
    gateway pairing …      approve, deny and revoke who may message the bot directly
    gateway approvals …    tool calls waiting for a person: list, approve, deny; grants

Every command takes ``--config PATH`` (else ``GATEWAY_CONFIG``, else
``./gateway.toml`` when present, else the embedded defaults). Exit codes: 0
done; 1 the command failed (its one ``error: …`` line on stderr says why);
2 the command line is wrong. See :mod:`gateway.cli_kit`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Awaitable, Callable, Coroutine
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Annotated, Any

import typer

from config import GatewayConfig
from gateway import config_cli, nodes_cli, ops_cli
from gateway.approvals_cli import app as approvals_app
from gateway.arenas import settle_arenas
from gateway.cli_kit import EXIT_OK, EXIT_USAGE, App, ConfigOption, fail, load
from gateway.control import ControlClient
from gateway.cron_cli import app as cron_app
from gateway.errors import ControlError, GatewayError, GatewayGoneError
from gateway.heap import settle_heap
from gateway.heartbeat_cli import app as heartbeat_app
from gateway.pairing_cli import app as pairing_app
from gateway.session_edits_cli import app as sessions_app
from gateway.switching import settle_switching
from gateway.terminal import StopSignals, close_deadline, first_of, input_lines

if TYPE_CHECKING:
    from channels.cli import CliChannel
    from gateway.app import Gateway

# The gateway itself (aiohttp, the channels, the model clients) is imported by
# the commands that run it, so that quick commands start quickly.

app = App(name="gateway")

LOG_LEVELS = ("debug", "info", "warning", "error")
VerboseOption = Annotated[
    bool, typer.Option("--verbose", "-v", help="log what the gateway does (--log-level info)")
]
LogLevelOption = Annotated[
    str | None,
    typer.Option(
        "--log-level",
        help="debug, info, warning (the default) or error; logs go to stderr",
        metavar="LEVEL",
    ),
]


def package_version() -> str:
    try:
        return version("chat-gateway")
    except PackageNotFoundError:  # running from a checkout that was never installed
        return "unknown"


def _print_version(asked: bool) -> None:
    if asked:
        typer.echo(f"gateway {package_version()}")
        raise typer.Exit(EXIT_OK)


@app.callback()
def main_options(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version", help="print the version and exit", callback=_print_version, is_eager=True
        ),
    ] = False,
) -> None:
    """A chat-bot gateway: channels in, durable agent threads behind them.

    Start with `make run` (or `gateway run`); `gateway init` writes a starter
    gateway.toml. Exit codes: 0 done, 1 failed, 2 wrong command line.
    """


def setup_logging(verbose: bool, level: str | None = None) -> None:
    """Log to stderr at ``level`` (``-v`` is info); warnings and errors always show."""
    name = (level or ("info" if verbose else "warning")).lower()
    if name not in LOG_LEVELS:
        fail(f"--log-level {level!r} is not one of {', '.join(LOG_LEVELS)}", code=EXIT_USAGE)
    logging.basicConfig(
        level=getattr(logging, name.upper()),
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
        fail(str(exc))


@app.command()
def run(
    config: ConfigOption = None,
    verbose: VerboseOption = False,
    log_level: LogLevelOption = None,
) -> None:
    """Start the gateway and keep it running until Ctrl-C (or SIGTERM)."""
    # Before any thread starts: the threads that open sessions share one C heap.
    settle_arenas()
    setup_logging(verbose, log_level)
    run_or_exit(_run(load(config)))


async def _run(config: GatewayConfig) -> None:
    from gateway.app import Gateway

    deadline = config.threads.close_deadline_seconds
    with StopSignals(waiting_for=f"running turns have up to {deadline:g} s to finish") as stop:
        async with Gateway(config) as gw:
            # What start-up allocated lives as long as the process: out of every collection.
            settle_heap()
            # The store's threads get the GIL back from a busy event loop sooner.
            settle_switching()
            model = config.models.default
            print(
                f"gateway running · sessions: {config.store.safe_url} · model: {model}", flush=True
            )
            if model == "echo":
                print(
                    "  no model is configured: replies come from the offline echo model",
                    flush=True,
                )
            if gw.member is not None:
                print(
                    f"  node:      {gw.member.node} (boot {gw.member.identity.boot}), one of the gateways "
                    "on this Redis (`gateway nodes` lists them)",
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
            _shorten_close(gw, stop)


def _shorten_close(gw: Gateway, stop: StopSignals) -> None:
    """After a Ctrl-C running turns get a moment, not the whole close deadline."""
    deadline = close_deadline(stop, gw.manager.close_deadline)
    gw.manager.close_deadline = deadline
    stop.waiting_for = f"running turns have up to {deadline:g} s to finish"


def _print_reply(text: str) -> None:
    print(text, flush=True)


async def _read_lines(submit: Callable[[str], Awaitable[object]]) -> None:
    """Read stdin lines until end of input and hand each non-empty one to ``submit``."""
    async for line in input_lines(sys.stdin.fileno()):
        text = line.strip()
        if text:
            await submit(text)


@app.command()
def chat(
    config: ConfigOption = None,
    verbose: VerboseOption = False,
    log_level: LogLevelOption = None,
) -> None:
    """Chat in this terminal: attached to a running gateway, or in-process when none runs.

    Ctrl-C (or SIGTERM) stops at once; at the end of input (Ctrl-D, or the end
    of what was piped in) it waits for the answers first.
    """
    setup_logging(verbose, log_level)
    run_or_exit(_chat(load(config)))


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
            _shorten_close(gw, stop)


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


# After run and chat, so `gateway --help` lists them in the order a newcomer needs them.
config_cli.register(app)
ops_cli.register(app)
nodes_cli.register(app)
app.add_typer(cron_app, name="cron")
app.add_typer(sessions_app, name="sessions")
app.add_typer(heartbeat_app, name="heartbeat")
app.add_typer(pairing_app, name="pairing")
app.add_typer(approvals_app, name="approvals")


def main() -> None:
    app(prog_name="gateway")
