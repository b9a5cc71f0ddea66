"""A fake Anthropic messages server on loopback, for tests.

It serves ``POST /v1/messages``, whole or streamed (the real event sequence:
``message_start``, ``content_block_start`` / ``content_block_delta`` /
``content_block_stop`` per block, ``message_delta``, ``message_stop``, with a
``ping``), with ``thinking`` blocks (signed), text and ``tool_use``. It takes
the same script values as :mod:`threads.testing.fake_openai` (they are
:mod:`threads.testing.fake_model`'s)::

    async with FakeAnthropicServer(api_key="sk-ant-test") as server:
        server.script(
            Failure.rate_limited(retry_after=1),
            Reply(reasoning="Let me think.", reasoning_signature="sig", text="Hi."),
        )
        client = AnthropicClient(base_url=server.base_url, api_key="sk-ant-test")

A :class:`Failure` is rendered as Anthropic renders errors
(``{"type": "error", "error": {"type": ..., "message": ...}}``); a context
overflow is the 400 ``prompt is too long``. The server refuses what the real
API would: no ``model``, ``max_tokens`` or ``messages``, a ``tool_result``
that answers no ``tool_use`` of the turn before, a wrong ``x-api-key`` when
one is set, no ``anthropic-version`` header.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson
from aiohttp import web

from threads.testing.fake_model import (
    Answer,
    Failure,
    FakeModelServer,
    RecordedRequest,
    Reply,
    Responder,
    ToolCall,
    echo,
    estimate_tokens,
    json_response,
    send_events,
)

__all__ = [
    "Answer",
    "Failure",
    "FakeAnthropicServer",
    "RecordedRequest",
    "Reply",
    "Responder",
    "ToolCall",
    "echo",
]

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def _anthropic_error(failure: Failure) -> dict[str, Any]:
    message = failure.message
    if failure.kind == "overflow":
        window = int(message or 200_000)
        message = f"prompt is too long: {window + 1} tokens > {window} maximum"
    elif failure.kind == "server_error":
        message = message or ("Overloaded" if failure.status == 529 else "Internal server error")
    kind = _ERROR_TYPES.get(failure.status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def _event(name: str, data: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def _check_messages_body(body: Any) -> str:
    """Why the real API would refuse this body, or ""."""
    if not isinstance(body, dict):
        return "request body is not valid JSON"
    for key, kind in (("model", str), ("max_tokens", int), ("messages", list)):
        if not isinstance(body.get(key), kind):
            return f"{key}: Field required"
    previous_calls: set[str] = set()
    for i, message in enumerate(body["messages"]):
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            return f"messages.{i}.role: Input should be 'user' or 'assistant'"
        content = message.get("content")
        blocks = content if isinstance(content, list) else []
        if message["role"] == "user":
            for block in blocks:
                if block.get("type") == "tool_result" and block.get("tool_use_id") not in (
                    previous_calls
                ):
                    return (
                        f"messages.{i}.content: unexpected `tool_use_id` found in `tool_result` "
                        "blocks; each tool_result block must have a corresponding tool_use "
                        "block in the previous message"
                    )
            previous_calls = set()
        else:
            previous_calls = {str(b.get("id")) for b in blocks if b.get("type") == "tool_use"}
            for block in blocks:
                if block.get("type") == "tool_use" and not isinstance(block.get("input"), dict):
                    return f"messages.{i}.content.tool_use.input: Input should be an object"
        for block in blocks:
            if block.get("type") == "text" and not block.get("text"):
                return f"messages.{i}: text content blocks must be non-empty"
    return ""


class FakeAnthropicServer(FakeModelServer):
    """A fake of the Anthropic messages API; ``base_url`` is what a client needs."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        api_key: str | None = None,
        default: Responder = echo,
        record: bool = True,
    ) -> None:
        super().__init__(host=host, port=port, api_key=api_key, default=default, record=record)

    @property
    def base_url(self) -> str:
        """The base URL an Anthropic client takes (the host, without ``/v1``)."""
        return self.url

    def routes(self) -> Iterable[web.RouteDef]:
        return (web.post("/v1/messages", self._messages),)

    def _refuse(self, request: web.Request) -> web.Response | None:
        if self.api_key is not None:
            sent = request.headers.get("x-api-key", "")
            if sent != self.api_key:
                failure = Failure(status=401, kind="auth", message=f"invalid x-api-key: {sent}")
                return json_response(401, _anthropic_error(failure))
        if "anthropic-version" not in request.headers:
            failure = Failure.error(400, "anthropic-version: header is required")
            return json_response(400, _anthropic_error(failure))
        return None

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        recorded, raw = await self.receive(request)
        refused = self._refuse(request)
        if refused is not None:
            return refused
        problem = _check_messages_body(recorded.body)
        if problem:
            return json_response(400, _anthropic_error(Failure.error(400, problem)))
        answer = self.answer_for(recorded)
        if not await self.pause(answer.delay):
            return json_response(529, _anthropic_error(Failure.server_error(529)))
        if isinstance(answer, Failure):
            return json_response(answer.status, _anthropic_error(answer), answer.headers)
        usage = self._usage(answer, len(raw))
        if recorded.stream:
            events = self._events(answer, recorded.model, usage)
            return await send_events(self, request, events, answer)
        return json_response(200, self._message(answer, recorded.model, usage))

    # -- rendering

    def _usage(self, reply: Reply, request_size: int) -> dict[str, int]:
        # Anthropic's input_tokens counts only the part that was not read from the cache.
        prompt = reply.input_tokens
        if prompt is None:
            prompt = estimate_tokens(request_size)
        output = reply.output_tokens
        if output is None:
            size = len(reply.text) + sum(len(c.arguments_json()) for c in reply.tool_calls)
            output = estimate_tokens(size)
        return {
            "input_tokens": max(0, prompt - reply.cached_tokens),
            "output_tokens": output,
            "cache_read_input_tokens": reply.cached_tokens,
            "cache_creation_input_tokens": 0,
        }

    def _blocks(self, reply: Reply) -> list[dict[str, Any]]:
        blocks: list[dict[str, Any]] = []
        if reply.reasoning:
            blocks.append(
                {
                    "type": "thinking",
                    "thinking": reply.reasoning,
                    "signature": reply.reasoning_signature,
                }
            )
        if reply.text:
            blocks.append({"type": "text", "text": reply.text})
        for call in reply.tool_calls:
            arguments = call.arguments if isinstance(call.arguments, dict) else {}
            blocks.append(
                {
                    "type": "tool_use",
                    "id": call.id or self.next_id("toolu_"),
                    "name": call.name,
                    "input": dict(arguments),
                }
            )
        return blocks

    def _stop(self, reply: Reply) -> str:
        return reply.finish_reason or ("tool_use" if reply.tool_calls else "end_turn")

    def _message(self, reply: Reply, model: str, usage: dict[str, int]) -> dict[str, Any]:
        return {
            "id": self.next_id("msg_"),
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": self._blocks(reply),
            "stop_reason": self._stop(reply),
            "stop_sequence": None,
            "usage": usage,
        }

    def _events(self, reply: Reply, model: str, usage: dict[str, int]) -> list[bytes]:
        start_usage = {**usage, "output_tokens": 1}
        message: dict[str, Any] = {
            "id": self.next_id("msg_"),
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": start_usage,
        }
        events = [_event("message_start", {"type": "message_start", "message": message})]
        events.append(_event("ping", {"type": "ping"}))
        calls = iter(reply.tool_calls)
        for index, block in enumerate(self._blocks(reply)):
            kind = block["type"]
            start: dict[str, Any]
            if kind == "thinking":
                start = {"type": "thinking", "thinking": ""}
                deltas = [{"type": "thinking_delta", "thinking": block["thinking"]}]
                if block["signature"]:
                    deltas.append({"type": "signature_delta", "signature": block["signature"]})
            elif kind == "text":
                start = {"type": "text", "text": ""}
                deltas = [{"type": "text_delta", "text": t} for t in reply.text_chunks()]
            else:
                start = {**block, "input": {}}
                raw = next(calls).arguments_json()
                half = len(raw) // 2
                deltas = [
                    {"type": "input_json_delta", "partial_json": piece}
                    for piece in (raw[:half], raw[half:])
                ]
            events.append(
                _event(
                    "content_block_start",
                    {"type": "content_block_start", "index": index, "content_block": start},
                )
            )
            events.extend(
                _event(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": d},
                )
                for d in deltas
            )
            events.append(
                _event("content_block_stop", {"type": "content_block_stop", "index": index})
            )
        events.append(
            _event(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": self._stop(reply), "stop_sequence": None},
                    "usage": {"output_tokens": usage["output_tokens"]},
                },
            )
        )
        events.append(_event("message_stop", {"type": "message_stop"}))
        return events
