"""Views of a transcript for other readers: a fork's stripped inheritance, tool summaries.

A new fork starts from its parent's history, stripped: tool calls folded into
one-line summaries, reasoning removed, and wake headers cut to sender and time.
"""

from __future__ import annotations

from collections.abc import Sequence

from threads.context import SUMMARY_OPEN
from threads.llm.echo import split_wake
from threads.messages import Message, TextPart, ToolCallPart, ToolResultPart

SUMMARY_CHARS = 120


def one_line(text: str, limit: int = SUMMARY_CHARS) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def tool_summary(call: ToolCallPart, result: ToolResultPart | None) -> str:
    """One line for a tool call and its result: ``name(arg=…) → result``."""
    args = ", ".join(f"{k}={one_line(str(v), 40)}" for k, v in call.args.items())
    line = f"{call.name}({args})"
    if result is not None:
        line += f" → {'error: ' if result.is_error else ''}{one_line(result.content, 80)}"
    return line


def _call_summary(call: ToolCallPart, result: ToolResultPart | None) -> str:
    return f"[tool {tool_summary(call, result)}]"


def _short_header(text: str) -> str:
    if text.startswith(SUMMARY_OPEN):
        return text
    fields, body = split_wake(text)
    if not fields:
        return text
    sender = fields.get("sender", "user")
    if "caller_session_key" in fields:
        sender = f"session {fields['caller_session_key']}"
    elif fields.get("source") not in (None, "telegram", "discord", "web", "cli", "api"):
        sender = fields.get("source", sender)
    return f"[{sender} at {fields.get('time', '')}]\n{body}"


def strip_for_fork(messages: Sequence[Message]) -> list[Message]:
    """The parent's context as a fork inherits it: no tool traffic, no reasoning."""
    results = {p.call_id: p for m in messages for p in m.tool_results()}
    out: list[Message] = []
    for message in messages:
        if message.role == "tool":
            continue
        if message.role == "user":
            text = _short_header(message.text())
        else:
            lines = []
            for part in message.content:
                if isinstance(part, TextPart) and part.text:
                    lines.append(part.text)
                elif isinstance(part, ToolCallPart):
                    lines.append(_call_summary(part, results.get(part.id)))
            text = "\n".join(lines)
        if not text:
            continue
        if out and out[-1].role == message.role:
            merged = out[-1].text() + "\n" + text
            out[-1] = Message(role=message.role, content=(TextPart(text=merged),))
        else:
            out.append(Message(role=message.role, content=(TextPart(text=text),)))
    return out
