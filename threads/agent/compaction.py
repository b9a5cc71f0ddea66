"""Compaction: summarize the old part of a session so the context fits the model's window.

Nothing is deleted. A compaction entry records a summary and the id of the
first entry kept raw; the context then reads the summary in place of
everything before that entry (seed 003 "Compaction"). The cut is made only at
a user message, so a tool call is never separated from its result. A summary
the model cut off at its output cap is never stored.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import orjson

from config.models import ModelSettings
from threads.errors import ThreadsError
from threads.ids import new_entry_id
from threads.llm.base import ModelClient, ModelRequest
from threads.messages import Message, TextPart, ToolCallPart, ToolResultPart, Usage, message_to_wire
from threads.session import Session
from threads.store.entries import CompactionEntry, MessageEntry, TurnEntry
from threads.tree import message_of
from threads.turns import Run

SUMMARY_SYSTEM = (
    "You write the working memory of an assistant whose conversation grew too long for its "
    "context window. Be faithful and specific; keep names, numbers, ids, paths and promises."
)

SUMMARY_PROMPT = """Summarize the conversation above so the assistant can continue it from this summary alone.
Use exactly these sections:

## Goal
## Constraints
## Progress
## Key decisions
## Next steps
## Critical context

Under Critical context keep anything that must not be lost: identifiers, file paths, URLs, open questions, what the user asked for verbatim when it matters."""

NOTICE = (
    "(This conversation grew long, so its older part was summarized to stay within the "
    "model's context window. Nothing was deleted.)"
)


class CompactionError(ThreadsError):
    """A compaction that could not be made."""


class NothingToCompactError(CompactionError):
    """Everything before the cut is already summarized, or the tail alone is the session."""


class SummaryTruncatedError(CompactionError):
    """The summarizer hit its output cap; a cut-off summary is never stored."""


def estimate_tokens(messages: Sequence[Message]) -> int:
    """About a quarter of the wire bytes: the unit every threshold here uses."""
    return sum(len(orjson.dumps(message_to_wire(m))) for m in messages) // 4


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """What a compaction would summarize and where the kept tail starts."""

    first_kept: str
    previous_summary: str
    to_summarize: list[Message]
    tokens_before: int


def plan(session: Session, keep_recent_tokens: int) -> Plan:
    """Choose the cut: the earliest user message whose tail fits ``keep_recent_tokens``.

    The tail always keeps at least the latest user message (the current prompt).
    """
    path = session.path()
    previous = session.latest_compaction()
    start = 0
    if previous is not None:
        start = next((i for i, e in enumerate(path) if e.id == previous.first_kept), 0)
    candidates = [
        i
        for i in range(start + 1, len(path))
        if isinstance(path[i], MessageEntry) and path[i].message.role == "user"  # type: ignore[attr-defined]
    ]
    if not candidates:
        raise NothingToCompactError(
            f"session {session.id}: nothing before the latest message to summarize"
        )
    cut = candidates[-1]
    tail = 0
    for index in range(len(path) - 1, start, -1):
        message = message_of(path[index])
        if message is not None:
            tail += estimate_tokens([message])
        if tail > keep_recent_tokens:
            break
        if index in candidates:
            cut = index
    head = [m for e in path[start:cut] if (m := message_of(e)) is not None]
    if not head:
        raise NothingToCompactError(f"session {session.id}: nothing new before the cut")
    context = session.context()
    return Plan(
        first_kept=path[cut].id,
        previous_summary=previous.summary if previous is not None else "",
        to_summarize=head,
        tokens_before=estimate_tokens(context),
    )


def transcript(previous_summary: str, messages: Sequence[Message]) -> str:
    """The range being summarized, as plain text the summarizer reads."""
    lines = []
    if previous_summary:
        lines.append(f"[summary of what came before]\n{previous_summary}")
    for message in messages:
        for part in message.content:
            if isinstance(part, TextPart) and part.text:
                lines.append(f"{message.role}: {part.text}")
            elif isinstance(part, ToolCallPart):
                args = orjson.dumps(dict(part.args)).decode()[:500]
                lines.append(f"{message.role} called {part.name}({args})")
            elif isinstance(part, ToolResultPart):
                flag = " (error)" if part.is_error else ""
                lines.append(f"tool {part.name}{flag}: {part.content[:1000]}")
    return "\n".join(lines)


async def summarize(
    client: ModelClient, model: str, settings: ModelSettings, text: str
) -> tuple[str, Usage]:
    """The summary of ``text``; :class:`SummaryTruncatedError` if the model was cut off."""
    request = ModelRequest(
        model=model,
        system=SUMMARY_SYSTEM,
        messages=[Message.user(f"<conversation>\n{text}\n</conversation>\n\n{SUMMARY_PROMPT}")],
        max_output_tokens=settings.max_output_tokens,
    )
    response = await client.complete(request)
    if response.stop_reason == "max_tokens":
        raise SummaryTruncatedError(
            f"the summary hit the output cap of {settings.max_output_tokens} tokens and was "
            "not stored; raise max_output_tokens for this model"
        )
    summary = response.message.text().strip()
    if not summary:
        raise CompactionError("the summarizer returned an empty summary")
    return summary, response.usage


async def compact(
    session: Session,
    client: ModelClient,
    model: str,
    settings: ModelSettings,
    *,
    reason: str = "manual",
    run: Run | None = None,
) -> CompactionEntry:
    """Summarize and record one compaction; the context is compacted when this returns.

    Refused while a call waits for approval: the parked call must stay raw
    at the tail until its decision resolves it.
    """
    if run is None and session.approvals.awaiting:
        raise CompactionError(
            f"session {session.id} has a tool call waiting for approval; compact once it is decided"
        )
    chosen = plan(session, settings.keep_recent_tokens)
    text = transcript(chosen.previous_summary, chosen.to_summarize)
    summary, usage = await summarize(client, model, settings, text)
    entry = CompactionEntry(
        id=new_entry_id(),
        first_kept=chosen.first_kept,
        summary=summary,
        tokens_before=chosen.tokens_before,
        reason=reason,
        summarizer_usage=usage,
        summarizer_model={"model": model},
        range_hash=hashlib.sha256(text.encode()).hexdigest(),
    )
    await session.apply_compaction(entry, run=run)
    return entry


def context_estimate(session: Session) -> int:
    """The trigger's measure: the last turn's reported input plus the estimate of what followed.

    Reported tokens are the signal; only what the report cannot cover is
    estimated. Before the first turn since the latest compaction the whole
    context is estimated. A model that reports no usage is compacted when it
    answers with a context overflow.
    """
    since: list[Message] = []
    for entry in session.path_reversed():
        if isinstance(entry, CompactionEntry):
            break
        if isinstance(entry, TurnEntry):
            return entry.last_input + estimate_tokens(since)
        message = message_of(entry)
        if message is not None:
            since.append(message)
    return estimate_tokens(session.context())


def over_threshold(session: Session, settings: ModelSettings) -> bool:
    """Whether the context has crossed the model's window minus its reserve."""
    return context_estimate(session) > settings.context_window - settings.reserve_tokens
