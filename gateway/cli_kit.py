"""What every ``gateway`` command shares: one error style, one JSON style, tables that fit.

* Errors are one line on stderr, ``error: …`` (credentials redacted), and the
  exit code says what kind: :data:`EXIT_FAILED` (1) when the command could not
  do its work — a bad configuration, no such job, no gateway running, a store
  that cannot be reached — and :data:`EXIT_USAGE` (2) when the command line
  itself is wrong (an unknown option, a value an option refuses).
* ``--json`` prints one JSON object (never a bare list), indented, on stdout.
* Text goes through :func:`console`: as wide as the terminal, or 80 columns
  when stdout is not one, so a table's cells wrap inside their columns and
  no row breaks across lines.
* :class:`App` is ``typer.Typer`` with the house defaults: a bare group prints
  its help and exits 0, flags show no ``<bool>`` type, no shell-completion
  options, no pretty tracebacks.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, NoReturn

import orjson
import typer
from rich.console import Console
from typer.core import TyperCommand, TyperGroup, TyperOption

from config import ConfigError, ConfigFileError, GatewayConfig, load_config
from config.redaction import redact_text

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
NARROW = 80
"""The width text is laid out for when stdout is not a terminal (a pipe, a file, a test)."""


def _plain_flags(params: list[Any]) -> list[Any]:
    """Flags take no value: show none (typer would print ``<bool>`` beside each)."""
    for param in params:
        if isinstance(param, TyperOption) and param.is_flag:
            param.metavar = ""
    return params


class Command(TyperCommand):
    """A command whose help shows no type beside its flags."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _plain_flags(super().get_params(ctx))


class Group(TyperGroup):
    """A group that prints its help and exits 0 when given no command."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _plain_flags(super().get_params(ctx))

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if not args and self.no_args_is_help and not ctx.resilient_parsing:
            typer.echo(ctx.get_help(), nl=False)
            ctx.exit(EXIT_OK)
        return super().parse_args(ctx, args)


class App(typer.Typer):
    """``typer.Typer`` whose groups and commands follow the house style (see the module)."""

    def __init__(self, **options: Any) -> None:
        options.setdefault("cls", Group)
        options.setdefault("no_args_is_help", True)
        options.setdefault("add_completion", False)
        options.setdefault("pretty_exceptions_enable", False)
        super().__init__(**options)

    def command(self, *args: Any, **options: Any) -> Callable[[Any], Any]:
        options.setdefault("cls", Command)
        return super().command(*args, **options)


ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config", "-c", help="gateway.toml to load (default: $GATEWAY_CONFIG, ./gateway.toml)"
    ),
]
JsonOption = Annotated[
    bool, typer.Option("--json", help="print one JSON object instead of text (see docs)")
]


def fail(message: str, *, code: int = EXIT_FAILED) -> NoReturn:
    """Print ``error: message`` on stderr (credentials redacted) and exit with ``code``."""
    typer.echo(f"error: {redact_text(message)}", err=True)
    raise typer.Exit(code)


def note(message: str) -> None:
    """A remark on stderr that is not an error (``note: …``): stdout stays the result."""
    typer.echo(f"note: {redact_text(message)}", err=True)


def config_problem_lines(exc: ConfigError) -> list[str]:
    """A configuration error as the lines every command prints: a headline, then each problem."""
    if isinstance(exc, ConfigFileError):
        return [str(exc)]
    count = len(exc.problems)
    return [
        f"{exc.source}: {count} problem{'s' if count != 1 else ''}",
        *(f"  {problem}" for problem in exc.problems),
    ]


def fail_config(exc: ConfigError) -> NoReturn:
    """Report a configuration that does not load, as ``config check`` does, and exit 1."""
    first, *rest = config_problem_lines(exc)
    typer.echo(f"error: {redact_text(first)}", err=True)
    for line in rest:
        typer.echo(redact_text(line), err=True)
    raise typer.Exit(EXIT_FAILED)


def load(path: Path | None) -> GatewayConfig:
    """The configuration, or every problem on stderr and exit 1 (as ``gateway run`` does)."""
    try:
        return load_config(path)
    except ConfigError as exc:
        fail_config(exc)


def print_json(data: dict[str, Any]) -> None:
    """One JSON object on stdout, indented, keys in the order given."""
    typer.echo(orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode())


def width() -> int:
    """The terminal's width when stdout is one; else ``$COLUMNS`` when set; else 80."""
    stream = sys.stdout
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    if tty:
        return shutil.get_terminal_size((NARROW, 24)).columns
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() and int(columns) > 0 else NARROW


def console() -> Console:
    """A console for this command's text: sized by :func:`width`, no markup surprises."""
    return Console(width=width(), highlight=False, soft_wrap=False, emoji=False)


def yes_no(value: object) -> str:
    return "yes" if value else "no"


def size_text(count: float) -> str:
    """Bytes in the largest unit that keeps the number under 1024: ``12.3 KiB``."""
    units = ("bytes", "KiB", "MiB", "GiB", "TiB")
    amount = float(count)
    for unit in units:
        if amount < 1024 or unit == units[-1]:
            if unit == "bytes":
                return f"{int(amount)} byte{'s' if int(amount) != 1 else ''}"
            return f"{amount:.1f} {unit}"
        amount /= 1024
    raise AssertionError("unreachable")


def duration_text(seconds: float) -> str:
    """A duration as a person says it: ``0.4 s``, ``12 s``, ``3 min 5 s``, ``2 h 10 min``, ``3 d 4 h``."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def lateness_text(milliseconds: float) -> str:
    """How late a fire was, rounded as a person reads it: ``on time``, ``388 ms``, ``2.4 s``."""
    if milliseconds < 1:
        return "on time"
    if milliseconds < 1000:
        return f"{round(milliseconds)} ms late"
    return f"{duration_text(milliseconds / 1000)} late"
