"""The model port: one request in, one assistant message out, text deltas streamed.

Clients speak a provider's protocol (OpenAI chat completions, Anthropic
messages) over aiohttp; the agent loop only sees :class:`ModelClient`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from threads.messages import Message, Usage

StopReason = Literal["end_turn", "tool_use", "max_tokens", "stop_sequence", "error"]
RunMetadata = Literal["headers", "body", "off"]
"""How a client sends the run metadata: ``X-Weft-*`` headers, body fields, or not at all."""
DeltaCallback = Callable[[str], None]

UNPARSED_ARGS_KEY = "_unparsed_arguments"
"""The one key of a :class:`~threads.messages.ToolCallPart`'s ``args`` when the
model sent arguments that are not a JSON object; its value is the raw text.
The agent loop should answer such a call with a tool error, not run it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolSpec:
    """A tool as the model sees it: name, description and the JSON schema of its arguments.

    Its encoding for a provider is kept with it (:func:`threads.messages.wire_form`).
    """

    name: str
    description: str
    parameters: Mapping[str, Any]
    _wire: tuple[str, bytes] | None = field(default=None, init=False, repr=False, compare=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelRequest:
    """One call to a model."""

    model: str
    messages: Sequence[Message]
    system: str = ""
    tools: Sequence[ToolSpec] = ()
    max_output_tokens: int = 4096
    temperature: float | None = None
    stream: bool = False
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Provider-specific body fields merged last into the request body, e.g.
    ``{"thinking": {"type": "enabled", "budget_tokens": 2048}}`` for Anthropic or
    ``{"reasoning_effort": "low"}`` for OpenAI."""
    metadata: Mapping[str, str] = field(default_factory=dict)
    """The run metadata (``weft.session.id``, ``weft.turn``, ``weft.public_id``, …):
    sent as ``X-Weft-*`` headers, or in the body where the provider takes
    metadata (the provider's ``run_metadata`` setting)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelResponse:
    """The model's answer: one assistant message (text, reasoning, tool calls) and its cost."""

    message: Message
    usage: Usage = field(default_factory=Usage)
    stop_reason: StopReason = "end_turn"
    model: str = ""


@runtime_checkable
class ModelClient(Protocol):
    """Anything that answers a :class:`ModelRequest`."""

    async def complete(
        self, request: ModelRequest, on_delta: DeltaCallback | None = None
    ) -> ModelResponse:
        """Answer the request; text deltas go to ``on_delta`` as they arrive when streaming."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...
