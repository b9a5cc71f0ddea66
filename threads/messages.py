"""Conversation messages and their parts, the values every layer shares.

A message is ``{"role": "user"|"assistant"|"tool", "content": [parts]}`` on
the wire; parts are ``text``, ``tool_call``, ``tool_result``, ``reasoning``
and ``file``. Values are frozen; the ``*_wire`` functions are the one codec.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import FrozenInstanceError, dataclass, field
from typing import Any, Literal, Protocol, TypeAlias, TypeVar

import orjson

Role: TypeAlias = Literal["user", "assistant", "tool"]

ROLES: dict[str, Role] = {"user": "user", "assistant": "assistant", "tool": "tool"}
"""Each role's one string: a decoded message takes it rather than a copy of its own."""
JSON: TypeAlias = Any


@dataclass(frozen=True, slots=True, kw_only=True)
class TextPart:
    """Plain text."""

    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallPart:
    """A call the model asked for: its id, the tool's name and the arguments object."""

    id: str
    name: str
    args: Mapping[str, JSON] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolResultPart:
    """The result of one tool call, paired with it by ``call_id``."""

    call_id: str
    name: str
    content: str
    is_error: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class ReasoningPart:
    """The model's reasoning text; ``signature`` is the provider's opaque seal, if any."""

    text: str
    signature: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class FilePart:
    """A file by reference: a URL and its media type, name and size in bytes (0: unknown).

    The URL is ``https://``, ``data:``, or a channel's own scheme naming the file
    on its platform (``telegram://…``), fetched only when a model is to see it
    (:mod:`threads.media`).
    """

    url: str
    media_type: str = "application/octet-stream"
    name: str = ""
    size: int = 0


Part: TypeAlias = TextPart | ToolCallPart | ToolResultPart | ReasoningPart | FilePart


class Message:
    """One conversation message: a role and its parts, in order. Frozen.

    A message is sent to the model again on every later turn of its session;
    its wire bytes are kept by the client's conversation, not with it
    (:mod:`threads.llm.conversations`, decision perf-40).

    Most messages are one text part, so such a message keeps its text alone
    and makes its ``content`` tuple when asked for it (decision perf-26): one
    object the garbage collector walks, not three (the message, its tuple and
    the part). Messages compare by role and content, whatever they keep. A
    live session keeps its older messages packed, not as messages
    (:mod:`threads.message_list`); a client's kept conversation holds its
    first message weakly (decision perf-44).
    """

    __slots__ = ("__weakref__", "_parts", "role")
    __match_args__ = ("role", "content")

    role: Role
    _parts: tuple[Part, ...] | str

    def __init__(self, *, role: Role, content: tuple[Part, ...]) -> None:
        _init = object.__setattr__
        _init(self, "role", role)
        _init(self, "_parts", _kept_parts(content))

    @property
    def content(self) -> tuple[Part, ...]:
        parts = self._parts
        return (TextPart(text=parts),) if type(parts) is str else parts  # type: ignore[return-value]

    @classmethod
    def user(cls, text: str) -> Message:
        return cls(role="user", content=(TextPart(text=text),))

    @classmethod
    def assistant(cls, text: str) -> Message:
        return cls(role="assistant", content=(TextPart(text=text),))

    def text(self) -> str:
        """The concatenated text parts."""
        parts = self._parts
        if type(parts) is str:
            return parts
        return "".join(p.text for p in parts if isinstance(p, TextPart))

    def sole_text(self) -> str | None:
        """The text of a message that is one text part; None for any other."""
        parts = self._parts
        return parts if type(parts) is str else None

    def tool_calls(self) -> list[ToolCallPart]:
        parts = self._parts
        return [] if type(parts) is str else [p for p in parts if isinstance(p, ToolCallPart)]

    def tool_results(self) -> list[ToolResultPart]:
        parts = self._parts
        return [] if type(parts) is str else [p for p in parts if isinstance(p, ToolResultPart)]

    def __eq__(self, other: object) -> bool:
        if type(other) is not Message:
            return NotImplemented
        if self.role != other.role:
            return False
        mine, theirs = self._parts, other._parts
        if type(mine) is type(theirs):
            return mine == theirs
        return self.content == other.content

    def __hash__(self) -> int:
        return hash((self.role, self.content))

    def __repr__(self) -> str:
        return f"Message(role={self.role!r}, content={self.content!r})"

    def __setattr__(self, name: str, value: object) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __reduce__(self) -> tuple[Callable[..., Message], tuple[Role, tuple[Part, ...]]]:
        return _message, (self.role, self.content)


def _message(role: Role, content: tuple[Part, ...]) -> Message:
    return Message(role=role, content=content)


def kept_message(role: Role, kept: tuple[Part, ...] | str) -> Message:
    """The message that keeps ``kept`` (the text of a lone text part, else its parts), made
    as a decoder makes it: without the checks and the part its constructor would go through."""
    message: Message = object.__new__(Message)
    _set_role(message, role)
    _set_parts(message, kept)
    return message


_set_role = Message.__dict__["role"].__set__
_set_parts = Message.__dict__["_parts"].__set__


def _kept_parts(content: tuple[Part, ...]) -> tuple[Part, ...] | str:
    """What a message keeps of its parts: the text of a lone text part, else the parts."""
    if len(content) == 1 and type(part := content[0]) is TextPart and type(part.text) is str:
        return part.text
    return content


@dataclass(frozen=True, slots=True, kw_only=True)
class Usage:
    """Token usage: input, output and the cached part of the input."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cached_tokens=self.cached_tokens + other.cached_tokens,
        )

    def __bool__(self) -> bool:
        return bool(self.input_tokens or self.output_tokens or self.cached_tokens)

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


class WireError(ValueError):
    """A message or part whose wire form is malformed; the message names the field."""


def part_to_wire(part: Part) -> dict[str, JSON]:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    if isinstance(part, ToolCallPart):
        return {"type": "tool_call", "id": part.id, "name": part.name, "args": dict(part.args)}
    if isinstance(part, ToolResultPart):
        out: dict[str, JSON] = {
            "type": "tool_result",
            "call_id": part.call_id,
            "name": part.name,
            "content": part.content,
        }
        if part.is_error:
            out["is_error"] = True
        return out
    if isinstance(part, ReasoningPart):
        out = {"type": "reasoning", "text": part.text}
        if part.signature:
            out["signature"] = part.signature
        return out
    file: dict[str, JSON] = {"type": "file", "url": part.url, "media_type": part.media_type}
    if part.name:
        file["name"] = part.name
    if part.size:
        file["size"] = part.size
    return file


def _str(obj: Mapping[str, JSON], key: str, where: str, default: str | None = None) -> str:
    value = obj.get(key, default)
    if not isinstance(value, str):
        raise WireError(f"{where}.{key} must be a string, got {type(value).__name__}")
    return value


def part_from_wire(obj: JSON, where: str = "part") -> Part:
    if not isinstance(obj, dict):
        raise WireError(f"{where} must be an object")
    kind = obj.get("type")
    if kind == "text":
        return TextPart(text=_str(obj, "text", where))
    if kind == "tool_call":
        args = obj.get("args", {})
        if not isinstance(args, dict):
            raise WireError(f"{where}.args must be an object")
        return ToolCallPart(id=_str(obj, "id", where), name=_str(obj, "name", where), args=args)
    if kind == "tool_result":
        return ToolResultPart(
            call_id=_str(obj, "call_id", where),
            name=_str(obj, "name", where, ""),
            content=_str(obj, "content", where, ""),
            is_error=bool(obj.get("is_error", False)),
        )
    if kind == "reasoning":
        return ReasoningPart(
            text=_str(obj, "text", where, ""), signature=_str(obj, "signature", where, "")
        )
    if kind == "file":
        size = obj.get("size", 0)
        if not isinstance(size, int) or size < 0:
            raise WireError(f"{where}.size must be a byte count, got {size!r}")
        return FilePart(
            url=_str(obj, "url", where),
            media_type=_str(obj, "media_type", where, "application/octet-stream"),
            name=_str(obj, "name", where, ""),
            size=size,
        )
    raise WireError(f"{where}.type {kind!r} is not a known part type")


def message_to_wire(message: Message) -> dict[str, JSON]:
    return {"role": message.role, "content": [part_to_wire(p) for p in message.content]}


def message_from_wire(obj: JSON, where: str = "message") -> Message:
    if not isinstance(obj, dict):
        raise WireError(f"{where} must be an object")
    role = obj.get("role")
    if role not in ROLES:
        raise WireError(f"{where}.role must be user, assistant or tool, got {role!r}")
    content = obj.get("content")
    if not isinstance(content, list):
        raise WireError(f"{where}.content must be a list of parts")
    parts = tuple(part_from_wire(p, f"{where}.content[{i}]") for i, p in enumerate(content))
    return Message(role=ROLES[role], content=parts)


def usage_to_wire(usage: Usage) -> dict[str, int]:
    out = {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens}
    if usage.cached_tokens:
        out["cached_tokens"] = usage.cached_tokens
    return out


def usage_from_wire(obj: JSON) -> Usage:
    if not isinstance(obj, dict):
        return Usage()
    return Usage(
        input_tokens=int(obj.get("input_tokens", 0)),
        output_tokens=int(obj.get("output_tokens", 0)),
        cached_tokens=int(obj.get("cached_tokens", 0)),
    )


class Encodable(Protocol):
    """A frozen value that keeps its latest wire encoding (a tool's spec)."""

    @property
    def _wire(self) -> tuple[str, bytes] | None: ...


E = TypeVar("E", bound=Encodable)


def wire_form(value: E, form: str, encode: Callable[[E], bytes]) -> bytes:
    """``encode(value)``, the value in the wire format named ``form``, encoded once.

    The bytes are kept with the value (frozen: they cannot go stale), so an
    agent's tool schemas cost their encoding once, not once per request.
    """
    kept = value._wire
    if kept is not None and kept[0] == form:
        return kept[1]
    data = encode(value)
    object.__setattr__(value, "_wire", (form, data))
    return data


def stored_size(message: Message) -> int:
    """The length in bytes of the message's stored JSON form."""
    return len(orjson.dumps(message_to_wire(message)))


def tool_result_message(results: Iterable[ToolResultPart]) -> Message:
    return Message(role="tool", content=tuple(results))
