"""The ``gateway`` command.

    gateway run            start the gateway (terminal, web chat, control socket)
    gateway chat           chat in this terminal: attached to a running gateway, else in-process
    gateway config check   validate a configuration file
    gateway cron …         operate scheduled jobs (see ``gateway cron --help``)

Every command takes ``--config PATH`` (else ``GATEWAY_CONFIG``, else
``./gateway.toml`` when present, else the embedded defaults).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from pathlib import Path
from typing import Annotated

import typer

from config import ConfigError, GatewayConfig, load_config
from gateway.app import Gateway
from gateway.control import ControlClient, ControlError

app = typer.Typer(
    name="gateway",
    help="A chat-bot gateway: channels in, durable agent threads behind them.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
config_app = typer.Typer(help="Inspect the configuration.", no_args_is_help=True)
app.add_typer(config_app, name="config")

ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config", "-c", help="gateway.toml to load (default: $GATEWAY_CONFIG, ./gateway.toml)"
    ),
]
VerboseOption = Annotated[bool, typer.Option("--verbose", "-v", help="log what the gateway does")]


def load_or_exit(path: Path | None) -> GatewayConfig:
    """The configuration, or every problem printed and exit code 2."""
    try:
        return load_config(path)
    except ConfigError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None


def setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


@app.command()
def run(config: ConfigOption = None, verbose: VerboseOption = False) -> None:
    """Start the gateway and keep it running until Ctrl-C."""
    setup_logging(verbose)
    settings = load_or_exit(config)
    try:
        asyncio.run(_run(settings))
    except ControlError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None


async def _run(config: GatewayConfig) -> None:
    async with Gateway(config) as gw:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, gw.stop)
        model = config.models.default
        print(f"gateway running · sessions: {config.store.url} · model: {model}", flush=True)
        if model == "echo":
            print("  no model is configured: replies come from the offline echo model", flush=True)
        if gw.web is not None:
            print(f"  web chat:  {gw.web.url}", flush=True)
        if gw.cli is not None:
            print("  terminal:  run `gateway chat` in another terminal", flush=True)
            if sys.stdin.isatty():
                print("             or type here (Ctrl-D or Ctrl-C to stop)", flush=True)
        print("  stop with Ctrl-C", flush=True)
        if gw.cli is not None and sys.stdin.isatty():
            gw.cli.listeners.append(_print_reply)
            repl = asyncio.create_task(_read_lines(gw.cli.submit), name="terminal input")
            stopped = asyncio.create_task(gw.serve_forever(), name="serve")
            await asyncio.wait([repl, stopped], return_when=asyncio.FIRST_COMPLETED)
            for task in (repl, stopped):
                task.cancel()
            await asyncio.gather(repl, stopped, return_exceptions=True)
        else:
            await gw.serve_forever()


def _print_reply(text: str) -> None:
    print(text, flush=True)


async def _read_lines(submit: object) -> None:
    """Read stdin lines until EOF and hand each non-empty one to ``submit``."""
    assert callable(submit)
    while True:
        line = await asyncio.to_thread(sys.stdin.readline)
        if not line:
            return
        text = line.strip()
        if text:
            await submit(text)


@app.command()
def chat(config: ConfigOption = None, verbose: VerboseOption = False) -> None:
    """Chat in this terminal: attached to a running gateway, or in-process when none runs."""
    setup_logging(verbose)
    settings = load_or_exit(config)
    try:
        asyncio.run(_chat(settings))
    except ControlError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None


async def _chat(config: GatewayConfig) -> None:
    client = await ControlClient.connect(config.data_dir / "gateway.sock")
    if client is not None:
        await _chat_attached(client)
        return
    channels = config.channels.model_copy(
        update={"web": config.channels.web.model_copy(update={"enabled": False})}
    )
    local = config.model_copy(update={"channels": channels})
    async with Gateway(local) as gw:
        if gw.cli is None:
            raise ControlError("the terminal channel is disabled ([channels.cli] enabled = false)")
        gw.cli.listeners.append(_print_reply)
        await _read_lines(gw.cli.submit)
        await gw.wait_idle()


async def _chat_attached(client: ControlClient) -> None:
    printer = asyncio.create_task(_print_replies(client), name="replies")

    async def submit(text: str) -> None:
        await client.call("chat", text=text)

    try:
        await _read_lines(submit)
        # Replies sent before the idle answer are already queued: the socket is ordered.
        await client.call("idle")
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


@config_app.command("check")
def config_check(
    file: Annotated[Path | None, typer.Argument(help="the file to check")] = None,
    config: ConfigOption = None,
) -> None:
    """Validate a configuration file: each problem with its dotted path and value."""
    path = file or config
    try:
        load_config(path)
    except ConfigError as exc:
        typer.echo(f"{exc.source}: {len(exc.problems)} problem(s)")
        for problem in exc.problems:
            typer.echo(f"  {problem}")
        raise typer.Exit(1) from None
    typer.echo(f"{path or 'the default configuration'}: ok")


def _mount_optional() -> None:
    with contextlib.suppress(ImportError):
        from gateway.cron_cli import app as cron_app

        app.add_typer(cron_app, name="cron")


_mount_optional()


def main() -> None:
    app()
