"""A client of Anthropic's messages protocol (``POST {base_url}/v1/messages``).

Our messages become content blocks: the system text goes top-level; tool calls
are ``tool_use`` blocks in the assistant's turn; tool results are
``tool_result`` blocks in a user turn (our ``tool`` role becomes ``user``, and
consecutive turns of one role are merged, as the protocol wants them
alternating); images and PDFs become ``image`` / ``document`` blocks from a
``data:`` or ``https:`` URL, other files a line of text naming them. Signed
reasoning goes back as ``thinking`` blocks (the API checks the signature);
unsigned reasoning, from another provider, is dropped. A ``redacted_thinking``
block is kept as a :class:`~threads.messages.ReasoningPart` with empty text
and the block's ``data`` as its signature, and sent back as it came.

With ``prompt_caching`` (on by default) the system text and the last block of
the conversation carry ``cache_control``, so each turn reuses the previous
turn's prefix. Usage reports ``input_tokens`` as the whole prompt (fresh +
cache reads + cache writes, like OpenAI's ``prompt_tokens``) and
``cached_tokens`` as the cache reads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from threads.llm.base import (
    DeltaCallback,
    ModelRequest,
    ModelResponse,
    RunMetadata,
    StopReason,
    ToolSpec,
)
from threads.llm.conversations import EncodedConversations
from threads.llm.errors import ModelConnectionError, ModelResponseError
from threads.llm.http import HTTPModelClient
from threads.llm.openai import file_line, parse_arguments
from threads.llm.retry import Clock, RetryPolicy, Sleep, error_for_status
from threads.llm.sse import SSEEvent
from threads.messages import (
    FilePart,
    Message,
    Part,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    Usage,
    wire_form,
)

API_VERSION = "2023-06-01"
DEFAULT_BASE_URL = "https://api.anthropic.com"

_STOP_REASONS: dict[str, StopReason] = {
    "end_turn": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "stop_sequence": "stop_sequence",
    "pause_turn": "end_turn",
    "refusal": "end_turn",
    "model_context_window_exceeded": "max_tokens",
}
_ERROR_STATUSES = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
}
_CACHEABLE = frozenset({"text", "image", "document", "tool_use", "tool_result"})
_EPHEMERAL = {"type": "ephemeral"}
_FORM = "anthropic"  # the tag of the messages-protocol encoding kept with each tool


# -- our messages → content blocks ------------------------------------------------------


def _file_block(part: FilePart) -> dict[str, Any]:
    kind = (
        "image"
        if part.media_type.startswith("image/")
        else "document"
        if part.media_type == "application/pdf"
        else ""
    )
    if kind and part.url.startswith("data:") and ";base64," in part.url:
        header, _, data = part.url.partition(",")
        media_type = header[5:].split(";", 1)[0] or part.media_type
        return {"type": kind, "source": {"type": "base64", "media_type": media_type, "data": data}}
    if kind and part.url.startswith(("https://", "http://")):
        return {"type": kind, "source": {"type": "url", "url": part.url}}
    return {"type": "text", "text": file_line(part)}


def _block(part: Part, role: str) -> dict[str, Any] | None:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text} if part.text else None
    if isinstance(part, ToolCallPart):
        return {"type": "tool_use", "id": part.id, "name": part.name, "input": dict(part.args)}
    if isinstance(part, ToolResultPart):
        block: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": part.call_id,
            "content": part.content,
        }
        if part.is_error:
            block["is_error"] = True
        return block
    if isinstance(part, ReasoningPart):
        if role != "assistant" or not part.signature:
            return None
        if not part.text:
            return {"type": "redacted_thinking", "data": part.signature}
        return {"type": "thinking", "thinking": part.text, "signature": part.signature}
    return _file_block(part)


def blocks_of(message: Message) -> list[dict[str, Any]]:
    """A message's content blocks (its role is ``user`` unless it is the assistant's)."""
    role = "assistant" if message.role == "assistant" else "user"
    return [b for b in (_block(p, role) for p in message.content) if b is not None]


def _encoded(message: Message) -> bytes:
    """A message's content blocks as JSON, comma-separated (b"" when it has none)."""
    return b",".join(orjson.dumps(b) for b in blocks_of(message))


_TURN_OPENS = {role: b'"role":"%s","content":[' % role.encode() for role in ("user", "assistant")}


def _turn_of(message: Message) -> str:
    return "assistant" if message.role == "assistant" else "user"


def _joined(open_turn: str | None, role: str, blocks: bytes) -> bytes:
    """What follows the turn left open (None: no turn yet) for a message of ``role``: its
    blocks in that turn when the roles match, else the open one closed and a new one begun."""
    if role == open_turn:
        return b"," + blocks
    return (b"]},{" if open_turn else b"{") + _TURN_OPENS[role] + blocks


def _turns(messages: Sequence[Message], open_turn: Any) -> tuple[bytes, Any]:
    """The turns ``messages`` add to a conversation whose last turn is ``open_turn``'s (None:
    none yet), a role's consecutive messages one turn; the last turn is left open."""
    pieces: list[bytes] = []
    for message in messages:
        blocks = _encoded(message)
        if blocks:
            role = _turn_of(message)
            pieces.append(_joined(open_turn, role, blocks))
            open_turn = role
    return b"".join(pieces), open_turn


def messages_json(
    messages: Sequence[Message], conversations: EncodedConversations, *, cache_last: bool
) -> orjson.Fragment:
    """The ``messages`` array as JSON, roles alternating; what the conversation sent before
    is not encoded again (:class:`~threads.llm.conversations.EncodedConversations`).

    With ``cache_last`` the conversation's last block carries ``cache_control``
    (when its kind may): the message that holds it is encoded afresh for each
    request and kept by none, the messages before it as any are.
    """
    last = len(messages)
    cached: list[dict[str, Any]] = []
    if cache_last:
        last -= 1
        while last >= 0 and not (cached := blocks_of(messages[last])):
            last -= 1  # the last block is the last message's that has blocks
    data, open_turn = conversations.grow(messages, _turns, count=max(last, 0))
    tail = b""
    if cached:
        if cached[-1]["type"] in _CACHEABLE:
            cached[-1] = cached[-1] | {"cache_control": _EPHEMERAL}
        role = _turn_of(messages[last])
        tail = _joined(open_turn, role, b",".join(orjson.dumps(b) for b in cached))
        open_turn = role
    return orjson.Fragment(b"".join((b"[", data, tail, b"]}]" if open_turn else b"]")))


def _tool_encoded(tool: ToolSpec) -> bytes:
    return orjson.dumps(
        {"name": tool.name, "description": tool.description, "input_schema": dict(tool.parameters)}
    )


def tools_json(tools: Sequence[ToolSpec]) -> orjson.Fragment:
    """The ``tools`` array as JSON, each schema encoded once per tool."""
    return orjson.Fragment(
        b"[" + b",".join(wire_form(t, _FORM, _tool_encoded) for t in tools) + b"]"
    )


# -- content blocks → our messages ------------------------------------------------------


def usage_from_anthropic(data: Any) -> Usage:
    """Usage with the whole prompt as input and the cache reads as cached."""
    if not isinstance(data, dict):
        return Usage()
    cached = int(data.get("cache_read_input_tokens") or 0)
    written = int(data.get("cache_creation_input_tokens") or 0)
    return Usage(
        input_tokens=int(data.get("input_tokens") or 0) + cached + written,
        output_tokens=int(data.get("output_tokens") or 0),
        cached_tokens=cached,
    )


def _part(block: Mapping[str, Any]) -> Part | None:
    kind = block.get("type")
    if kind == "text":
        return TextPart(text=block.get("text") or "")
    if kind == "thinking":
        return ReasoningPart(
            text=block.get("thinking") or "", signature=block.get("signature") or ""
        )
    if kind == "redacted_thinking":
        return ReasoningPart(text="", signature=block.get("data") or "")
    if kind == "tool_use":
        return ToolCallPart(
            id=block.get("id") or "",
            name=block.get("name") or "",
            args=dict(block.get("input") or {}),
        )
    return None  # server tools' blocks and the like: not ours to keep


def _stop_reason(raw: Any) -> StopReason:
    return _STOP_REASONS.get(raw, "end_turn") if isinstance(raw, str) else "end_turn"


def response_from_anthropic(provider: str, data: Any, model: str) -> ModelResponse:
    """The answer in a non-streamed messages body."""
    if not isinstance(data, dict) or not isinstance(data.get("content"), list):
        raise ModelResponseError(f"{provider}: the answer for model {model} has no content list")
    parts = [p for p in (_part(b) for b in data["content"] if isinstance(b, dict)) if p]
    return ModelResponse(
        message=Message(role="assistant", content=tuple(p for p in parts if p is not None)),
        usage=usage_from_anthropic(data.get("usage")),
        stop_reason=_stop_reason(data.get("stop_reason")),
        model=str(data.get("model") or model),
    )


class _Block:
    __slots__ = ("id", "kind", "name", "signature", "text")

    def __init__(self, start: Mapping[str, Any]) -> None:
        self.kind = str(start.get("type") or "")
        self.id = str(start.get("id") or "")
        self.name = str(start.get("name") or "")
        self.signature = str(start.get("signature") or start.get("data") or "")
        first = start.get("text") or start.get("thinking") or ""
        self.text: list[str] = [first] if first else []

    def part(self) -> Part | None:
        text = "".join(self.text)
        if self.kind == "text":
            return TextPart(text=text) if text else None
        if self.kind == "thinking":
            return ReasoningPart(text=text, signature=self.signature)
        if self.kind == "redacted_thinking":
            return ReasoningPart(text="", signature=self.signature)
        if self.kind == "tool_use":
            return ToolCallPart(id=self.id, name=self.name, args=parse_arguments(text))
        return None


class AnthropicStream:
    """Folds the events of one streamed message into a :class:`ModelResponse`."""

    __slots__ = (
        "_blocks",
        "_done",
        "_model",
        "_on_delta",
        "_provider",
        "_stop",
        "_usage",
        "emitted",
    )

    def __init__(self, provider: str, model: str, on_delta: DeltaCallback | None) -> None:
        self._provider = provider
        self._model = model
        self._on_delta = on_delta
        self._blocks: dict[int, _Block] = {}
        self._usage: dict[str, Any] = {}
        self._stop: Any = None
        self._done = False
        self.emitted = False

    def feed(self, event: SSEEvent) -> None:
        try:
            text = self._fold(orjson.loads(event.data))
        except orjson.JSONDecodeError:
            raise ModelResponseError(
                f"{self._provider}: a stream event for model {self._model} is not JSON: "
                f"{event.data[:200]!r}"
            ) from None
        except (AttributeError, KeyError, TypeError) as exc:
            raise ModelResponseError(
                f"{self._provider}: a stream event for model {self._model} has an unexpected "
                f"shape ({exc!r}): {event.data[:200]!r}"
            ) from None
        if text and self._on_delta is not None:
            self.emitted = True
            self._on_delta(text)

    def _fold(self, data: Any) -> str:
        """Take one event; its text delta is returned for the callback."""
        kind = data.get("type")
        if kind == "content_block_delta":
            block = self._blocks.get(data["index"])
            delta = data["delta"]
            dtype = delta.get("type")
            if block is None:
                return ""
            if dtype == "text_delta":
                text: str = delta.get("text") or ""
                block.text.append(text)
                return text
            if dtype == "input_json_delta":
                block.text.append(delta.get("partial_json") or "")
            elif dtype == "thinking_delta":
                block.text.append(delta.get("thinking") or "")
            elif dtype == "signature_delta":
                block.signature += delta.get("signature") or ""
        elif kind == "content_block_start":
            self._blocks[data["index"]] = _Block(data["content_block"])
        elif kind == "message_start":
            message = data["message"]
            self._model = str(message.get("model") or self._model)
            self._usage.update(message.get("usage") or {})
        elif kind == "message_delta":
            self._stop = (data.get("delta") or {}).get("stop_reason") or self._stop
            self._usage.update(
                {k: v for k, v in (data.get("usage") or {}).items() if v is not None}
            )
        elif kind == "message_stop":
            self._done = True
        elif kind == "error":
            error = data.get("error") or {}
            status = _ERROR_STATUSES.get(str(error.get("type")), 500)
            raise error_for_status(
                self._provider, self._model, status, {}, orjson.dumps(data).decode()
            )
        return ""

    def finish(self) -> ModelResponse:
        if not self._done:
            raise ModelConnectionError(
                f"{self._provider}: the stream for model {self._model} ended before message_stop",
                partial=self.emitted,
            )
        parts = [b.part() for _, b in sorted(self._blocks.items())]
        return ModelResponse(
            message=Message(role="assistant", content=tuple(p for p in parts if p is not None)),
            usage=usage_from_anthropic(self._usage),
            stop_reason=_stop_reason(self._stop),
            model=self._model,
        )


def _messages_url(base_url: str) -> str:
    base = base_url.rstrip("/")
    return base + ("/messages" if base.endswith("/v1") else "/v1/messages")


class AnthropicClient(HTTPModelClient):
    """A messages client: ``POST {base_url}/v1/messages`` with ``x-api-key``.

    ``base_url`` is the host (``https://api.anthropic.com``); one ending in
    ``/v1`` works too. Extra ``headers`` (e.g. ``anthropic-beta``) are sent
    with every request.
    """

    def __init__(
        self,
        *,
        base_url: str = DEFAULT_BASE_URL,
        api_key: str = "",
        name: str = "anthropic",
        headers: Mapping[str, str] | None = None,
        timeout_seconds: float = 120.0,
        retry: RetryPolicy | None = None,
        sleep: Sleep | None = None,
        clock: Clock | None = None,
        prompt_caching: bool = True,
        max_connections: int = 100,
        run_metadata: RunMetadata = "headers",
    ) -> None:
        fixed = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            "anthropic-version": API_VERSION,
        }
        if api_key:
            fixed["x-api-key"] = api_key
        fixed.update(headers or {})
        super().__init__(
            name=name,
            url=_messages_url(base_url),
            headers=fixed,
            secret=api_key,
            timeout_seconds=timeout_seconds,
            retry=retry,
            sleep=sleep,
            clock=clock,
            max_connections=max_connections,
            run_metadata=run_metadata,
        )
        self.base_url = base_url.rstrip("/")
        self.prompt_caching = prompt_caching
        self._conversations = EncodedConversations()

    def _body(self, request: ModelRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": request.model,
            "max_tokens": request.max_output_tokens,
            "messages": messages_json(
                request.messages, self._conversations, cache_last=self.prompt_caching
            ),
        }
        if request.system:
            system: dict[str, Any] = {"type": "text", "text": request.system}
            if self.prompt_caching:
                system["cache_control"] = _EPHEMERAL
            body["system"] = [system]
        if request.tools:
            body["tools"] = tools_json(request.tools)
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if request.stream:
            body["stream"] = True
        return body

    def _metadata_body(self, metadata: Mapping[str, str]) -> dict[str, Any]:
        """Anthropic's metadata takes one field, ``user_id``: the session's public id."""
        user = metadata.get("weft.public_id") or metadata.get("weft.session.id", "")
        return {"metadata": {"user_id": user}} if user else {}

    def _parse(self, data: Any, request: ModelRequest) -> ModelResponse:
        try:
            return response_from_anthropic(self.name, data, request.model)
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise ModelResponseError(
                f"{self.name}: the answer for model {request.model} has an unexpected shape: "
                f"{exc!r}"
            ) from exc

    def _stream_state(
        self, request: ModelRequest, on_delta: DeltaCallback | None
    ) -> AnthropicStream:
        return AnthropicStream(self.name, request.model, on_delta)
