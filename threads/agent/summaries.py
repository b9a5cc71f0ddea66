"""Summaries: the chain of models that write them, and the check a summary must pass.

A summary is asked of ``compaction.summary_models`` in order, then of the
session's own model. Each answer is checked: one cut off at the output cap,
one that is empty, or one :class:`SummaryCheck` rejects (a missing heading,
too short) is retried once on the same model, then the next model is asked.
With none left the compaction fails, every reason named. What a summary cost
and which model wrote it go on the compaction entry (the ``summaries`` bucket
of the session's usage).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from config.compaction import CompactionConfig
from config.models import ModelSettings
from threads.errors import ThreadsError
from threads.llm.base import ModelClient, ModelRequest
from threads.llm.errors import ModelError
from threads.messages import Message, Usage

log = logging.getLogger(__name__)

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

BRANCH_PROMPT = """The conversation above is a line of work the assistant is leaving behind to try another way.
Summarize in a few sentences what was tried on it and what was learned, so the new line can use it: results, dead ends and why, facts found. No headings."""


class CompactionError(ThreadsError):
    """A compaction that could not be made."""


class SummaryTruncatedError(CompactionError):
    """The summarizer hit its output cap; a cut-off summary is never stored."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Summary:
    """A summary's text, what it cost, and the model that wrote it."""

    text: str
    usage: Usage = field(default_factory=Usage)
    model: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class SummaryCheck:
    """What a summary must hold to be kept: these headings, at least this many characters."""

    required_headings: Sequence[str] = ()
    min_chars: int = 0

    @classmethod
    def of(cls, config: CompactionConfig) -> SummaryCheck:
        return cls(required_headings=config.required_headings, min_chars=config.min_summary_chars)

    def problem(self, text: str) -> str:
        """Why ``text`` is not kept, or ""."""
        missing = [h for h in self.required_headings if f"# {h}" not in text]
        if missing:
            return f"it has no {', '.join(repr(h) for h in missing)} heading"
        if len(text) < self.min_chars:
            return f"it is {len(text)} characters, under the {self.min_chars} asked for"
        return ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Writer:
    """One model of the chain: its client, its name as sent, and its output cap."""

    client: ModelClient
    model: str
    settings: ModelSettings


class Summarizer:
    """Writes summaries down a chain of models, checking each (see the module)."""

    def __init__(
        self, writers: Sequence[Writer], *, check: SummaryCheck | None = None, focus: str = ""
    ) -> None:
        if not writers:
            raise ValueError("a summarizer needs at least one model")
        self.writers = list(writers)
        self.check = check or SummaryCheck()
        self.focus = focus

    async def summarize(
        self, text: str, *, instructions: str = "", prompt: str = SUMMARY_PROMPT
    ) -> Summary:
        """A checked summary of ``text``; :class:`CompactionError` naming why none was."""
        ask = prompt
        for extra in (self.focus, instructions):
            if extra.strip():
                ask += f"\n\nAlso: {extra.strip()}"
        failures: list[str] = []
        for writer in self.writers:
            for attempt in (1, 2):
                try:
                    summary = await self._ask(writer, text, ask)
                except SummaryTruncatedError as exc:
                    failures.append(f"{writer.model} (attempt {attempt}): {exc}")
                    continue
                except ModelError as exc:
                    failures.append(f"{writer.model}: {exc}")
                    break  # a model that fails does not get a second try
                problem = self.check.problem(summary.text) if summary.text else "it is empty"
                if not problem:
                    return summary
                failures.append(
                    f"{writer.model} (attempt {attempt}): the summary was rejected: {problem}"
                )
            log.info("summary model %s gave no usable summary; trying the next", writer.model)
        raise _failure(failures)

    async def _ask(self, writer: Writer, text: str, prompt: str) -> Summary:
        request = ModelRequest(
            model=writer.model,
            system=SUMMARY_SYSTEM,
            messages=[Message.user(f"<conversation>\n{text}\n</conversation>\n\n{prompt}")],
            max_output_tokens=writer.settings.max_output_tokens,
        )
        response = await writer.client.complete(request)
        if response.stop_reason == "max_tokens":
            raise SummaryTruncatedError(
                f"the summary hit the output cap of {writer.settings.max_output_tokens} tokens "
                "and was not stored; raise max_output_tokens for this model"
            )
        return Summary(
            text=response.message.text().strip(), usage=response.usage, model=writer.model
        )


def _failure(failures: list[str]) -> CompactionError:
    if len(failures) == 1 and "output cap" in failures[0]:
        return SummaryTruncatedError(failures[0])
    truncated = all("output cap" in f for f in failures)
    kind = SummaryTruncatedError if truncated else CompactionError
    return kind("no summary could be made: " + "; ".join(failures))
