"""OpenAI's response shapes: a whole completion, stream chunks, usage, the model list.

Exactly the fields OpenAI's chat-completions API sends, so any client that
parses OpenAI's answers parses these (checked with the official ``openai``
SDK in the tests).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson
from aiohttp import web

from channels.api.errors import ApiError
from threads.messages import Usage

DONE = b"data: [DONE]\n\n"
SSE_HEADERS = {
    "Content-Type": "text/event-stream; charset=utf-8",
    "Cache-Control": "no-cache",
    # Proxies (nginx) hold a buffered response back; a stream must pass at once.
    "X-Accel-Buffering": "no",
}


def json_response(status: int, body: Any, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        status=status,
        body=orjson.dumps(body),
        content_type="application/json",
        headers=headers,
    )


def error_response(error: ApiError, headers: dict[str, str] | None = None) -> web.Response:
    return json_response(error.status, error.body(), {**error.headers(), **(headers or {})})


def usage_of(usage: Usage) -> dict[str, Any]:
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
    }


def completion(
    ident: str, created: int, model: str, content: str, finish: str, usage: Usage
) -> dict[str, Any]:
    """A whole ``chat.completion``."""
    return {
        "id": ident,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, "refusal": None},
                "logprobs": None,
                "finish_reason": finish,
            }
        ],
        "usage": usage_of(usage),
    }


class Chunks:
    """The ``chat.completion.chunk`` events of one streamed completion, as SSE bytes."""

    __slots__ = ("_head",)

    def __init__(self, ident: str, created: int, model: str) -> None:
        # Every chunk starts the same: encoded once, the delta spliced in after it.
        self._head = (
            b'data: {"id":'
            + orjson.dumps(ident)
            + b',"object":"chat.completion.chunk","created":'
            + str(created).encode()
            + b',"model":'
            + orjson.dumps(model)
        )

    def delta(self, delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return self._head + b',"choices":[' + orjson.dumps(choice) + b"]}\n\n"

    def role(self) -> bytes:
        return self.delta({"role": "assistant", "content": ""})

    def text(self, text: str) -> bytes:
        return self.delta({"content": text})

    def finish(self, reason: str) -> bytes:
        return self.delta({}, reason)

    def usage(self, usage: Usage) -> bytes:
        """The last chunk when ``stream_options.include_usage`` is set: no choices, the usage."""
        return self._head + b',"choices":[],"usage":' + orjson.dumps(usage_of(usage)) + b"}\n\n"


def error_event(error: ApiError) -> bytes:
    """An error after the stream began (its status was already sent): OpenAI's error event."""
    return b"data: " + orjson.dumps(error.body()) + b"\n\n"


def model_list(agents: Iterable[str], created: int) -> dict[str, Any]:
    return {"object": "list", "data": [model_entry(name, created) for name in agents]}


def model_entry(name: str, created: int) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": created, "owned_by": "gateway"}
