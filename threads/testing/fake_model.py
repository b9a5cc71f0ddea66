r"""What every fake model server shares: the script values and the server's life.

A fake model server listens on loopback and answers what it is scripted to
answer, in its protocol's shape (:mod:`threads.testing.fake_openai`,
:mod:`threads.testing.fake_anthropic`). The script values here are
protocol-neutral: a :class:`Reply` (text, reasoning, :class:`ToolCall`\ s,
usage, streaming pace) or a :class:`Failure` (429 with ``retry-after``, 500, a
context overflow), each with an optional ``delay`` that makes the answer slow.

Each request takes the next scripted answer; with the script empty it asks
``server.default`` (a :data:`Responder`, by default :func:`echo`: the last
user text comes back). Every request is kept in ``server.requests`` as a
:class:`RecordedRequest` (unless ``record=False``, for benchmarks) so tests
can assert on what a client sent.

For a benchmark, a server made with ``record=False`` answers at once and
keeps no per-request state beyond a counter; its responder can be the default
echo, :func:`tool_then` (one tool call, then a final answer, per turn) or one
of your own. Unpaced streams go out in one write.

:class:`FakeModelServer` is the base the protocol servers subclass: start,
script, record, wait, close; :func:`json_response` and :func:`send_events`
render their answers.
"""

from __future__ import annotations

import asyncio
import itertools
import re
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, Self, TypeAlias

import orjson
from aiohttp import web

__all__ = [
    "Answer",
    "Failure",
    "FakeModelServer",
    "RecordedRequest",
    "Reply",
    "Responder",
    "ToolCall",
    "echo",
    "estimate_tokens",
    "json_response",
    "peer_of",
    "send_events",
    "tool_then",
]

_WORDS = re.compile(r"\S+\s*|\s+")


# -- what the server is told to answer ---------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCall:
    """A tool call the fake model makes; ``id`` is generated when empty.

    ``arguments`` is an object, or a string sent as is (to test how a client
    copes with arguments that are not JSON).
    """

    name: str
    arguments: Mapping[str, Any] | str = field(default_factory=dict)
    id: str = ""

    def arguments_json(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return orjson.dumps(dict(self.arguments)).decode()


@dataclass(frozen=True, slots=True, kw_only=True)
class Reply:
    """A successful answer: text, reasoning and tool calls, with its usage.

    Token counts left as None are estimated (about four bytes a token).
    ``finish_reason`` None means the protocol's usual one (tool calls or a
    plain stop). Streamed, the text goes out in ``chunks`` when given, else
    word by word; ``stream_interval`` pauses between events;
    ``disconnect_after`` drops the connection after that many events (to test
    a stream that breaks); ``gate``, when given, holds the last event back
    until it is set (to see deltas arrive before the answer is complete,
    without timing). ``delay`` holds the whole answer back.
    """

    text: str = ""
    tool_calls: Sequence[ToolCall] = ()
    reasoning: str = ""
    reasoning_signature: str = ""
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int = 0
    finish_reason: str | None = None
    chunks: Sequence[str] = ()
    delay: float = 0.0
    stream_interval: float = 0.0
    disconnect_after: int | None = None
    gate: asyncio.Event | None = None

    def text_chunks(self) -> list[str]:
        """The pieces the streamed text is sent in."""
        if self.chunks:
            return list(self.chunks)
        return _WORDS.findall(self.text)


FailureKind: TypeAlias = Literal["rate_limit", "server_error", "overflow", "auth", "other"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Failure:
    """An error answer, rendered the way the server's protocol renders it.

    Build one with the class methods; ``delay`` holds it back like a slow answer.
    """

    status: int
    kind: FailureKind = "other"
    message: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    delay: float = 0.0

    @classmethod
    def rate_limited(
        cls,
        retry_after: float | str | None = 1,
        *,
        retry_after_ms: int | None = None,
        message: str = "Rate limit reached for requests",
    ) -> Failure:
        """429 with ``retry-after`` (seconds, or a string such as an HTTP date) and/or
        ``retry-after-ms``; None leaves the header out."""
        headers: dict[str, str] = {}
        if retry_after is not None:
            headers["retry-after"] = (
                retry_after if isinstance(retry_after, str) else f"{retry_after:g}"
            )
        if retry_after_ms is not None:
            headers["retry-after-ms"] = str(retry_after_ms)
        return cls(status=429, kind="rate_limit", message=message, headers=headers)

    @classmethod
    def server_error(cls, status: int = 500, message: str = "") -> Failure:
        """A 5xx (500, 502, 503, 529 …) with the protocol's usual body."""
        return cls(status=status, kind="server_error", message=message)

    @classmethod
    def context_overflow(cls, window: int = 128_000) -> Failure:
        """The 400 a provider gives a request longer than the model's window."""
        return cls(status=400, kind="overflow", message=str(window))

    @classmethod
    def error(cls, status: int, message: str) -> Failure:
        """Any other error status with the given message."""
        return cls(status=status, kind="other", message=message)


Answer: TypeAlias = Reply | Failure


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One request the server received: method, path, headers and parsed JSON body.

    ``headers`` looks keys up case-insensitively. ``body`` is None for a body
    that was empty or not JSON. ``peer`` is the client's ``host:port``: the same
    for requests that shared a kept-alive connection.
    """

    method: str
    path: str
    headers: Mapping[str, str]
    body: Any
    peer: str = ""

    @property
    def model(self) -> str:
        return str(self.body.get("model", "")) if isinstance(self.body, dict) else ""

    @property
    def stream(self) -> bool:
        return isinstance(self.body, dict) and bool(self.body.get("stream"))

    @property
    def messages(self) -> list[dict[str, Any]]:
        if isinstance(self.body, dict) and isinstance(self.body.get("messages"), list):
            return list(self.body["messages"])
        return []

    @property
    def tools(self) -> list[dict[str, Any]]:
        if isinstance(self.body, dict) and isinstance(self.body.get("tools"), list):
            return list(self.body["tools"])
        return []

    def tool_names(self) -> list[str]:
        """The names of the offered tools, in either protocol's shape."""
        names = []
        for tool in self.tools:
            function = tool.get("function")
            names.append(str((function or tool).get("name", "")))
        return names

    def last_user_text(self) -> str:
        """The text of the last user message that has text (tool results are not text)."""
        for message in reversed(self.messages):
            if message.get("role") != "user":
                continue
            text = _text_of(message.get("content"))
            if text:
                return text
        return ""

    def after_tool_result(self) -> bool:
        """Whether the conversation ends with a tool result (the model's next step is due)."""
        messages = self.messages
        if not messages:
            return False
        last = messages[-1]
        if last.get("role") == "tool":
            return True
        content = last.get("content")
        return (
            last.get("role") == "user"
            and isinstance(content, list)
            and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)
        )


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(b.get("text", ""))
            for b in content
            if isinstance(b, dict) and b.get("type") == "text"
        )
    return ""


Responder: TypeAlias = Callable[[RecordedRequest], Answer]
"""What answers a request when the script is empty."""


def echo(request: RecordedRequest) -> Answer:
    """The default responder: the last user text, unchanged."""
    return Reply(text=request.last_user_text())


def tool_then(call: ToolCall, final: Answer) -> Responder:
    """A responder for agent-loop tests and benchmarks: every turn is one tool call, then ``final``.

    A request whose conversation ends with a tool result gets ``final``; any
    other gets ``call`` (with a fresh id each time). It keeps no state, so any
    number of concurrent sessions can share it.
    """
    first = Reply(tool_calls=[call])

    def respond(request: RecordedRequest) -> Answer:
        return final if request.after_tool_result() else first

    return respond


def estimate_tokens(size: int) -> int:
    """The fake's token count for ``size`` bytes or characters."""
    return max(1, size // 4)


# -- the server --------------------------------------------------------------------------


class FakeModelServer:
    """The life of a fake model server: start, script, record, wait, close.

    Subclasses add the protocol's routes. Use with ``async with`` or
    ``await start()`` / ``await close()``; ``port=0`` picks a free port.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        api_key: str | None = None,
        default: Responder = echo,
        record: bool = True,
    ) -> None:
        self.host = host
        self.port = port
        self.api_key = api_key
        self.default = default
        self.record = record
        self.requests: list[RecordedRequest] = []
        self.request_count = 0
        self._script: deque[Answer] = deque()
        self._ids = itertools.count(1)
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._closing: asyncio.Event | None = None
        self._runner: web.AppRunner | None = None

    # -- lifetime

    def routes(self) -> Iterable[web.RouteDef]:
        """The protocol's routes."""
        return ()

    async def start(self) -> None:
        """Listen; ``port`` holds the bound port afterwards."""
        if self._runner is not None:
            raise RuntimeError(f"{type(self).__name__} is already started on port {self.port}")
        self._closing = asyncio.Event()
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.add_routes(list(self.routes()))
        runner = web.AppRunner(
            app, access_log=None, handler_cancellation=True, shutdown_timeout=1.0
        )
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self.port = int(runner.addresses[0][1])

    async def close(self) -> None:
        """Stop listening; slow answers still pending end at once."""
        if self._closing is not None:
            self._closing.set()
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()
        for _, waiter in self._waiters:
            waiter.cancel()
        self._waiters.clear()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    @property
    def url(self) -> str:
        """The server's root URL."""
        return f"http://{self.host}:{self.port}"

    # -- scripting

    def script(self, *answers: Answer) -> None:
        """Queue answers; each request takes the next one."""
        self._script.extend(answers)

    @property
    def pending(self) -> int:
        """How many scripted answers are still waiting for a request."""
        return len(self._script)

    async def wait_for_requests(self, count: int, timeout: float = 5.0) -> None:
        """Return once ``count`` requests in all have arrived; TimeoutError after ``timeout``."""
        if self.request_count >= count:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (count, waiter)
        self._waiters.append(entry)
        try:
            async with asyncio.timeout(timeout):
                await waiter
        except TimeoutError:
            raise TimeoutError(
                f"{type(self).__name__} got {self.request_count} requests, "
                f"not {count}, within {timeout:g}s"
            ) from None
        finally:
            if entry in self._waiters:
                self._waiters.remove(entry)

    # -- helpers for the protocol handlers

    def next_id(self, prefix: str) -> str:
        return f"{prefix}{next(self._ids):06d}"

    def _arrived(self, recorded: RecordedRequest) -> None:
        self.request_count += 1
        if self.record:
            self.requests.append(recorded)
        if self._waiters:
            for count, waiter in self._waiters:
                if self.request_count >= count and not waiter.done():
                    waiter.set_result(None)

    async def receive(self, request: web.Request) -> tuple[RecordedRequest, bytes]:
        """Read and record a request; the raw body comes back for size estimates."""
        raw = await request.read()
        try:
            body = orjson.loads(raw) if raw else None
        except orjson.JSONDecodeError:
            body = None
        recorded = RecordedRequest(
            request.method, request.path, request.headers, body, peer_of(request)
        )
        self._arrived(recorded)
        return recorded, raw

    def answer_for(self, recorded: RecordedRequest) -> Answer:
        """The next scripted answer, or the default responder's."""
        if self._script:
            return self._script.popleft()
        return self.default(recorded)

    async def pause(self, seconds: float) -> bool:
        """Wait ``seconds`` unless the server closes first; False when it closed."""
        if seconds <= 0:
            return True
        assert self._closing is not None
        try:
            async with asyncio.timeout(seconds):
                await self._closing.wait()
        except TimeoutError:
            return True
        return False

    async def wait_for(self, event: asyncio.Event) -> bool:
        """Wait until ``event`` is set unless the server closes first; False when it closed."""
        assert self._closing is not None
        if event.is_set():
            return True
        async with asyncio.TaskGroup() as group:
            opened = group.create_task(event.wait())
            closed = group.create_task(self._closing.wait())
            await asyncio.wait((opened, closed), return_when=asyncio.FIRST_COMPLETED)
            opened.cancel()
            closed.cancel()
        return event.is_set()


def peer_of(request: web.Request) -> str:
    """The client's ``host:port``, or "" when the transport does not say."""
    peer = request.transport.get_extra_info("peername") if request.transport else None
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else ""


def json_response(status: int, data: Any, headers: Mapping[str, str] | None = None) -> web.Response:
    """A JSON response encoded with orjson."""
    return web.Response(
        status=status, body=orjson.dumps(data), content_type="application/json", headers=headers
    )


async def send_events(
    server: FakeModelServer, request: web.Request, events: Sequence[bytes], reply: Reply
) -> web.StreamResponse:
    """Answer with encoded SSE events, paced as the reply says; drop the connection if it says so.

    Unpaced, the events go out as one ``text/event-stream`` body: the client
    still parses them one by one, and a benchmark does not pay a network
    write per event.
    """
    if not reply.stream_interval and reply.disconnect_after is None and reply.gate is None:
        return web.Response(body=b"".join(events), content_type="text/event-stream")
    resp = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    await resp.prepare(request)
    for n, event in enumerate(events):
        if reply.disconnect_after is not None and n >= reply.disconnect_after:
            if request.transport is not None:
                request.transport.close()
            return resp
        if n and reply.stream_interval and not await server.pause(reply.stream_interval):
            return resp
        last = n == len(events) - 1
        if last and reply.gate is not None and not await server.wait_for(reply.gate):
            return resp
        await resp.write(event)
    await resp.write_eof()
    return resp
