"""Argument predicates (seed 003, ``Arg``): a JSON pointer and the test its value must pass.

``equals`` compares as JSON: strings and booleans exactly, arrays and objects
deeply (key order never matters), two integers digit for digit, and a number
with a fraction or an exponent as a float (so 1, 1.0 and 1e0 are equal).
``prefix`` is a plain string prefix (end it with the separator, or "/ws"
matches "/ws-evil"). ``glob`` has two wildcards: ``*`` is any run of
characters, the empty run included, ``?`` exactly one character; every other
character is itself, and ``*`` spans ``/`` (a command is not a path).

The arguments' SHA-256 names exactly what a decision decided: the hex digest
of their canonical JSON (keys sorted, no spaces).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import orjson

_MISSING = object()


@dataclass(frozen=True, slots=True, kw_only=True)
class ArgTest:
    """One predicate: ``pointer`` and exactly one of ``equals`` / ``prefix`` / ``glob``."""

    pointer: str = ""
    equals: Any = _MISSING
    prefix: str | None = None
    glob: str | None = None

    @classmethod
    def from_wire(cls, wire: Mapping[str, Any]) -> ArgTest:
        """A predicate from its stored form (a grant's, a rule's)."""
        return cls(
            pointer=str(wire.get("pointer", "")),
            equals=wire.get("equals", _MISSING),
            prefix=wire.get("prefix"),
            glob=wire.get("glob"),
        )

    def wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"pointer": self.pointer}
        if self.equals is not _MISSING:
            out["equals"] = self.equals
        if self.prefix is not None:
            out["prefix"] = self.prefix
        if self.glob is not None:
            out["glob"] = self.glob
        return out

    def matches(self, args: Mapping[str, Any]) -> bool:
        """Whether the value at the pointer passes the test (a missing value never does)."""
        value = resolve(args, self.pointer)
        if value is _MISSING:
            return False
        if self.equals is not _MISSING:
            return json_equal(value, self.equals)
        if not isinstance(value, str):
            return False
        if self.prefix is not None:
            return bool(self.prefix) and value.startswith(self.prefix)
        if self.glob is not None:
            return _glob(self.glob).fullmatch(value) is not None
        return False

    def describe(self) -> str:
        where = self.pointer or "(arguments)"
        if self.equals is not _MISSING:
            return f"{where} = {orjson.dumps(self.equals).decode()}"
        if self.prefix is not None:
            return f"{where} starts with {self.prefix!r}"
        return f"{where} matches {self.glob!r}"


def all_match(tests: Sequence[ArgTest], args: Mapping[str, Any]) -> bool:
    """Every predicate holds (no predicates: any arguments)."""
    return all(t.matches(args) for t in tests)


def exact(args: Mapping[str, Any]) -> ArgTest:
    """The predicate "these exact arguments": what "approve always" grants."""
    return ArgTest(pointer="", equals=dict(args))


def resolve(document: Any, pointer: str) -> Any:
    """The value at an RFC 6901 pointer, or the module's missing marker."""
    if pointer == "":
        return document
    if not pointer.startswith("/"):
        return _MISSING
    current = document
    for raw in pointer[1:].split("/"):
        token = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(current, Mapping):
            if token not in current:
                return _MISSING
            current = current[token]
        elif isinstance(current, list):
            if not token.isdigit() or (len(token) > 1 and token[0] == "0"):
                return _MISSING
            index = int(token)
            if index >= len(current):
                return _MISSING
            current = current[index]
        else:
            return _MISSING
    return current


def json_equal(a: Any, b: Any) -> bool:
    """Equality as JSON values (see the module docstring for numbers)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        if isinstance(a, int) and isinstance(b, int):
            return a == b
        return float(a) == float(b)
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def args_sha256(args: Mapping[str, Any]) -> str:
    """The hex SHA-256 of the arguments' canonical JSON."""
    return hashlib.sha256(orjson.dumps(args, option=orjson.OPT_SORT_KEYS)).hexdigest()


@lru_cache(maxsize=256)
def _glob(glob: str) -> re.Pattern[str]:
    parts = (".*" if c == "*" else "." if c == "?" else re.escape(c) for c in glob)
    return re.compile("".join(parts), re.DOTALL)
