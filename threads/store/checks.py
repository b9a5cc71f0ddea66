"""What reads back: a check of each entry field's value before it is encoded.

Each check returns what is wrong with a value ("" when nothing), refusing
what the field's decoder in :mod:`threads.store.codec` would refuse of its
encoded form. An append checks the values it encodes instead of decoding its
own lines again: the read-back cost as much as the encoding. The two are held
to the same verdict by ``tests/threads/store/test_checks.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import is_dataclass
from datetime import date, datetime, time
from enum import Enum
from typing import Any
from uuid import UUID

from threads.messages import (
    FilePart,
    Message,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)

_ROLES = ("user", "assistant", "tool")


def _plain(value: Any) -> Any:
    """An enum as the value orjson writes for it."""
    return value.value if isinstance(value, Enum) else value


def _is_str(value: Any) -> str:
    # orjson writes times, dates and UUIDs as strings, and a string reads back.
    ok = isinstance(_plain(value), (str, date, time, UUID))
    return "" if ok else "must be a string"


def _is_int(value: Any) -> str:
    value = _plain(value)
    ok = isinstance(value, int) and not isinstance(value, bool)
    return "" if ok else "must be an integer"


def _is_bool(value: Any) -> str:
    return "" if isinstance(_plain(value), bool) else "must be a boolean"


def _is_time(value: Any) -> str:
    return "" if isinstance(value, datetime) else "must be a datetime"


def _is_opt_time(value: Any) -> str:
    return "" if value is None or isinstance(value, datetime) else "must be a datetime or None"


def _are_strs(value: Any) -> str:
    return "" if all(isinstance(v, str) for v in value) else "must be a list of strings"


def _maps_to_strs(value: Any) -> str:
    ok = all(isinstance(v, str) for v in dict(value).values())
    return "" if ok else "must be an object of strings"


def _are_objects(value: Any) -> str:
    # orjson writes a dataclass instance as an object, and an object reads back.
    ok = all(isinstance(v, dict) or (is_dataclass(v) and not isinstance(v, type)) for v in value)
    return "" if ok else "must be a list of objects"


# Per part kind: the fields that must be strings, then those that must be when set.
_PART_STRINGS: dict[type, tuple[tuple[str, ...], tuple[str, ...]]] = {
    TextPart: (("text",), ()),
    ToolCallPart: (("id", "name"), ()),
    ToolResultPart: (("call_id", "name", "content"), ()),
    ReasoningPart: (("text",), ("signature",)),
    FilePart: (("url", "media_type"), ("name",)),
}


def _part_problem(part: object, where: str) -> str:
    """What ``part_from_wire`` would refuse of ``part_to_wire(part)``, or ""."""
    strings = _PART_STRINGS.get(type(part))
    if strings is None:  # a subclass of a part kind encodes as that kind
        strings = next((v for k, v in _PART_STRINGS.items() if isinstance(part, k)), None)
    if strings is None:
        return f"{where} is not a message part"
    always, when_set = strings
    for name in always:
        if not isinstance(getattr(part, name), str):
            return f"{where}.{name} must be a string"
    for name in when_set:
        value = getattr(part, name)
        if value and not isinstance(value, str):
            return f"{where}.{name} must be a string"
    size = getattr(part, "size", 0)
    if size and (not isinstance(size, int) or size < 0):
        return f"{where}.size must be a byte count, got {size!r}"
    return ""


def _message_problem(value: Any) -> str:
    if not isinstance(value, Message):
        return "must be a Message"
    if value.role not in _ROLES:
        return f"message.role must be user, assistant or tool, got {value.role!r}"
    for index, part in enumerate(value.content):
        # The common part, a text, is checked inline; the others by _part_problem.
        if type(part) is TextPart and type(part.text) is str:
            continue
        problem = _part_problem(part, f"message.content[{index}]")
        if problem:
            return problem
    return ""


def _opt_message_problem(value: Any) -> str:
    return "" if value is None else _message_problem(value)


def _are_calls(value: Any) -> str:
    for index, call in enumerate(value):
        if not isinstance(call, ToolCallPart):
            return "must hold only tool_call parts"
        problem = _part_problem(call, f"part [{index}]")
        if problem:
            return problem
    return ""


CHECKS: dict[str, Callable[[Any], str]] = {
    "str": _is_str,
    "int": _is_int,
    "bool": _is_bool,
    "datetime": _is_time,
    "datetime | None": _is_opt_time,
    "tuple[str, ...]": _are_strs,
    "Mapping[str, str]": _maps_to_strs,
    "Message": _message_problem,
    "Message | None": _opt_message_problem,
    "tuple[ToolCallPart, ...]": _are_calls,
    "tuple[Mapping[str, JSON], ...]": _are_objects,
}
