"""Edits of one session from outside its turns: pin, compact (or preview it), uncompact, branch.

Operators make them with ``gateway sessions pin|compact|uncompact|branch``.
With a gateway running, the edit goes through its control socket (op
``session_edit``) and is made on the live session; with none, the CLI opens
the store and makes it there. Both run :func:`edit`. Every edit is a
between-turns write: a session running a turn refuses it (retry once the
answer has arrived). Each returns a JSON object saying what it did.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from config.models import GatewayConfig
from threads.agent.compaction import compact, pin, prepare, summarize_branch
from threads.agent.loop import session_model, summarizer_for
from threads.agent.models import Models
from threads.errors import BusyError
from threads.session import Session
from threads.store.entries import CompactionEntry

ACTIONS = ("pin", "compact", "uncompact", "branch")


@dataclass(frozen=True, slots=True, kw_only=True)
class Editor:
    """What an edit needs beyond the session: the configuration, and models for summaries."""

    config: GatewayConfig
    models: Models

    async def edit(self, session: Session, action: str, args: dict[str, Any]) -> dict[str, Any]:
        """Make one edit; raises ``ValueError`` for an unknown action, ``BusyError`` mid-turn."""
        if action not in ACTIONS:
            raise ValueError(f"unknown session edit {action!r}; one of {', '.join(ACTIONS)}")
        if session.busy:
            raise BusyError(session.id, action)
        if action == "pin":
            pinned = str(args["entry"])
            await pin(session, pinned)
            return {"pinned": pinned}
        if action == "uncompact":
            latest = session.latest_compaction()
            await session.uncompact()
            return {"undone": latest.id if latest is not None else ""}
        ref = session_model(self.config, session)
        if action == "branch":
            return await self._branch(session, ref, args)
        _client, _model, settings = self.models.resolve(ref)
        if args.get("preview"):
            plan = prepare(session, settings.keep_recent_tokens)
            cap = settings.max_output_tokens
            return {
                "preview": True,
                "first_kept": plan.first_kept,
                "summarized_messages": plan.summarized_entries,
                "pinned": list(plan.pinned),
                "tokens_before": plan.tokens_before,
                "tokens_kept": plan.tokens_kept,
                "summary_cap": cap,
                "saves_at_least": max(plan.tokens_before - plan.tokens_kept - cap, 0),
            }
        entry: CompactionEntry = await compact(
            session,
            summarizer_for(self.config, self.models, ref),
            settings,
            instructions=str(args.get("focus", "")),
        )
        return {
            "compacted": entry.id,
            "first_kept": entry.first_kept,
            "tokens_before": entry.tokens_before,
            "summary_model": entry.summarizer_model.get("model", ""),
            "pinned": list(entry.pinned),
        }

    async def _branch(self, session: Session, ref: str, args: dict[str, Any]) -> dict[str, Any]:
        target = str(args.get("entry", ""))
        summary = str(args.get("summary", ""))
        if args.get("summarize") and not summary:
            summarizer = summarizer_for(self.config, self.models, ref)
            summary = await summarize_branch(session, target, summarizer)
        await session.branch(target, summary=summary)
        return {"leaf": target, "summary": summary}
