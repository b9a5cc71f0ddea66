"""The compaction section: what every session's compaction may do beyond its model's limits.

Each model's window, reserve and kept tail are per model (``[models.settings]``);
this section holds what is the same for every session: the models that write
summaries, what a summary must contain, standing instructions, the limits on
automatic compaction, and the cheap pre-pass that trims old tool results.
"""

from __future__ import annotations

from pydantic import Field

from config.section import ModelRef, Section


class CompactionConfig(Section):
    """How sessions are compacted."""

    # Models that write summaries, tried in order before the session's own model;
    # a failed, cut-off or rejected summary falls through to the next.
    summary_models: list[ModelRef] = Field(default_factory=list)
    # Standing instructions appended to every summary prompt ("keep every file path").
    focus: str = ""
    # A summary must hold each of these headings ("## Goal") and be this long, or it
    # is rejected: retried once on the same model, then the next one is asked.
    required_headings: list[str] = Field(default_factory=list)
    min_summary_chars: int = Field(default=0, ge=0, le=100_000)
    # Automatic compactions (not /compact) a conversation may have; 0: no cap.
    max_per_session: int = Field(default=0, ge=0, le=10_000)
    # Turns that must pass after a compaction before an automatic one; 0: none.
    min_turns_between: int = Field(default=0, ge=0, le=10_000)
    # The cheap pre-pass: when the context nears the window, stub every tool result
    # but the newest N; when that is enough, no summary is made. Unset: off.
    keep_tool_results: int | None = Field(default=None, ge=0, le=10_000)
