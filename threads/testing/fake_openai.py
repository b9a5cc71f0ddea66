"""A fake OpenAI-compatible model server on loopback, for tests and benchmarks.

It serves ``GET /v1/models`` and ``POST /v1/chat/completions``, whole or
streamed (SSE, with the usage chunk when ``stream_options.include_usage``),
with tool calls. What it answers is scripted::

    async with FakeOpenAIServer() as server:
        server.script(
            Reply(tool_calls=[ToolCall(name="search", arguments={"q": "weather"})]),
            Failure.rate_limited(retry_after=2),
            Reply(text="Sunny.", input_tokens=120, output_tokens=3),
        )
        client = OpenAIClient(base_url=server.base_url, api_key="sk-test")
        ...
        assert server.requests[0].headers["Authorization"] == "Bearer sk-test"

The script values, the default responder and the server's life are
:mod:`threads.testing.fake_model`'s, re-exported here as the fakes' public
test API; the fake Anthropic server in :mod:`threads.testing.fake_anthropic`
takes the same ones. A :class:`Failure` answers with an error the way the real
OpenAI API does. The server checks what the real API would refuse: a body that
is not JSON, no ``model`` or ``messages``, a ``tool`` message answering no
earlier tool call, a wrong API key when one is set.

For a benchmark, ``FakeOpenAIServer(record=False)`` answers at once and keeps
no per-request state beyond a counter.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
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
    peer_of,
    send_events,
    tool_then,
)

__all__ = [
    "Answer",
    "Failure",
    "FakeModelServer",
    "FakeOpenAIServer",
    "RecordedRequest",
    "Reply",
    "Responder",
    "ToolCall",
    "echo",
    "tool_then",
]


# -- the OpenAI protocol -----------------------------------------------------------------


def _openai_error(failure: Failure, api_key: str = "") -> dict[str, Any]:
    message, kind, code = failure.message, "invalid_request_error", None
    if failure.kind == "rate_limit":
        kind, code = "requests", "rate_limit_exceeded"
    elif failure.kind == "server_error":
        kind = "server_error"
        message = message or "The server had an error while processing your request."
    elif failure.kind == "overflow":
        window = int(message or 128_000)
        message = (
            f"This model's maximum context length is {window} tokens. However, your messages "
            f"resulted in {window + 1} tokens. Please reduce the length of the messages."
        )
        code = "context_length_exceeded"
    elif failure.kind == "auth":
        code = "invalid_api_key"
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def _check_chat_body(body: Any) -> str:
    """Why the real API would refuse this body, or ""."""
    if not isinstance(body, dict):
        return "We could not parse the JSON body of your request."
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "you must provide a model parameter"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "'messages' must be a non-empty array"
    called: set[str] = set()
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in (
            "system",
            "developer",
            "user",
            "assistant",
            "tool",
        ):
            return f"Invalid value for 'messages[{i}].role'"
        for call in message.get("tool_calls") or ():
            called.add(str(call.get("id")))
            if not isinstance(call.get("function", {}).get("arguments"), str):
                return f"messages[{i}].tool_calls[].function.arguments must be a string"
        if message["role"] == "tool" and message.get("tool_call_id") not in called:
            return (
                f"Invalid parameter: messages[{i}] with role 'tool' must be a response to a "
                "preceding message with 'tool_calls'."
            )
    return ""


class FakeOpenAIServer(FakeModelServer):
    """A fake of the OpenAI chat-completions API; ``base_url`` is what a client needs.

    ``models`` are listed by ``GET /v1/models``; any model name is accepted.
    With ``api_key`` set, a request without ``Authorization: Bearer <api_key>``
    gets a 401 that repeats the key it got, as careless providers do, so tests
    can check that a client keeps keys out of its errors.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        api_key: str | None = None,
        default: Responder = echo,
        record: bool = True,
        models: Sequence[str] = ("fake-model",),
    ) -> None:
        super().__init__(host=host, port=port, api_key=api_key, default=default, record=record)
        self.models = tuple(models)

    @property
    def base_url(self) -> str:
        """The base URL an OpenAI client takes, ending in ``/v1``."""
        return f"{self.url}/v1"

    def routes(self) -> Iterable[web.RouteDef]:
        return (
            web.get("/v1/models", self._models),
            web.post("/v1/chat/completions", self._chat),
        )

    def _refuse_key(self, request: web.Request) -> web.Response | None:
        if self.api_key is None:
            return None
        got = request.headers.get("Authorization", "")
        if got == f"Bearer {self.api_key}":
            return None
        sent = got.removeprefix("Bearer ")
        failure = Failure(status=401, kind="auth", message=f"Incorrect API key provided: {sent}.")
        return json_response(401, _openai_error(failure))

    async def _models(self, request: web.Request) -> web.Response:
        recorded = RecordedRequest(
            request.method, request.path, request.headers, None, peer_of(request)
        )
        self._arrived(recorded)
        refused = self._refuse_key(request)
        if refused is not None:
            return refused
        data = [{"id": m, "object": "model", "created": 0, "owned_by": "fake"} for m in self.models]
        return json_response(200, {"object": "list", "data": data})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        recorded, raw = await self.receive(request)
        refused = self._refuse_key(request)
        if refused is not None:
            return refused
        problem = _check_chat_body(recorded.body)
        if problem:
            return json_response(400, _openai_error(Failure.error(400, problem)))
        answer = self.answer_for(recorded)
        if not await self.pause(answer.delay):
            return json_response(503, _openai_error(Failure.server_error(503, "shutting down")))
        if isinstance(answer, Failure):
            return json_response(answer.status, _openai_error(answer), answer.headers)
        usage = self._usage(answer, len(raw))
        model = recorded.model
        if recorded.stream:
            include_usage = bool((recorded.body.get("stream_options") or {}).get("include_usage"))
            events = self._chunks(answer, model, usage if include_usage else None)
            return await send_events(self, request, events, answer)
        return json_response(200, self._completion(answer, model, usage))

    # -- rendering

    def _usage(self, reply: Reply, request_size: int) -> dict[str, Any]:
        prompt = reply.input_tokens
        if prompt is None:
            prompt = estimate_tokens(request_size)
        completion = reply.output_tokens
        if completion is None:
            size = len(reply.text) + sum(len(c.arguments_json()) for c in reply.tool_calls)
            completion = estimate_tokens(size)
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": reply.cached_tokens},
        }

    def _call_ids(self, reply: Reply) -> list[str]:
        return [c.id or self.next_id("call_") for c in reply.tool_calls]

    def _finish(self, reply: Reply) -> str:
        return reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")

    def _completion(self, reply: Reply, model: str, usage: dict[str, Any]) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
        if reply.reasoning:
            message["reasoning_content"] = reply.reasoning
        if reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments_json()},
                }
                for call_id, c in zip(self._call_ids(reply), reply.tool_calls, strict=True)
            ]
        return {
            "id": self.next_id("chatcmpl-"),
            "object": "chat.completion",
            "created": 0,
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": self._finish(reply)}],
            "usage": usage,
        }

    def _chunks(self, reply: Reply, model: str, usage: dict[str, Any] | None) -> list[bytes]:
        ident = self.next_id("chatcmpl-")

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            data = {
                "id": ident,
                "object": "chat.completion.chunk",
                "created": 0,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
            return b"data: " + orjson.dumps(data) + b"\n\n"

        events = [chunk({"role": "assistant", "content": ""})]
        if reply.reasoning:
            events.append(chunk({"reasoning_content": reply.reasoning}))
        events.extend(chunk({"content": piece}) for piece in reply.text_chunks())
        for index, (call_id, call) in enumerate(
            zip(self._call_ids(reply), reply.tool_calls, strict=True)
        ):
            head = {"index": index, "id": call_id, "type": "function"}
            events.append(
                chunk({"tool_calls": [{**head, "function": {"name": call.name, "arguments": ""}}]})
            )
            args = call.arguments_json()
            half = len(args) // 2
            for piece in (args[:half], args[half:]):
                if piece:
                    events.append(
                        chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
                    )
        events.append(chunk({}, self._finish(reply)))
        if usage is not None:
            data = {
                "id": ident,
                "object": "chat.completion.chunk",
                "created": 0,
                "model": model,
                "choices": [],
                "usage": usage,
            }
            events.append(b"data: " + orjson.dumps(data) + b"\n\n")
        events.append(b"data: [DONE]\n\n")
        return events
