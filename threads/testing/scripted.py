"""A scripted model for deterministic tests: each call takes the next scripted answer.

    model = ScriptedModel(
        call("check_session", session_key="cli"),
        dispatch(("caller:user", "done")),
    )

A step is a :class:`ModelResponse`, or a function of the request returning one
(to answer from what the model was shown). When the script runs out the model
falls back to ``default`` (by default: reply to the caller with the wake body,
like the echo model), so long-running tests and benchmarks need no script.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from threads.llm.base import DeltaCallback, ModelRequest, ModelResponse
from threads.llm.echo import EchoModel
from threads.messages import Message, ToolCallPart, Usage

Step = ModelResponse | Callable[[ModelRequest], ModelResponse]

_ids = itertools.count(1)


def say(text: str, *, usage: Usage | None = None) -> ModelResponse:
    """A final text answer."""
    return ModelResponse(message=Message.assistant(text), usage=usage or Usage())


def call(name: str, /, *, call_id: str = "", **args: Any) -> ModelResponse:
    """One tool call."""
    return calls((name, args), call_ids=(call_id,) if call_id else ())


def calls(*items: tuple[str, Mapping[str, Any]], call_ids: Iterable[str] = ()) -> ModelResponse:
    """Several tool calls in one step (they may run concurrently)."""
    ids = list(call_ids)
    parts = tuple(
        ToolCallPart(
            id=ids[i] if i < len(ids) else f"call_{next(_ids)}", name=name, args=dict(args)
        )
        for i, (name, args) in enumerate(items)
    )
    return ModelResponse(message=Message(role="assistant", content=parts), stop_reason="tool_use")


def dispatch(*sends: tuple[str, str] | Mapping[str, Any]) -> ModelResponse:
    """A ``dispatch`` call; each send is ``(to, body)`` or a full send object."""
    objects = [{"to": s[0], "body": s[1]} if isinstance(s, tuple) else dict(s) for s in sends]
    return call("dispatch", sends=objects)


class ScriptedModel:
    """A :class:`ModelClient` answering from a script, recording every request."""

    def __init__(self, *steps: Step, default: Step | None = None) -> None:
        self._steps: deque[Step] = deque(steps)
        self._default = default
        self._echo = EchoModel()
        self.requests: list[ModelRequest] = []
        self.gate: asyncio.Event | None = None
        self.called = asyncio.Event()

    def add(self, *steps: Step) -> None:
        self._steps.extend(steps)

    @property
    def remaining(self) -> int:
        return len(self._steps)

    async def complete(
        self, request: ModelRequest, on_delta: DeltaCallback | None = None
    ) -> ModelResponse:
        # A snapshot: the loop keeps appending to the list it sent.
        self.requests.append(dataclasses.replace(request, messages=list(request.messages)))
        self.called.set()
        if self.gate is not None:
            await self.gate.wait()
        step = self._steps.popleft() if self._steps else self._default
        if step is None:
            return await self._echo.complete(request, on_delta)
        response = step(request) if callable(step) else step
        if on_delta is not None and response.message.text():
            on_delta(response.message.text())
        return response

    async def close(self) -> None:
        return None
