"""``gateway cron …``: operate scheduled jobs from the terminal.

    set-cron   --id --expr [--tz] --task [--agent] [--wake-session] [--direct-wake] [--paused]
    set-at     --id --at RFC3339 --task ...          (fires once, then is disabled and kept)
    set-every  --id --every 15m --task ...
    list | show ID | remove ID | pause ID | resume ID | run-now ID | runs ID | explain EXPR [--tz]

Configuration: every command takes ``--config PATH`` (else ``GATEWAY_CONFIG``,
else ``./gateway.toml``, else the embedded defaults), like the rest of the
``gateway`` command. When a parent app has already loaded the configuration
and put the :class:`GatewayConfig` in ``ctx.obj`` and ``--config`` is not
given, that one is used.

The commands work on the state store directly (``state_store_url()``); no
gateway needs to be running, and a running one applies an edit within one
second. ``run-now`` is the exception: firing needs the gateway's threads, so
with a gateway running it leaves a request that gateway fires (and waits up
to ``--wait`` seconds to print the outcome); with none running it fails,
saying so, and stores nothing.

Exit codes: 0 done; 1 the call failed (no such job, no gateway, store
unreachable); 2 refused input (the message names the option and why;
nothing is stored).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar
from zoneinfo import ZoneInfo

import typer
from rich.console import Console
from rich.table import Table

from config import ConfigError, GatewayConfig, load_config
from config.redaction import redact_text
from cron.errors import CronError, InvalidJobError
from cron.models import JobView, RunRecord
from cron.service import CronService
from cron.service import explain as explain_expression
from cron.store import open_store

T = TypeVar("T")

app = typer.Typer(
    name="cron",
    help="Operate scheduled jobs: set, list, pause, run now, read the run ledger.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

OPTION_OF_FIELD = {
    "id": "--id",
    "expr": "--expr",
    "at": "--at",
    "every": "--every",
    "timezone": "--tz",
    "task": "--task",
    "agent": "--agent",
    "wake_session": "--wake-session",
    "direct_wake": "--direct-wake",
}

ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config", "-c", help="gateway.toml to load (default: $GATEWAY_CONFIG, ./gateway.toml)"
    ),
]
IdOption = Annotated[str, typer.Option("--id", help="job id: letters, digits, '_' or '-'")]
TaskOption = Annotated[str, typer.Option("--task", help="what the woken session should do")]
TzOption = Annotated[
    str | None, typer.Option("--tz", help="IANA time zone (default: the gateway's)")
]
AgentOption = Annotated[
    str | None,
    typer.Option("--agent", help="agent of the job's own session (not with direct wake)"),
]
WakeSessionOption = Annotated[
    str | None,
    typer.Option(
        "--wake-session",
        help="with --direct-wake: the existing session to wake; without: where the reply goes",
    ),
]
DirectWakeOption = Annotated[
    bool,
    typer.Option(
        "--direct-wake", help="wake --wake-session itself (keeps its agent; output to cron dropped)"
    ),
]
PausedOption = Annotated[bool, typer.Option("--paused", help="store the job paused")]
JobIdArgument = Annotated[str, typer.Argument(help="the job id")]


# --- commands --------------------------------------------------------------------------


@app.command("set-cron")
def set_cron(
    ctx: typer.Context,
    job_id: IdOption,
    expr: Annotated[str, typer.Option("--expr", help="five fields: min hour day month weekday")],
    task: TaskOption,
    tz: TzOption = None,
    agent: AgentOption = None,
    wake_session: WakeSessionOption = None,
    direct_wake: DirectWakeOption = False,
    paused: PausedOption = False,
    config: ConfigOption = None,
) -> None:
    """Set (create or replace) a job on a cron expression."""
    fields = {"kind": "cron", "expr": expr}
    _set(ctx, config, job_id, fields, task, tz, agent, wake_session, direct_wake, paused)


@app.command("set-at")
def set_at(
    ctx: typer.Context,
    job_id: IdOption,
    at: Annotated[str, typer.Option("--at", help="RFC 3339 time with offset, e.g. ...T09:00Z")],
    task: TaskOption,
    tz: TzOption = None,
    agent: AgentOption = None,
    wake_session: WakeSessionOption = None,
    direct_wake: DirectWakeOption = False,
    paused: PausedOption = False,
    config: ConfigOption = None,
) -> None:
    """Set a job that fires once at a time, then is disabled and kept for its ledger."""
    fields = {"kind": "at", "at": at}
    _set(ctx, config, job_id, fields, task, tz, agent, wake_session, direct_wake, paused)


@app.command("set-every")
def set_every(
    ctx: typer.Context,
    job_id: IdOption,
    every: Annotated[str, typer.Option("--every", help="interval: 15m, 1h30m, 90s, 2d, 1w")],
    task: TaskOption,
    tz: TzOption = None,
    agent: AgentOption = None,
    wake_session: WakeSessionOption = None,
    direct_wake: DirectWakeOption = False,
    paused: PausedOption = False,
    config: ConfigOption = None,
) -> None:
    """Set a job that fires at a fixed interval, counted from now."""
    fields = {"kind": "every", "every": every}
    _set(ctx, config, job_id, fields, task, tz, agent, wake_session, direct_wake, paused)


@app.command("list")
def list_jobs(ctx: typer.Context, config: ConfigOption = None) -> None:
    """Every job: schedule, next fire (local and UTC), target, enabled, last status."""
    views = _call(ctx, config, lambda svc: svc.list_jobs())
    out = Console(width=_WIDTH)
    if not views:
        out.print("no cron jobs")
        return
    table = Table(title="cron jobs")
    for column in ("id", "kind", "schedule", "next fire (local)", "next fire (UTC)", "target"):
        table.add_column(column, overflow="fold")
    table.add_column("enabled")
    table.add_column("last status")
    now = datetime.now(UTC)
    for view in views:
        local, in_utc = _next_fire_cells(view, now)
        table.add_row(
            view.job.id,
            view.job.kind,
            view.job.schedule_text,
            local,
            in_utc,
            view.job.target_text,
            _enabled_words(view),
            view.last_status or "-",
        )
    out.print(table)


@app.command()
def show(ctx: typer.Context, job_id: JobIdArgument, config: ConfigOption = None) -> None:
    """One job in full, its next fire times and its latest runs."""

    async def go(svc: CronService) -> tuple[JobView, list[datetime], list[RunRecord]]:
        return await svc.get(job_id), await svc.next_fires(job_id, 5), await svc.runs(job_id, 5)

    view, fires, runs = _call(ctx, config, go)
    job = view.job
    out = Console(width=_WIDTH)
    zone = ZoneInfo(job.timezone)
    out.print(f"[bold]{job.id}[/bold]  {job.kind}  {job.schedule_text}")
    lines = [
        ("task", job.task),
        ("target", job.target_text),
        ("timezone", job.timezone),
        ("enabled", _enabled_words(view)),
        ("created", _both(job.created, zone)),
        ("updated", _both(job.updated, zone)),
        ("last status", view.last_status or "-"),
    ]
    for name, value in lines:
        out.print(f"  {name:<12} {value}", highlight=False)
    out.print("  next fires" if fires else "  next fires   none")
    for moment in fires:
        out.print(f"    {_both(moment, zone)}", highlight=False)
    if runs:
        out.print(_runs_table(runs))


@app.command()
def remove(ctx: typer.Context, job_id: JobIdArgument, config: ConfigOption = None) -> None:
    """Delete a job (its run ledger is kept)."""
    _call(ctx, config, lambda svc: svc.remove(job_id))
    typer.echo(f"removed cron job {job_id}")


@app.command()
def pause(ctx: typer.Context, job_id: JobIdArgument, config: ConfigOption = None) -> None:
    """Keep a job but fire nothing; its due times are recorded as skipped."""
    _call(ctx, config, lambda svc: svc.pause(job_id))
    typer.echo(f"paused cron job {job_id}")


@app.command()
def resume(ctx: typer.Context, job_id: JobIdArgument, config: ConfigOption = None) -> None:
    """Fire a paused job again from its next due time."""
    view = _call(ctx, config, lambda svc: svc.resume(job_id))
    typer.echo(f"resumed cron job {job_id}; {_next_fire_words(view)}")


@app.command("run-now")
def run_now(
    ctx: typer.Context,
    job_id: JobIdArgument,
    wait: Annotated[
        float, typer.Option("--wait", help="seconds to wait for the running gateway's outcome")
    ] = 5.0,
    config: ConfigOption = None,
) -> None:
    """Ask the running gateway to fire a job now (paused or not)."""
    run = _call(ctx, config, lambda svc: svc.run_now(job_id, wait_seconds=wait))
    if run is None:
        typer.echo(
            f"asked the running gateway to fire cron job {job_id}; "
            f"`gateway cron runs {job_id}` shows the outcome"
        )
        return
    typer.echo(f"cron job {job_id}: {_run_words(run)}")
    if run.status == "failed":
        raise typer.Exit(1)


@app.command()
def runs(
    ctx: typer.Context,
    job_id: JobIdArgument,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, help="how many records")] = 20,
    config: ConfigOption = None,
) -> None:
    """The job's run ledger, oldest first: scheduled, fired, lateness, status, run id."""
    records = _call(ctx, config, lambda svc: svc.runs(job_id, limit))
    out = Console(width=_WIDTH)
    if not records:
        out.print(f"no runs recorded for cron job {job_id}")
        return
    out.print(_runs_table(records))


@app.command()
def explain(
    ctx: typer.Context,
    expr: Annotated[str, typer.Argument(help="a cron expression, e.g. '30 2 * * *'")],
    tz: TzOption = None,
    count: Annotated[int, typer.Option("--count", "-n", min=1, max=100)] = 5,
    config: ConfigOption = None,
) -> None:
    """Print the next fire times of an expression, in its zone and in UTC."""
    settings = _config(ctx, config)
    zone_name = tz or settings.cron.timezone or settings.timezone
    try:
        times = explain_expression(expr, zone_name, count)
    except InvalidJobError as exc:
        _refused(exc)
    zone = ZoneInfo(zone_name)
    out = Console(width=_WIDTH)
    out.print(f"{expr} in {zone_name}: next {len(times)} fire time(s)", highlight=False)
    for moment in times:
        out.print(f"  {_both(moment, zone)}", highlight=False)


# --- plumbing --------------------------------------------------------------------------

_WIDTH = 160


def _set(
    ctx: typer.Context,
    config: Path | None,
    job_id: str,
    fields: dict[str, Any],
    task: str,
    tz: str | None,
    agent: str | None,
    wake_session: str | None,
    direct_wake: bool,
    paused: bool,
) -> None:
    settings = _config(ctx, config)

    async def go(svc: CronService) -> JobView:
        job = svc.draft(
            id=job_id,
            task=task,
            timezone=tz or svc.timezone,
            agent=agent,
            wake_session=wake_session,
            direct_wake=direct_wake,
            enabled=not paused,
            **fields,
        )
        return await svc.upsert(job)

    view = _call(ctx, settings, go)
    typer.echo(
        f"set cron job {view.job.id}: {view.job.schedule_text} → {view.job.target_text}; "
        f"{_next_fire_words(view)}"
    )


def _config(ctx: typer.Context, path: Path | GatewayConfig | None) -> GatewayConfig:
    if isinstance(path, GatewayConfig):
        return path
    if path is None and isinstance(ctx.obj, GatewayConfig):
        return ctx.obj
    try:
        return load_config(path)
    except ConfigError as exc:
        typer.echo(redact_text(str(exc)), err=True)
        raise typer.Exit(2) from None


def _call(
    ctx: typer.Context,
    config: Path | GatewayConfig | None,
    action: Callable[[CronService], Awaitable[T]],
) -> T:
    settings = _config(ctx, config)

    async def go() -> T:
        async with open_store(settings.state_store_url()) as store:
            return await action(CronService.from_config(settings, store))

    try:
        return asyncio.run(go())
    except InvalidJobError as exc:
        _refused(exc)
    except CronError as exc:
        typer.echo(f"error: {redact_text(str(exc))}", err=True)
        raise typer.Exit(1) from None


def _refused(exc: InvalidJobError) -> NoReturn:
    what = f"cron job {exc.job_id!r}" if exc.job_id else "cron job"
    typer.echo(f"error: {what} refused; nothing was stored:", err=True)
    for problem in exc.problems:
        option = OPTION_OF_FIELD.get(problem.field)
        name = f"{option} ({problem.field})" if option else problem.field
        typer.echo(f"  {name}: {problem.message}", err=True)
    raise typer.Exit(2)


def _both(moment: datetime, zone: ZoneInfo) -> str:
    local = moment.astimezone(zone).strftime("%Y-%m-%d %H:%M:%S %Z")
    return f"{local}  ({_utc(moment)})"


def _utc(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _next_fire_cells(view: JobView, now: datetime) -> tuple[str, str]:
    if view.next_fire is None:
        return ("-", "-") if view.job.kind != "at" else ("done", "-")
    local = view.next_fire_local()
    overdue = " (overdue)" if view.next_fire < now else ""
    return (
        local.strftime("%Y-%m-%d %H:%M:%S %Z") + overdue if local else "-",
        _utc(view.next_fire),
    )


def _enabled_words(view: JobView) -> str:
    if view.job.enabled:
        return "yes"
    if view.job.kind == "at" and view.next_fire is None:
        return "no (done)"
    return "no (paused)"


def _next_fire_words(view: JobView) -> str:
    if view.next_fire is None:
        return "no fire pending"
    zone = ZoneInfo(view.job.timezone)
    return f"next fire {_both(view.next_fire, zone)}"


def _run_words(run: RunRecord) -> str:
    words = f"{run.status} (scheduled {_utc(run.scheduled)}, {run.lateness_ms:g} ms late)"
    if run.run_id:
        words += f", run {run.run_id}"
    if run.error:
        words += f": {run.error}"
    return words


def _runs_table(records: list[RunRecord]) -> Table:
    table = Table(title=f"runs of {records[0].job_id}")
    for column in ("#", "status", "via", "scheduled (UTC)", "fired (UTC)", "late ms", "run id"):
        table.add_column(column, overflow="fold")
    table.add_column("error / note", overflow="fold")
    for run in records:
        more = f" (+{run.coalesced} coalesced)" if run.coalesced else ""
        table.add_row(
            str(run.seq),
            run.status + more,
            run.via,
            _utc(run.scheduled),
            _utc(run.fired) if run.fired else "-",
            f"{run.lateness_ms:.1f}",
            run.run_id or "-",
            run.error or run.note or "",
        )
    return table


if __name__ == "__main__":
    app()
