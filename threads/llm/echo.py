"""The offline ``echo`` model: what ``make run`` talks to when no model is configured.

It answers every wake by echoing the wake's body back to its caller through
``dispatch`` — ``caller:session`` when a session woke it, ``caller:user`` when a
channel user did, ``user`` when cron's wake header says the output goes to a
user — and ends silently for callers that cannot be answered. The
first answer in a session says that no model is configured and how to
configure one.
"""

from __future__ import annotations

import itertools

from threads.llm.base import DeltaCallback, ModelRequest, ModelResponse
from threads.messages import Message, ToolCallPart, Usage

NOTICE = (
    "(No model is configured, so this gateway runs the offline echo model. "
    'To talk to a real model, set [models] default = "openai/gpt-4o-mini" and a '
    "[models.providers.openai] section in gateway.toml — see gateway.example.toml.)"
)


def split_wake(text: str) -> tuple[dict[str, str], str]:
    """The wake header's fields and the body of a rendered prompt."""
    if not text.startswith("---\n"):
        return {}, text
    end = text.find("\n---", 4)
    if end < 0:
        return {}, text
    fields: dict[str, str] = {}
    for line in text[4:end].splitlines():
        name, sep, value = line.partition(":")
        if sep:
            fields[name.strip()] = value.strip().strip('"')
    body = text[end + 4 :]
    return fields, body.removeprefix("\n")


class EchoModel:
    """A model client that needs no network: it echoes each wake through ``dispatch``."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)

    async def complete(
        self, request: ModelRequest, on_delta: DeltaCallback | None = None
    ) -> ModelResponse:
        prompt = next((m for m in reversed(request.messages) if m.role == "user"), None)
        last = request.messages[-1] if request.messages else None
        if prompt is None or (last is not None and last.role == "tool"):
            # A dispatch that did not end the turn (it was refused): stop here.
            return ModelResponse(message=Message.assistant(""), stop_reason="end_turn")
        fields, body = split_wake(prompt.text())
        first = not any(m.role == "assistant" for m in request.messages)
        text = f"{NOTICE}\n\n{body}" if first else body
        if on_delta is not None:
            on_delta(text)
        has_dispatch = any(t.name == "dispatch" for t in request.tools)
        if not has_dispatch:
            return ModelResponse(message=Message.assistant(text), model="echo")
        delivery = fields.get("delivery", "")
        if "dispatch(to=user)" in delivery and fields.get("sender") == "system":
            # Cron says where its output goes (a chat, or this session's own user).
            sends: list[dict[str, str]] = [{"to": "user", "body": text}]
        elif "dropped" in delivery:
            sends = []
        elif "caller_session_key" in fields:
            sends = [{"to": "caller:session", "body": text}]
        else:
            sends = [{"to": "caller:user", "body": text}]
        call = ToolCallPart(id=f"echo_{next(self._ids)}", name="dispatch", args={"sends": sends})
        return ModelResponse(
            message=Message(role="assistant", content=(call,)),
            usage=Usage(),
            stop_reason="tool_use",
            model="echo",
        )

    async def close(self) -> None:
        return None
