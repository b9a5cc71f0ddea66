"""How ``gateway cron`` shows jobs and runs: tables that fit the terminal, words, JSON.

The JSON shapes are stable and documented (docs/operators.md, "JSON output"):
a job is :func:`job_json`, a run is :func:`run_json`; every command prints
one object around them (``{"jobs": […]}``, ``{"job": …, "next_fires": […],
"runs": […]}``, ``{"job_id": …, "runs": […]}``).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from rich.table import Table

from cron.models import Job, JobView, RunRecord
from gateway.cli_kit import lateness_text


def job_json(view: JobView) -> dict[str, Any]:
    """One job: its definition, where its output goes, its state and its next fire."""
    job = view.job
    upcoming = view.upcoming
    return {
        "id": job.id,
        "kind": job.kind,
        "schedule": job.schedule_text,
        "expr": job.expr,
        "at": _iso(job.at),
        "every": job.every,
        "timezone": job.timezone,
        "task": job.task,
        "session": str(job.session_key),
        "direct_wake": job.direct_wake,
        "wake_session": job.wake_session,
        "deliver_to": job.deliver_to,
        "output": job.output_text,
        "agent": job.agent,
        "state": view.state,
        "enabled": job.enabled,
        "next_fire": _iso(upcoming),
        "last_status": view.last_status,
        "last_fired": _iso(view.last_fired),
        "created": _iso(job.created),
        "updated": _iso(job.updated),
    }


def run_json(run: RunRecord) -> dict[str, Any]:
    """One ledger record, every field (times in RFC 3339, UTC)."""
    return run.model_dump(mode="json")


def _iso(moment: datetime | None) -> str | None:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z") if moment else None


# --- text --------------------------------------------------------------------------------


def local(moment: datetime, zone: ZoneInfo) -> str:
    return moment.astimezone(zone).strftime("%Y-%m-%d %H:%M:%S %Z")


def utc(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def both(moment: datetime, zone: ZoneInfo) -> str:
    """``2026-12-02 09:00:00 CET  (2026-12-02 08:00:00Z)``; in UTC, once: ``… 08:00:00Z``."""
    if moment.astimezone(zone).utcoffset() == timedelta(0) and zone.key in ("UTC", "Etc/UTC"):
        return utc(moment)
    return f"{local(moment, zone)}  ({utc(moment)})"


def next_fire_cell(view: JobView, now: datetime) -> str:
    """The list's next-fire cell: local time over UTC, or why there is none."""
    if view.state == "done":
        return "done (fired once)"
    if view.state == "paused":
        return "paused"
    if view.next_fire is None:
        return "-"
    overdue = " (overdue)" if view.next_fire < now else ""
    zone = ZoneInfo(view.job.timezone)
    if both(view.next_fire, zone) == utc(view.next_fire):
        return f"{utc(view.next_fire)}{overdue}"
    return f"{local(view.next_fire, zone)}{overdue}\n{utc(view.next_fire)}"


def next_fire_words(view: JobView) -> str:
    if view.state == "paused":
        return "paused: nothing fires until `gateway cron resume`"
    if view.upcoming is None:
        return "no fire pending"
    return f"next fire {both(view.upcoming, ZoneInfo(view.job.timezone))}"


def jobs_table(views: list[JobView], now: datetime) -> Table:
    table = Table(title=f"cron jobs ({len(views)})")
    table.add_column("id", overflow="fold", ratio=2)
    table.add_column("schedule", overflow="fold", ratio=3)
    table.add_column("next fire (local / UTC)", overflow="fold", min_width=12, ratio=4)
    table.add_column("wakes → output", overflow="fold", ratio=4)
    table.add_column("state", overflow="fold", ratio=2)
    for view in views:
        last = f"\nlast: {view.last_status}" if view.last_status else ""
        table.add_row(
            view.job.id,
            view.job.schedule_text,
            next_fire_cell(view, now),
            view.job.target_text,
            f"{state_words(view)}{last}",
        )
    return table


def state_words(view: JobView) -> str:
    return {"active": "yes", "paused": "no (paused)", "done": "no (done)"}[view.state]


def job_lines(view: JobView, fires: list[datetime]) -> list[str]:
    job = view.job
    zone = ZoneInfo(job.timezone)
    lines = [
        f"{job.id}: {job.schedule_text}",
        f"  task         {job.task}",
        f"  wakes        {_wakes(job)}",
        f"  output       {job.output_text}",
        f"  timezone     {job.timezone}",
        f"  enabled      {state_words(view)}",
        f"  created      {both(job.created, zone)}",
        f"  updated      {both(job.updated, zone)}",
        f"  last status  {view.last_status or '-'}",
    ]
    if view.state == "paused":
        lines.append("  next fires   none while paused (`gateway cron resume` fires again)")
    elif not fires:
        lines.append("  next fires   none")
    else:
        lines.append("  next fires")
        lines += [f"    {both(moment, zone)}" for moment in fires]
    return lines


def _wakes(job: Job) -> str:
    if job.direct_wake:
        return f"{job.session_key} (direct wake: that session, with its own agent)"
    agent = job.agent or "the default agent"
    return f"{job.session_key} (its own session, {agent})"


def runs_table(records: list[RunRecord]) -> Table:
    table = Table(title=f"runs of {records[0].job_id}")
    table.add_column("#", overflow="fold", justify="right")
    table.add_column("status", overflow="fold", ratio=2)
    table.add_column("scheduled (UTC)", overflow="fold", ratio=3)
    table.add_column("late", overflow="fold", ratio=2)
    table.add_column("delivery", overflow="fold", ratio=3)
    table.add_column("run id · error · note", overflow="fold", ratio=4)
    for run in records:
        more = f" (+{run.coalesced} coalesced)" if run.coalesced else ""
        via = " (run-now)" if run.via == "run-now" else ""
        detail = " · ".join(x for x in (run.run_id or "", run.error, run.note) if x) or "-"
        table.add_row(
            str(run.seq),
            run.status + more + via,
            utc(run.scheduled),
            lateness_text(run.lateness_ms) if run.status in ("fired", "failed") else "-",
            run.delivery or "-",
            detail,
        )
    return table


def run_words(run: RunRecord) -> str:
    words = f"{run.status} (scheduled {utc(run.scheduled)}, {lateness_text(run.lateness_ms)})"
    if run.run_id:
        words += f", run {run.run_id}"
    if run.error:
        words += f": {run.error}"
    if run.delivery:
        words += f"; delivery: {run.delivery}"
    return words
