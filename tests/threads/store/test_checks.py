"""The append's checks refuse exactly what would not read back (the decoder is the judge).

An append no longer decodes its own lines; :mod:`threads.store.checks` looks
at the values instead. Here every field of every kind is given values of
every wrong shape, and the verdict of ``encode_entry`` is compared with a
real read-back of the same entry, encoded without the checks.
"""

from __future__ import annotations

import dataclasses
from datetime import date
from typing import Any

import orjson
import pytest

from tests.threads.store.helpers import T0, every_field
from threads.messages import (
    FilePart,
    Message,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    Usage,
    WireError,
)
from threads.store import codec
from threads.store.codec import encode_entry, entry_from_wire
from threads.store.entries import ENTRY_KINDS, Entry

WHEN = T0


def _message(*parts: Any, role: Any = "user") -> Message:
    return Message(role=role, content=tuple(parts))


# Values of every shape a caller might hand a field by mistake.
SHAPES: list[Any] = [
    5,
    -1,
    1.5,
    True,
    False,
    None,
    "x",
    "",
    [],
    ["a", 2],
    ("a", "b"),
    {},
    {"a": 2},
    {"a": "b"},
    WHEN,
    date(2026, 12, 1),
    Usage(),
    _message(TextPart(text="fine")),
    _message(TextPart(text="x"), role="system"),
    _message(TextPart(text=5)),  # type: ignore[arg-type]
    _message(ToolCallPart(id=1, name="n")),  # type: ignore[arg-type]
    _message(ToolCallPart(id="c", name="n", args={"q": 1})),
    _message(ToolResultPart(call_id="c", name="n", content=7)),  # type: ignore[arg-type]
    _message(ToolResultPart(call_id="c", name="n", content="ok", is_error=True)),
    _message(ReasoningPart(text="t", signature=5)),  # type: ignore[arg-type]
    _message(ReasoningPart(text="t", signature="s")),
    _message(FilePart(url="u", size=-1)),
    _message(FilePart(url="u", name=3)),  # type: ignore[arg-type]
    _message(FilePart(url="u", media_type="image/png", name="a.png", size=10)),
    _message("not a part"),
    (ToolCallPart(id="c", name="t"),),
    (ToolCallPart(id="c", name=5),),  # type: ignore[arg-type]
    (TextPart(text="x"),),
    ({"a": 1}, {"b": 2}),
]


def _unchecked_line(entry: Entry) -> bytes:
    """The entry's line as the encoders alone write it, no check applied."""
    out: dict[str, Any] = {"type": entry.TYPE, "id": entry.id, "created": "2026-12-01T00:00:00Z"}
    if entry.wire_version():
        out["v"] = entry.wire_version()
    if entry.parent:
        out["parent"] = entry.parent
    referred = (
        ("message", "wake") if getattr(entry, "receipt", "") and entry.TYPE == "message" else ()
    )
    for name, encode, _check, required, default in codec._SPECS[type(entry)]:
        value = getattr(entry, name)
        if name not in referred and (required or value != default):
            out[name] = encode(value)
    return orjson.dumps(out)


def _reads_back(entry: Entry) -> bool:
    try:
        line = _unchecked_line(entry)
    except (TypeError, ValueError, AttributeError):
        return False  # cannot even be written
    try:
        entry_from_wire(orjson.loads(line))
    except WireError:
        return False
    return True


def _cases() -> list[tuple[str, str, int]]:
    return [
        (kind, f.name, index)
        for kind, cls in ENTRY_KINDS.items()
        for f in dataclasses.fields(cls)
        if f.name not in ("id", "created", "parent")
        for index in range(len(SHAPES))
    ]


def _entry(kind: str, field: str, value: Any) -> Entry:
    return every_field(kind, **{field: value})


@pytest.mark.parametrize(("kind", "field", "shape"), _cases())
def test_an_append_refuses_a_value_exactly_when_it_would_not_read_back(
    kind: str, field: str, shape: int
) -> None:
    entry = _entry(kind, field, SHAPES[shape])
    if _reads_back(entry):
        line = encode_entry(entry)
        assert codec.decode_entry(line).id == "e_1"
    else:
        with pytest.raises((ValueError, TypeError)):
            encode_entry(entry)


def test_a_refusal_names_the_field_and_what_it_must_be() -> None:
    with pytest.raises(ValueError, match="label entry e_1: 'name' must be a string"):
        encode_entry(_entry("label", "name", 5))
    with pytest.raises(
        ValueError,
        match=r"custom_message entry e_1: 'message' message.content\[0\].text must be a string",
    ):
        encode_entry(_entry("custom_message", "message", _message(TextPart(text=5))))  # type: ignore[arg-type]
