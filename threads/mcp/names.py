"""The names of MCP tools: ``server.tool`` for people, ``server__tool`` for the model.

Model APIs accept tool names of ``[a-zA-Z0-9_-]``, at most 64 characters
(OpenAI's rule; Anthropic's is the same set). An MCP server may name a tool
with dots, slashes or spaces, and at any length. So each tool has two names:

- its *label*, ``<server>.<tool>``, as configuration patterns, health and
  errors show it (the tool's own name, unchanged);
- its *wire name*, ``<server>__<tool>`` with every other character made
  ``_``, which the model calls and the transcript records. Server names have
  no ``__``, so the server is always the part before the first ``__``. A name
  too long, or one that an earlier tool of the list already has once cleaned,
  is shortened and given a hash of the original, so it stays unique and the
  same from one listing to the next.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

MAX_NAME = 64
SEPARATOR = "__"
_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")


def label(server: str, tool: str) -> str:
    return f"{server}.{tool}"


def _hashed(base: str, original: str) -> str:
    digest = hashlib.sha256(original.encode()).hexdigest()[:8]
    return f"{base[: MAX_NAME - 9]}_{digest}"


def wire_names(server: str, tools: Iterable[str]) -> dict[str, str]:
    """Each of ``server``'s tool names → the name the model calls it by (unique, ≤ 64)."""
    out: dict[str, str] = {}
    taken: set[str] = set()
    for tool in tools:
        name = f"{server}{SEPARATOR}{_UNSAFE.sub('_', tool)}"
        if len(name) > MAX_NAME or name in taken:
            name = _hashed(name, tool)
        taken.add(name)
        out[tool] = name
    return out
