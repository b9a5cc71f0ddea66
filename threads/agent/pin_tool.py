"""``pin_message``: the model keeps a message word for word through every summary.

The model does not see entry ids, so it names the message: its user's
latest (the default), its own latest, or the newest containing a quote.
The pin is the same record ``gateway sessions pin`` writes.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from threads.agent.compaction import pin
from threads.agent.tools import ToolContext, ToolOutput, json_text, tool
from threads.llm.echo import split_wake
from threads.store.entries import MessageEntry


class PinArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    which: Literal["last_user", "last_assistant"] = Field(
        default="last_user", description="whose latest message to pin"
    )
    quote: str = Field(
        default="", description="pin the newest message containing this text instead"
    )


@tool(
    "pin_message",
    "Keep a message word for word through every summary of this conversation (a requirement, "
    "a key decision). Pins your user's latest message, your own latest (which), or the newest "
    "message containing quote.",
    PinArgs,
)
async def pin_message_tool(args: PinArgs, ctx: ToolContext) -> ToolOutput:
    session = ctx.run.session
    role = "user" if args.which == "last_user" else "assistant"
    quote = args.quote.strip()
    for entry in session.path_reversed():
        if not isinstance(entry, MessageEntry) or entry.message.role not in ("user", "assistant"):
            continue
        text = entry.message.text()
        if quote and quote not in text:
            continue
        if not quote and (entry.message.role != role or not text.strip()):
            continue
        await pin(session, entry.id)
        _fields, body = split_wake(text)
        shown = " ".join(body.split())
        return ToolOutput(
            content=json_text(
                {"pinned": entry.id, "text": shown[:200] + ("…" if len(shown) > 200 else "")}
            )
        )
    wanted = f"a message containing {quote!r}" if quote else f"a {role} message with text"
    return ToolOutput(
        content=f"nothing to pin: this conversation has no {wanted}; quote words it does hold",
        is_error=True,
    )
