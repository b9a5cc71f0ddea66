"""A client of the OpenAI chat-completions protocol: OpenAI, OpenRouter, Ollama, vLLM, LM Studio.

Our messages become chat messages: the system text first; user and assistant
text as strings; an assistant's tool calls as ``tool_calls`` with the
arguments as a JSON string; each tool result as its own ``role: "tool"``
message with its ``tool_call_id``; images as ``image_url`` parts, other files
as a line of text naming them. Reasoning parts are not sent back (the
protocol has no place for them). Answers are read whole or from the SSE
stream (``stream_options.include_usage`` asks for the usage chunk); text
deltas reach the callback in order, tool-call fragments are joined by their
index, and ``reasoning_content`` / ``reasoning`` (DeepSeek, vLLM, OpenRouter)
becomes a :class:`~threads.messages.ReasoningPart`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from threads.llm.base import (
    UNPARSED_ARGS_KEY,
    DeltaCallback,
    ModelRequest,
    ModelResponse,
    RunMetadata,
    StopReason,
    ToolSpec,
)
from threads.llm.conversations import EncodedConversations, Spliced
from threads.llm.errors import ModelConnectionError, ModelHTTPError, ModelResponseError
from threads.llm.http import HTTPModelClient
from threads.llm.retry import Clock, RetryPolicy, Sleep, error_text
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

_FORM = "openai"  # the tag of the chat-completions encoding kept with each tool

_STOP_REASONS: dict[str, StopReason] = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "end_turn",
}


# -- our messages → chat format ---------------------------------------------------------


def file_line(part: FilePart) -> str:
    """How a file the protocol cannot carry is named to the model."""
    label = part.name or part.url
    return f"[attached file {label} ({part.media_type}): {part.url}]"


def _user_content(parts: Sequence[Part]) -> str | list[dict[str, Any]]:
    if all(isinstance(p, TextPart) for p in parts):
        return "".join(p.text for p in parts if isinstance(p, TextPart))
    content: list[dict[str, Any]] = []
    for part in parts:
        if isinstance(part, TextPart):
            content.append({"type": "text", "text": part.text})
        elif isinstance(part, FilePart):
            if part.media_type.startswith("image/") and part.url.startswith(
                ("https://", "http://", "data:")
            ):
                content.append({"type": "image_url", "image_url": {"url": part.url}})
            else:
                content.append({"type": "text", "text": file_line(part)})
    return content


def _arguments(call: ToolCallPart) -> str:
    args = call.args
    if len(args) == 1 and isinstance(args.get(UNPARSED_ARGS_KEY), str):
        return str(args[UNPARSED_ARGS_KEY])
    return orjson.dumps(dict(args)).decode()


def _tool_content(result: ToolResultPart) -> str:
    return f"Error: {result.content}" if result.is_error else result.content


def _plain_text(message: Message) -> str | None:
    """The text of the usual message, one text part and no tool role: none of its parts to sort."""
    content = message.content
    if (
        len(content) == 1
        and type(content[0]) is TextPart
        and content[0].text
        and message.role != "tool"
    ):
        return content[0].text
    return None


def chat_messages(message: Message) -> list[dict[str, Any]]:
    """One of our messages as chat messages: none, one, or several (a tool result each)."""
    text = _plain_text(message)
    if text is not None:
        return [{"role": message.role, "content": text}]
    content = message.content
    out: list[dict[str, Any]] = []
    rest: list[Part] = []
    calls: list[ToolCallPart] = []
    for part in content:
        if isinstance(part, ToolResultPart):
            out.append(
                {"role": "tool", "tool_call_id": part.call_id, "content": _tool_content(part)}
            )
        elif isinstance(part, ToolCallPart):
            calls.append(part)
        elif not isinstance(part, ReasoningPart):
            rest.append(part)
    if message.role == "assistant":
        text = "".join(
            p.text if isinstance(p, TextPart) else file_line(p)
            for p in rest
            if isinstance(p, TextPart | FilePart)
        )
        if not text and not calls:
            return out
        entry: dict[str, Any] = {"role": "assistant", "content": text or None}
        if calls:
            entry["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": _arguments(c)},
                }
                for c in calls
            ]
        out.append(entry)
    elif rest:
        # A user message, or stray text in a tool message: both are the user speaking.
        out.append({"role": "user", "content": _user_content(rest)})
    return out


def _encoded(messages: Sequence[Message]) -> bytes:
    """The messages' chat messages as JSON, comma-separated (b"" when they have none).

    One ``orjson`` call for them all: a session opened with a long history
    encodes it at its first request.
    """
    out: list[dict[str, Any]] = []
    for message in messages:
        text = _plain_text(message)
        if text is not None:  # as chat_messages makes it, without its list
            out.append({"role": message.role, "content": text})
        else:
            out.extend(chat_messages(message))
    return orjson.dumps(out)[1:-1]


@dataclass(frozen=True, slots=True)
class Conversation:
    """A request's ``messages`` before they are encoded: the system text, then the history.

    The client splices their encoding into the body's bytes (:meth:`OpenAIClient._encode`),
    so the history it keeps encoded is copied once per request.
    """

    system: str
    messages: Sequence[Message]

    def json(
        self, conversations: EncodedConversations, *, before: bytes = b"", after: bytes = b""
    ) -> bytes | Spliced:
        """The ``messages`` array as JSON (between ``before`` and ``after``, in one copy);
        what the conversation sent before is not encoded again."""
        head = orjson.dumps({"role": "system", "content": self.system}) if self.system else b""
        return conversations.array(head, self.messages, _encoded, before=before, after=after)


def _tool_encoded(tool: ToolSpec) -> bytes:
    return orjson.dumps(
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": dict(tool.parameters),
            },
        }
    )


def tools_json(tools: Sequence[ToolSpec]) -> orjson.Fragment:
    """The ``tools`` array as JSON, each schema encoded once per tool."""
    return orjson.Fragment(
        b"[" + b",".join(wire_form(t, _FORM, _tool_encoded) for t in tools) + b"]"
    )


# -- chat format → our messages ---------------------------------------------------------


def parse_arguments(raw: Any) -> dict[str, Any]:
    """A tool call's arguments as an object; unparseable text is kept under UNPARSED_ARGS_KEY."""
    if isinstance(raw, dict):
        return raw
    if raw is None or raw == "":
        return {}
    if isinstance(raw, str):
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return {UNPARSED_ARGS_KEY: raw}
        if isinstance(value, dict):
            return value
        return {UNPARSED_ARGS_KEY: raw}
    return {UNPARSED_ARGS_KEY: str(raw)}


def usage_from_openai(data: Any) -> Usage:
    """Usage from ``prompt_tokens``, ``completion_tokens`` and the cached part of the prompt."""
    if not isinstance(data, dict):
        return Usage()
    details = data.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    if cached is None:
        cached = data.get("prompt_cache_hit_tokens")  # DeepSeek
    return Usage(
        input_tokens=int(data.get("prompt_tokens") or 0),
        output_tokens=int(data.get("completion_tokens") or 0),
        cached_tokens=int(cached or 0),
    )


def _stop_reason(finish: Any, has_calls: bool) -> StopReason:
    reason = _STOP_REASONS.get(finish, "end_turn") if isinstance(finish, str) else "end_turn"
    # Some servers (Ollama among them) finish a tool-calling answer with "stop".
    if has_calls and reason == "end_turn":
        return "tool_use"
    return reason


def _assemble(reasoning: str, text: str, calls: list[ToolCallPart]) -> Message:
    parts: list[Part] = []
    if reasoning:
        parts.append(ReasoningPart(text=reasoning))
    if text:
        parts.append(TextPart(text=text))
    parts.extend(calls)
    return Message(role="assistant", content=tuple(parts))


def _error_in_body(provider: str, model: str, error: Any) -> ModelHTTPError:
    # OpenRouter reports upstream failures as a 200 whose body (or stream chunk) is an error.
    code = error.get("code") if isinstance(error, dict) else None
    status = code if isinstance(code, int) and 400 <= code < 600 else 502
    return ModelHTTPError(provider, status, error_text(orjson.dumps({"error": error})), model=model)


def response_from_openai(provider: str, data: Any, model: str) -> ModelResponse:
    """The answer in a non-streamed chat-completions body."""
    if not isinstance(data, dict):
        raise ModelResponseError(f"{provider}: the answer for model {model} is not a JSON object")
    choices = data.get("choices")
    if not choices:
        if data.get("error"):
            raise _error_in_body(provider, model, data["error"])
        raise ModelResponseError(f"{provider}: the answer for model {model} has no choices")
    choice = choices[0]
    message = choice.get("message") if isinstance(choice, dict) else None
    if not isinstance(message, dict):
        raise ModelResponseError(
            f"{provider}: the answer for model {model} has no choices[0].message object"
        )
    content = message.get("content")
    if isinstance(content, list):  # a few servers answer with content parts
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    calls: list[ToolCallPart] = []
    for i, raw in enumerate(message.get("tool_calls") or ()):
        function = raw.get("function") or {}
        calls.append(
            ToolCallPart(
                id=raw.get("id") or f"call_{i}",
                name=function.get("name") or "",
                args=parse_arguments(function.get("arguments")),
            )
        )
    reasoning = message.get("reasoning_content") or message.get("reasoning") or ""
    return ModelResponse(
        message=_assemble(
            reasoning if isinstance(reasoning, str) else "",
            content if isinstance(content, str) else "",
            calls,
        ),
        usage=usage_from_openai(data.get("usage")),
        stop_reason=_stop_reason(choice.get("finish_reason"), bool(calls)),
        model=str(data.get("model") or model),
    )


class _PendingCall:
    __slots__ = ("args", "id", "name")

    def __init__(self) -> None:
        self.id = ""
        self.name = ""
        self.args: list[str] = []


class OpenAIStream:
    """Folds the chunks of one streamed chat completion into a :class:`ModelResponse`."""

    __slots__ = (
        "_calls",
        "_done",
        "_finish",
        "_model",
        "_on_delta",
        "_provider",
        "_reasoning",
        "_text",
        "_usage",
        "emitted",
    )

    def __init__(self, provider: str, model: str, on_delta: DeltaCallback | None) -> None:
        self._provider = provider
        self._model = model
        self._on_delta = on_delta
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._calls: dict[int, _PendingCall] = {}
        self._usage = Usage()
        self._finish: str | None = None
        self._done = False
        self.emitted = False

    def feed(self, event: SSEEvent) -> None:
        data = event.data
        if data == b"[DONE]":
            self._done = True
            return
        try:
            text = self._fold(orjson.loads(data))
        except orjson.JSONDecodeError:
            raise ModelResponseError(
                f"{self._provider}: a stream chunk for model {self._model} is not JSON: "
                f"{data[:200]!r}"
            ) from None
        except (AttributeError, KeyError, TypeError) as exc:
            raise ModelResponseError(
                f"{self._provider}: a stream chunk for model {self._model} has an unexpected "
                f"shape ({exc!r}): {data[:200]!r}"
            ) from None
        if text and self._on_delta is not None:
            self.emitted = True
            self._on_delta(text)

    def _fold(self, chunk: Any) -> str:
        """Take one chunk; its text delta is returned for the callback."""
        if not isinstance(chunk, dict):
            return ""
        if chunk.get("error"):
            raise _error_in_body(self._provider, self._model, chunk["error"])
        if chunk.get("model"):
            self._model = str(chunk["model"])
        usage = chunk.get("usage")
        if usage:
            self._usage = usage_from_openai(usage)
        out = ""
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            text = delta.get("content")
            if isinstance(text, str) and text:
                self._text.append(text)
                out = text
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if isinstance(reasoning, str) and reasoning:
                self._reasoning.append(reasoning)
            for raw in delta.get("tool_calls") or ():
                self._call_delta(raw)
            if choice.get("finish_reason"):
                self._finish = choice["finish_reason"]
        return out

    def _call_delta(self, raw: dict[str, Any]) -> None:
        index = raw.get("index")
        if not isinstance(index, int):
            # Servers that omit the index send each call whole, or repeat its id.
            call_id = raw.get("id")
            matches = [i for i, c in self._calls.items() if call_id and c.id == call_id]
            index = matches[0] if matches else len(self._calls)
        call = self._calls.get(index)
        if call is None:
            call = self._calls[index] = _PendingCall()
        if raw.get("id") and not call.id:
            call.id = raw["id"]
        function = raw.get("function") or {}
        if function.get("name") and not call.name:
            call.name = function["name"]
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            call.args.append(arguments)
        elif isinstance(arguments, dict):
            call.args.append(orjson.dumps(arguments).decode())

    def finish(self) -> ModelResponse:
        if not self._done and self._finish is None:
            raise ModelConnectionError(
                f"{self._provider}: the stream for model {self._model} ended before the "
                "answer was complete (no finish_reason, no [DONE])",
                partial=self.emitted,
            )
        calls = [
            ToolCallPart(id=c.id or f"call_{i}", name=c.name, args=parse_arguments("".join(c.args)))
            for i, c in sorted(self._calls.items())
        ]
        return ModelResponse(
            message=_assemble("".join(self._reasoning), "".join(self._text), calls),
            usage=self._usage,
            stop_reason=_stop_reason(self._finish, bool(calls)),
            model=self._model,
        )


def _chat_url(base_url: str) -> str:
    return base_url.rstrip("/") + "/chat/completions"


class OpenAIClient(HTTPModelClient):
    """A chat-completions client: ``POST {base_url}/chat/completions``.

    ``base_url`` includes the version (``https://api.openai.com/v1``,
    ``http://localhost:11434/v1``). ``api_key`` goes in ``Authorization:
    Bearer``; local servers need none. ``max_tokens_field`` is the name the
    server wants for the output cap: OpenAI's newer models accept only
    ``max_completion_tokens``, most compatible servers take ``max_tokens``.
    """

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str = "",
        name: str = "openai",
        headers: Mapping[str, str] | None = None,
        timeout_seconds: float = 120.0,
        retry: RetryPolicy | None = None,
        sleep: Sleep | None = None,
        clock: Clock | None = None,
        max_tokens_field: str = "max_tokens",
        max_connections: int = 100,
        run_metadata: RunMetadata = "headers",
    ) -> None:
        fixed = {"Content-Type": "application/json", "Accept": "application/json"}
        if api_key:
            fixed["Authorization"] = f"Bearer {api_key}"
        fixed.update(headers or {})
        super().__init__(
            name=name,
            url=_chat_url(base_url),
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
        self._max_tokens_field = max_tokens_field
        self._conversations = EncodedConversations()

    def _body(self, request: ModelRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": request.model,
            "messages": Conversation(request.system, request.messages),
            self._max_tokens_field: request.max_output_tokens,
        }
        if request.tools:
            body["tools"] = tools_json(request.tools)
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if request.stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return body

    def _encode(self, body: dict[str, Any]) -> bytes | Spliced:
        """The body's bytes, the conversation's kept encoding spliced in last (not copied
        when long)."""
        conversation = body.get("messages")
        if not isinstance(conversation, Conversation):
            return orjson.dumps(body)  # the request's extra fields replaced the messages
        rest = orjson.dumps({k: v for k, v in body.items() if k != "messages"})
        before = rest[:-1] + (b',"messages":' if len(rest) > 2 else b'"messages":')
        return conversation.json(self._conversations, before=before, after=b"}")

    def _parse(self, data: Any, request: ModelRequest) -> ModelResponse:
        try:
            return response_from_openai(self.name, data, request.model)
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise ModelResponseError(
                f"{self.name}: the answer for model {request.model} has an unexpected shape: "
                f"{exc!r}"
            ) from exc

    def _stream_state(self, request: ModelRequest, on_delta: DeltaCallback | None) -> OpenAIStream:
        return OpenAIStream(self.name, request.model, on_delta)
