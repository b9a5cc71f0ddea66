"""Compaction: summarize the old part of a session so the context fits the model's window.

Nothing is deleted. A compaction entry records a summary and the id of the
first entry kept raw; the context then reads the summary in place of
everything before that entry, then the entries the compaction pinned, then
the kept tail. The cut is made only at a user message, so a tool call is
never separated from its result.

The path is split like the reference library's: :func:`prepare` chooses the
cut (a :class:`Plan`, no model called — what ``gateway sessions compact
--preview`` shows), :func:`preview` adds the summary (a :class:`Compaction`),
:func:`apply` writes it; :func:`compact` is all three. A pinned entry
(:func:`pin`) is summarized like any other and shown again, raw, after the
summary by every compaction that cuts past it. A summary is written by the
:class:`~threads.agent.summaries.Summarizer` chain and checked there.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import orjson

from config.compaction import CompactionConfig
from config.models import ModelSettings
from threads.agent.summaries import BRANCH_PROMPT, CompactionError, Summarizer
from threads.context import message_of
from threads.errors import NoEntryError
from threads.ids import new_entry_id
from threads.messages import (
    Message,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    Usage,
    stored_size,
)
from threads.session import Session
from threads.store.entries import (
    BranchSummaryEntry,
    CompactionEntry,
    CustomEntry,
    CustomMessageEntry,
    Entry,
    MessageEntry,
    TurnEntry,
)
from threads.turns import Run

NOTICE = (
    "(This conversation grew long, so its older part was summarized to stay within the "
    "model's context window. Nothing was deleted.)"
)

PIN_KIND = "weft.pin"
"""The custom entry a pin is: ``data`` names the pinned entry."""

MANUAL = "manual"


class NothingToCompactError(CompactionError):
    """Everything before the cut is already summarized, or the tail alone is the session."""


class NotPinnableError(CompactionError):
    """A pin of an entry that puts no message in the context (a turn, a label, …)."""


def estimate_tokens(messages: Sequence[Message]) -> int:
    """About a quarter of the stored bytes: the unit every threshold here uses.

    Each call measures every message; a turn's check measures only what is
    new (:meth:`~threads.tree.TurnTail.estimate`).
    """
    return sum(stored_size(m) for m in messages) // 4


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """What a compaction would do: where the kept tail starts, what it summarizes, the savings.

    ``tokens_before`` is the estimated context now; ``tokens_kept`` what stays
    raw (the kept tail and the pinned entries) — the context after the
    compaction is that plus the summary.
    """

    first_kept: str
    previous_summary: str
    to_summarize: list[Message]
    tokens_before: int
    tokens_kept: int
    pinned: tuple[str, ...] = ()
    summarized_entries: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Compaction:
    """A computed compaction: the plan and its summary, what :func:`apply` writes as is."""

    plan: Plan
    summary: str
    reason: str = MANUAL
    summarizer_usage: Usage = field(default_factory=Usage)
    summarizer_model: str = ""
    range_hash: str = ""


# -- pins


async def pin(session: Session, entry_id: str) -> None:
    """Keep ``entry_id`` in the context through every compaction (a pin record, a custom entry).

    Only an entry that puts a message in the context can be pinned:
    :class:`NotPinnableError` for any other, :class:`NoEntryError` for an id
    the session does not hold.
    """
    entry = next((e for e in session.entries() if e.id == entry_id), None)
    if entry is None:
        raise NoEntryError(session.id, entry_id)
    if not isinstance(entry, MessageEntry | CustomMessageEntry | BranchSummaryEntry):
        raise NotPinnableError(
            f"entry {entry_id} of session {session.id} is a {entry.TYPE} entry, which puts no "
            "message in the context: pin a message"
        )
    await session.custom(PIN_KIND, {"entry": entry_id})


def pinned_ids(entries: Sequence[Entry]) -> set[str]:
    """Every entry a pin record names."""
    return {
        str(e.data.get("entry"))
        for e in entries
        if isinstance(e, CustomEntry) and e.kind == PIN_KIND and isinstance(e.data, dict)
    }


# -- the cut


def prepare(session: Session, keep_recent_tokens: int) -> Plan:
    """Choose the cut: the earliest user message whose tail fits ``keep_recent_tokens``.

    The tail always keeps at least the latest user message (the current
    prompt). Raises :class:`NothingToCompactError` when nothing new precedes it.
    """
    path = session.path()
    previous = latest_summary(path)
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
    pins = pinned_ids(session.entries())
    pinned = tuple(e.id for e in path[:cut] if e.id in pins and message_of(e) is not None)
    kept = [m for e in path[cut:] if (m := message_of(e)) is not None]
    kept += [m for e in path[:cut] if e.id in pinned and (m := message_of(e)) is not None]
    return Plan(
        first_kept=path[cut].id,
        previous_summary=previous.summary if previous is not None else "",
        to_summarize=head,
        tokens_before=estimate_tokens(session.context()),
        tokens_kept=estimate_tokens(kept),
        pinned=pinned,
        summarized_entries=sum(1 for e in path[start:cut] if message_of(e) is not None),
    )


def latest_summary(path: Sequence[Entry]) -> CompactionEntry | None:
    """The latest summary compaction on a path (a trim summarizes nothing)."""
    for entry in reversed(path):
        if isinstance(entry, CompactionEntry) and entry.summary:
            return entry
    return None


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


# -- preview, apply, compact


async def preview(
    session: Session,
    summarizer: Summarizer,
    settings: ModelSettings,
    *,
    reason: str = MANUAL,
    instructions: str = "",
) -> Compaction:
    """The next compaction, summary written, nothing stored."""
    plan = prepare(session, settings.keep_recent_tokens)
    text = transcript(plan.previous_summary, plan.to_summarize)
    summary = await summarizer.summarize(text, instructions=instructions)
    return Compaction(
        plan=plan,
        summary=summary.text,
        reason=reason,
        summarizer_usage=summary.usage,
        summarizer_model=summary.model,
        range_hash=hashlib.sha256(text.encode()).hexdigest(),
    )


async def apply(
    session: Session, compaction: Compaction, *, run: Run | None = None
) -> CompactionEntry:
    """Write a computed compaction as the session's next compaction entry."""
    _refuse_while_awaiting(session, run)
    plan = compaction.plan
    entry = CompactionEntry(
        id=new_entry_id(),
        first_kept=plan.first_kept,
        summary=compaction.summary,
        tokens_before=plan.tokens_before,
        reason=compaction.reason,
        summarizer_usage=compaction.summarizer_usage,
        summarizer_model={"model": compaction.summarizer_model}
        if compaction.summarizer_model
        else {},
        pinned=plan.pinned,
        range_hash=compaction.range_hash,
    )
    await session.apply_compaction(entry, run=run)
    return entry


async def compact(
    session: Session,
    summarizer: Summarizer,
    settings: ModelSettings,
    *,
    reason: str = MANUAL,
    run: Run | None = None,
    instructions: str = "",
) -> CompactionEntry:
    """Summarize and record one compaction; the context is compacted when this returns."""
    _refuse_while_awaiting(session, run)
    computed = await preview(
        session, summarizer, settings, reason=reason, instructions=instructions
    )
    return await apply(session, computed, run=run)


def _refuse_while_awaiting(session: Session, run: Run | None) -> None:
    """A call waiting for approval must stay raw at the tail until its decision resolves it."""
    if run is None and session.approvals.awaiting:
        raise CompactionError(
            f"session {session.id} has a tool call waiting for approval; compact once it is decided"
        )


async def summarize_branch(session: Session, target: str, summarizer: Summarizer) -> str:
    """What the line the leaf is on holds past its common ancestor with ``target``, summarized.

    "" when moving to ``target`` abandons nothing (it is on the leaf's line).
    """
    line = session.path()
    kept = {e.id for e in session.path(target)} if target else set()
    abandoned = [m for e in line if e.id not in kept and (m := message_of(e)) is not None]
    if not abandoned:
        return ""
    summary = await summarizer.summarize(transcript("", abandoned), prompt=BRANCH_PROMPT)
    return summary.text


# -- when it runs on its own


def context_estimate(session: Session) -> int:
    """The trigger's measure: the last turn's reported input plus the estimate of what followed.

    Reported tokens are the signal; only what the report cannot cover is
    estimated. Before the first turn since the latest compaction the whole
    context is estimated. A model that reports no usage is compacted when it
    answers with a context overflow.
    """
    tail = session.turn_tail()
    if tail is None:
        return estimate_tokens(session.context())
    return tail.estimate()


def over_threshold(session: Session, settings: ModelSettings) -> bool:
    """Whether the context has crossed the model's window minus its reserve."""
    return context_estimate(session) > settings.context_window - settings.reserve_tokens


def automatic_allowed(session: Session, limits: CompactionConfig) -> bool:
    """Whether an automatic compaction may run now (``max_per_session``, ``min_turns_between``).

    Both count along the leaf's path: an abandoned branch's compactions are
    not this line's. A manual compaction is never held back.
    """
    if not limits.max_per_session and not limits.min_turns_between:
        return True
    automatic = 0
    turns_since: int | None = None
    turns = 0
    for entry in session.path_reversed():
        if isinstance(entry, TurnEntry):
            turns += 1
        elif isinstance(entry, CompactionEntry):
            if turns_since is None:
                turns_since = turns
            if entry.reason != MANUAL:
                automatic += 1
    if limits.max_per_session and automatic >= limits.max_per_session:
        return False
    return not (
        limits.min_turns_between
        and turns_since is not None
        and turns_since < limits.min_turns_between
    )
