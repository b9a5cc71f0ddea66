"""``gateway config check`` and ``gateway init``: a configuration that starts, before starting.

``config check`` validates the file and then asks everything ``gateway run``
would refuse (:mod:`gateway.preflight`): data directories, API key variables,
channel secrets, the HTTP port, a gateway already running on the data
directory, Redis servers that do not answer. A problem it finds exits 1, as
``gateway run`` does for the same problem, and prints the same words.

``gateway init`` writes a short, commented ``gateway.toml``: asked for
interactively on a terminal, or given as flags (``--provider``,
``--telegram-token-env`` …) for scripts.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from config import ConfigError, load_config
from config.loading import config_path
from gateway.cli_kit import EXIT_USAGE, App, ConfigOption, fail, fail_config
from gateway.starter import PROVIDERS, Choices, render

config_app = App(help="Check the configuration: what `gateway run` would refuse, without running.")


def register(app: App) -> None:
    """Put ``config check`` and ``init`` on the ``gateway`` app."""
    app.add_typer(config_app, name="config")
    app.command("init")(init)


@config_app.command("check")
def config_check(
    file: Annotated[Path | None, typer.Argument(help="the file to check")] = None,
    config: ConfigOption = None,
) -> None:
    """Everything start-up would refuse: the file, key variables, secrets, the port, the stores.

    Prints `<file>: ok` and exits 0, or every problem (each with its setting)
    on stderr and exits 1 — the code `gateway run` exits with for it.
    """
    from gateway.preflight import machine_problems, preflight, reachability_problems

    path = file or config
    try:
        settings = load_config(path)
    except ConfigError as exc:
        fail_config(exc)
    source = str(config_path(path) or "the default configuration")
    problems = [
        *preflight(settings),
        *machine_problems(settings),
        *asyncio.run(reachability_problems(settings)),
    ]
    if problems:
        fail_config(ConfigError(source, problems))
    typer.echo(f"{source}: ok")


def init(
    path: Annotated[Path, typer.Option("--path", help="where to write it", metavar="FILE")] = Path(
        "gateway.toml"
    ),
    provider: Annotated[
        str | None,
        typer.Option(
            "--provider", help=f"the model provider: {', '.join(PROVIDERS)}", metavar="NAME"
        ),
    ] = None,
    model: Annotated[
        str | None, typer.Option("--model", help="the model (default: the provider's starter)")
    ] = None,
    api_key_env: Annotated[
        str | None,
        typer.Option("--api-key-env", help="the variable holding the API key", metavar="VAR"),
    ] = None,
    telegram_token_env: Annotated[
        str | None,
        typer.Option(
            "--telegram-token-env",
            help="enable Telegram; the variable holding the bot token",
            metavar="VAR",
        ),
    ] = None,
    discord_token_env: Annotated[
        str | None,
        typer.Option(
            "--discord-token-env",
            help="enable Discord; the variable holding the bot token",
            metavar="VAR",
        ),
    ] = None,
    timezone: Annotated[
        str | None, typer.Option("--timezone", help="IANA zone, e.g. Europe/Berlin", metavar="TZ")
    ] = None,
    data_dir: Annotated[
        str | None, typer.Option("--data-dir", help="where state lives (default ./data)")
    ] = None,
    interactive: Annotated[
        bool | None,
        typer.Option(
            "--interactive/--no-interactive",
            help="ask for each choice (default: on a terminal, unless --provider is given)",
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="replace an existing file")] = False,
) -> None:
    """Write a commented starter gateway.toml: model provider, Telegram, Discord.

    Secrets are never written: you name the environment variable that holds
    each one. Run it with no flags on a terminal to be asked, or give flags:

        gateway init --provider openai --telegram-token-env TELEGRAM_BOT_TOKEN
    """
    if path.exists() and not force:
        fail(f"{path} exists; pass --force to replace it (or --path to write elsewhere)")
    ask = interactive if interactive is not None else (provider is None and sys.stdin.isatty())
    given = Choices(
        provider=provider or "echo",
        model=model or "",
        api_key_env=api_key_env or "",
        telegram_token_env=telegram_token_env or "",
        discord_token_env=discord_token_env or "",
        timezone=timezone or "UTC",
        data_dir=data_dir or "./data",
    )
    choices = _ask(given, provider_given=provider is not None) if ask else given
    try:
        choices = choices.checked()
    except ValueError as exc:
        fail(str(exc), code=EXIT_USAGE)
    text = render(choices)
    path.write_text(text, encoding="utf-8")
    typer.echo(f"wrote {path}")
    for line in _next_steps(path, choices):
        typer.echo(line)


def _ask(given: Choices, *, provider_given: bool) -> Choices:
    names = ", ".join(PROVIDERS)
    provider = given.provider
    if not provider_given:
        provider = typer.prompt(f"Model provider ({names})", default="openai")
    chosen = PROVIDERS.get(provider)
    model = given.model
    key_env = given.api_key_env
    if chosen is not None and chosen.name != "echo":
        model = model or typer.prompt("Model", default=chosen.model)
        if chosen.key_env:
            key_env = key_env or typer.prompt(
                "Environment variable holding the API key", default=chosen.key_env
            )
    telegram = given.telegram_token_env
    if not telegram and typer.confirm("Connect a Telegram bot?", default=False):
        telegram = typer.prompt(
            "Environment variable holding its token", default="TELEGRAM_BOT_TOKEN"
        )
    discord = given.discord_token_env
    if not discord and typer.confirm("Connect a Discord bot?", default=False):
        discord = typer.prompt(
            "Environment variable holding its token", default="DISCORD_BOT_TOKEN"
        )
    timezone = typer.prompt("Time zone (IANA)", default=given.timezone)
    return Choices(
        provider=provider,
        model=model,
        api_key_env=key_env,
        telegram_token_env=telegram,
        discord_token_env=discord,
        timezone=timezone,
        data_dir=given.data_dir,
    )


def _next_steps(path: Path, choices: Choices) -> list[str]:
    provider = PROVIDERS[choices.provider]
    wanted = [
        name
        for name in (
            choices.api_key_env or provider.key_env,
            choices.telegram_token_env,
            choices.discord_token_env,
        )
        if name
    ]
    missing = [name for name in wanted if not os.environ.get(name)]
    steps = ["next:"]
    steps += [f"  export {name}=…        (not set in this shell yet)" for name in missing]
    shown = "" if path == Path("gateway.toml") else f" --config {path}"
    steps.append(f"  gateway config check{shown}   # says whether it will start")
    steps.append("  make run                      # starts it")
    return steps
