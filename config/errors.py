"""Errors of the config package.

    ConfigError            the configuration cannot be used
    └── ConfigFileError    the file is missing or is not TOML

A :class:`ConfigError` carries every problem found, each with its dotted path
and the offending value (secrets shown as ``'**********'``, the credentials of
a URL as ``***``). A :class:`ConfigFileError` is one line: ``<file>: <why>``.
"""

from __future__ import annotations

from dataclasses import dataclass

from config.redaction import redact_text


@dataclass(frozen=True, slots=True, kw_only=True)
class Problem:
    """One thing wrong with the configuration."""

    path: str
    message: str
    value: str = ""

    def __str__(self) -> str:
        shown = f" (got {self.value})" if self.value else ""
        return redact_text(f"{self.path or '<root>'}: {self.message}{shown}")


class ConfigError(Exception):
    """The configuration is invalid; ``problems`` lists each thing wrong."""

    def __init__(self, source: str, problems: list[Problem]) -> None:
        self.source = source
        self.problems = problems
        lines = "\n".join(f"  {p}" for p in problems)
        super().__init__(f"invalid configuration in {source}:\n{lines}")


class ConfigFileError(ConfigError):
    """The configuration file cannot be read or parsed."""

    def __init__(self, source: str, message: str) -> None:
        super().__init__(source, [Problem(path="", message=message)])
        self.args = (f"{source}: {message}",)

    def __str__(self) -> str:
        return str(self.args[0])
