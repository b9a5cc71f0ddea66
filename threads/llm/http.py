"""What both HTTP model clients share: the session, one POST, streaming, retries, errors.

A client subclasses :class:`HTTPModelClient` and supplies the protocol: how a
:class:`ModelRequest` becomes a body, how an answer body becomes a
:class:`ModelResponse`, and a :class:`StreamState` that folds server-sent
events into one. Everything about the wire that is not the protocol lives here.

Speed matters (a turn has about a millisecond of Python): one
``aiohttp.ClientSession`` per client, opened on first use and kept, with the
fixed headers set once; bodies go through orjson; no per-call allocations
beyond the request itself.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Protocol, Self

import aiohttp
import orjson

from config.redaction import redact_text, redact_url
from threads.llm.base import DeltaCallback, ModelRequest, ModelResponse, RunMetadata
from threads.llm.conversations import Spliced
from threads.llm.errors import (
    ModelConnectionError,
    ModelError,
    ModelResponseError,
    ModelTimeoutError,
)
from threads.llm.retry import Clock, Retrier, RetryPolicy, Sleep, error_for_status, is_retryable
from threads.llm.sse import SSEDecoder, SSEEvent


@functools.lru_cache(maxsize=256)
def metadata_header(key: str) -> str:
    """The HTTP header a run metadata key travels in: ``weft.session.id`` → ``X-Weft-Session-Id``.

    Cached: the keys are the few the gateway names, and every request sends them.
    """
    words = key.removeprefix("weft.").replace("_", ".").split(".")
    return "X-Weft-" + "-".join(w.capitalize() for w in words if w)


class StreamState(Protocol):
    """Folds one streamed answer's events into a :class:`ModelResponse`.

    ``emitted`` turns true once any text went to the caller's callback.
    """

    emitted: bool

    def feed(self, event: SSEEvent) -> None:
        """Take one event; text deltas go to the callback before this returns."""
        ...

    def finish(self) -> ModelResponse:
        """The answer, once the stream ended; an error if it ended too early."""
        ...


class HTTPModelClient(ABC):
    """A :class:`~threads.llm.base.ModelClient` over one aiohttp session.

    ``name`` is the provider's name in the configuration and appears in every
    error and log line. ``secret`` (the API key, or "") is redacted from any
    provider text before it reaches an error; it never appears in ``repr``.
    Errors, logs and ``repr`` show ``url`` with any credentials redacted.
    """

    def __init__(
        self,
        *,
        name: str,
        url: str,
        headers: Mapping[str, str],
        secret: str = "",
        timeout_seconds: float = 120.0,
        retry: RetryPolicy | None = None,
        sleep: Sleep | None = None,
        clock: Clock | None = None,
        max_connections: int = 100,
        run_metadata: RunMetadata = "headers",
    ) -> None:
        self.name = name
        self.run_metadata = run_metadata
        self.url = url
        self._shown_url = redact_url(url)
        self.timeout_seconds = timeout_seconds
        self._headers = dict(headers)
        self._secret = secret
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None
        self._closed = False
        retrier_args: dict[str, Any] = {}
        if sleep is not None:
            retrier_args["sleep"] = sleep
        if clock is not None:
            retrier_args["clock"] = clock
        self._retrier = Retrier(retry or RetryPolicy(), provider=name, **retrier_args)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, url={self._shown_url!r})"

    # -- the protocol, supplied by subclasses ------------------------------------------

    @abstractmethod
    def _body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body for ``request``."""

    def _encode(self, body: dict[str, Any]) -> bytes | Spliced:
        """The bytes of ``body``: its JSON (a client may splice in what it keeps encoded)."""
        return orjson.dumps(body)

    @abstractmethod
    def _parse(self, data: Any, request: ModelRequest) -> ModelResponse:
        """The answer in a non-streamed response body."""

    @abstractmethod
    def _stream_state(self, request: ModelRequest, on_delta: DeltaCallback | None) -> StreamState:
        """A fresh fold for one streamed answer."""

    # -- ModelClient -------------------------------------------------------------------

    async def complete(
        self, request: ModelRequest, on_delta: DeltaCallback | None = None
    ) -> ModelResponse:
        """Answer ``request``, retrying what is worth retrying.

        Streams when ``request.stream`` is set, sending text deltas to
        ``on_delta`` as they arrive; without streaming, ``on_delta`` (if given)
        gets the whole text once.
        """
        body = self._body(request)
        headers: dict[str, str] | None = None
        if request.metadata and self.run_metadata == "body":
            body.update(self._metadata_body(request.metadata))
        elif request.metadata and self.run_metadata == "headers":
            headers = {metadata_header(k): v for k, v in request.metadata.items()}
        if request.extra:
            body.update(request.extra)
        payload = self._encode(body)
        if request.stream:
            return await self._retrier.call(
                lambda: self._stream_once(payload, request, on_delta, headers),
                model=request.model,
            )
        response = await self._retrier.call(
            lambda: self._post_once(payload, request, headers), model=request.model
        )
        if on_delta is not None:
            text = response.message.text()
            if text:
                on_delta(text)
        return response

    async def close(self) -> None:
        """Close the connections; the client cannot be used afterwards."""
        self._closed = True
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- one attempt -------------------------------------------------------------------

    def _open(self) -> aiohttp.ClientSession:
        if self._closed:
            raise ModelError(f"{self.name}: the model client is closed")
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=self.timeout_seconds, sock_read=self.timeout_seconds
        )
        connector = aiohttp.TCPConnector(limit=self._max_connections)
        self._session = aiohttp.ClientSession(
            headers=self._headers, timeout=timeout, connector=connector
        )
        return self._session

    def _metadata_body(self, metadata: Mapping[str, str]) -> dict[str, Any]:
        """The body fields carrying the run metadata (the OpenAI shape: ``metadata``)."""
        return {"metadata": dict(metadata)}

    async def _post_once(
        self,
        payload: bytes | Spliced,
        request: ModelRequest,
        headers: Mapping[str, str] | None = None,
    ) -> ModelResponse:
        session = self._session or self._open()
        try:
            async with session.post(self.url, data=_data(payload), headers=headers) as resp:
                raw = await resp.read()
                if resp.status >= 300:
                    raise self._status_error(resp, raw, request.model)
        except TimeoutError as exc:
            raise self._timeout(request, partial=False) from exc
        except aiohttp.ClientError as exc:
            raise self._unreachable(request, exc, partial=False) from exc
        return self._parse_body(raw, request)

    async def _stream_once(
        self,
        payload: bytes | Spliced,
        request: ModelRequest,
        on_delta: DeltaCallback | None,
        headers: Mapping[str, str] | None = None,
    ) -> ModelResponse:
        session = self._session or self._open()
        state = self._stream_state(request, on_delta)
        try:
            async with session.post(self.url, data=_data(payload), headers=headers) as resp:
                if resp.status >= 300:
                    raise self._status_error(resp, await resp.read(), request.model)
                if resp.content_type != "text/event-stream":
                    # Some compatible servers ignore "stream": answer as a whole.
                    response = self._parse_body(await resp.read(), request)
                    text = response.message.text()
                    if on_delta is not None and text:
                        on_delta(text)
                    return response
                decoder = SSEDecoder()
                async for chunk in resp.content.iter_any():
                    for event in decoder.feed(chunk):
                        state.feed(event)
                for event in decoder.close():
                    state.feed(event)
        except ModelError as exc:
            if state.emitted and is_retryable(exc):
                raise ModelConnectionError(
                    f"{self.name}: the stream for model {request.model} broke after text "
                    f"was streamed: {exc}",
                    partial=True,
                ) from exc
            raise
        except TimeoutError as exc:
            raise self._timeout(request, partial=state.emitted) from exc
        except aiohttp.ClientError as exc:
            raise self._unreachable(request, exc, partial=state.emitted) from exc
        return state.finish()

    # -- errors ------------------------------------------------------------------------

    def redact(self, text: str) -> str:
        """``text`` with the API key and any URL credentials blanked out."""
        if self._secret and self._secret in text:
            text = text.replace(self._secret, "[redacted]")
        return redact_text(text)

    def _status_error(self, resp: aiohttp.ClientResponse, raw: bytes, model: str) -> ModelError:
        body = self.redact(raw.decode("utf-8", "replace"))
        return error_for_status(self.name, model, resp.status, resp.headers, body)

    def _parse_body(self, raw: bytes, request: ModelRequest) -> ModelResponse:
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            shown = self.redact(raw[:200].decode("utf-8", "replace"))
            raise ModelResponseError(
                f"{self.name}: the answer for model {request.model} is not JSON ({exc}): {shown!r}"
            ) from None
        return self._parse(data, request)

    def _timeout(self, request: ModelRequest, *, partial: bool) -> ModelTimeoutError:
        what = "stopped streaming for" if partial else "did not answer within"
        return ModelTimeoutError(
            f"{self.name}: model {request.model} {what} {self.timeout_seconds:g}s ({self._shown_url})",
            partial=partial,
        )

    def _unreachable(
        self, request: ModelRequest, exc: aiohttp.ClientError, *, partial: bool
    ) -> ModelConnectionError:
        what = "lost the connection to" if partial else "cannot reach"
        detail = self.redact(str(exc)) or type(exc).__name__
        return ModelConnectionError(
            f"{self.name}: {what} {self._shown_url} for model {request.model}: {detail}",
            partial=partial,
        )


def _data(payload: bytes | Spliced) -> bytes | aiohttp.payload.Payload:
    """What a post sends: the bytes, or a fresh writer of a spliced body for each attempt."""
    return payload if isinstance(payload, bytes) else SplicedPayload(payload)


class SplicedPayload(aiohttp.payload.Payload):
    """A :class:`Spliced` body written piece by piece: its long middle, a view of a
    conversation's kept bytes, goes to the socket without being copied into one body."""

    _autoclose = True  # nothing to close

    def __init__(self, body: Spliced) -> None:
        super().__init__(body, content_type="application/json")
        self._size = len(body)
        self._body = body

    def decode(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        return bytes(self._body).decode(encoding, errors)

    async def write(self, writer: aiohttp.abc.AbstractStreamWriter) -> None:
        await self.write_with_length(writer, None)

    async def write_with_length(
        self, writer: aiohttp.abc.AbstractStreamWriter, content_length: int | None
    ) -> None:
        body = self._body
        if content_length is not None and content_length < len(body):
            await writer.write(bytes(body)[:content_length])
            return
        # The small head first: the client sends it with the headers in one write.
        for piece in (body.head, body.kept, body.tail):
            await writer.write(piece)
