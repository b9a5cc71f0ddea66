"""``gateway cron …``: operate scheduled jobs from the terminal.

    set-cron   --id --expr "0 9 * * 1-5" [--tz] --task [--deliver-to CHAT] [--agent] [--paused]
    set-at     --id --at 2035-03-01T09:00 [--tz] --task …   (fires once, then is kept, done)
    set-every  --id --every 15m --task … [--force]           (at least 10 s unless --force)
    (each also: --wake-session KEY --direct-wake  to wake an existing session itself)
    list | show ID | runs ID | explain EXPR     (each with --json)
    pause ID | resume ID | remove ID | run-now ID [--wait S]

Where a job's output goes is part of the job: ``--deliver-to CHAT`` (a chat's
session key: ``cli``, ``telegram:123``, …) sends the turn's answer to that
chat's user; a ``--direct-wake`` job wakes ``--wake-session`` itself, whose
agent reaches its own user with ``dispatch(to=user)``; a job with neither is
silent. ``--wake-session CHAT`` without ``--direct-wake`` means
``--deliver-to CHAT`` (a note says so).

Configuration: every command takes ``--config PATH`` (else ``GATEWAY_CONFIG``,
else ``./gateway.toml``, else the embedded defaults), like the rest of the
``gateway`` command. When a parent app has already loaded the configuration
and put the :class:`GatewayConfig` in ``ctx.obj`` and ``--config`` is not
given, that one is used.

The commands work on the state store directly (``state_store_url()``); no
gateway needs to be running, and a running one applies an edit within one
poll (``[cron] poll_seconds``). ``run-now`` is the exception: firing needs
the gateway's threads, so with a gateway running it leaves a request that
gateway fires (and waits up to ``--wait`` seconds to print the outcome and
its delivery); with none running it fails, saying so, and stores nothing.

Exit codes: 0 done; 1 the call failed (no such job, no gateway, store
unreachable, a configuration that does not load); 2 refused input (the
message names the option and why; nothing is stored).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar
from zoneinfo import ZoneInfo

import typer

from config import ConfigError, GatewayConfig, load_config
from cron.errors import CronError, InvalidJobError
from cron.models import MIN_INTERVAL, JobView, RunRecord, has_offset, local_instant
from cron.service import CronService
from cron.service import explain as explain_expression
from cron.store import open_store
from gateway.cli_kit import (
    EXIT_FAILED,
    EXIT_USAGE,
    App,
    ConfigOption,
    JsonOption,
    console,
    fail,
    fail_config,
    note,
    print_json,
)
from gateway.cron_views import (
    both,
    job_json,
    job_lines,
    jobs_table,
    next_fire_words,
    run_json,
    run_words,
    runs_table,
)
from threads.errors import InvalidKeyError
from threads.keys import SessionKey

T = TypeVar("T")

app = App(
    name="cron", help="Operate scheduled jobs: set, list, pause, run now, read the run ledger."
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
    "deliver_to": "--deliver-to",
}

IdOption = Annotated[str, typer.Option("--id", help="job id: letters, digits, '_' or '-'")]
TaskOption = Annotated[str, typer.Option("--task", help="what the woken session should do")]
TzOption = Annotated[
    str | None,
    typer.Option("--tz", help="IANA time zone, e.g. Europe/Berlin (default: the gateway's)"),
]
AgentOption = Annotated[
    str | None,
    typer.Option("--agent", help="agent of the job's own session (not with --direct-wake)"),
]
DeliverToOption = Annotated[
    str | None,
    typer.Option(
        "--deliver-to",
        help="the chat the output goes to: cli, telegram:123, … (none: a silent job)",
        metavar="CHAT",
    ),
]
WakeSessionOption = Annotated[
    str | None,
    typer.Option(
        "--wake-session",
        help="with --direct-wake: the existing session to wake (alone: as --deliver-to)",
        metavar="KEY",
    ),
]
DirectWakeOption = Annotated[
    bool,
    typer.Option(
        "--direct-wake",
        help="wake --wake-session itself, with its own agent; it tells its user with "
        "dispatch(to=user)",
    ),
]
PausedOption = Annotated[bool, typer.Option("--paused", help="store the job paused")]
JobIdArgument = Annotated[str, typer.Argument(help="the job id")]


# --- setting jobs ----------------------------------------------------------------------


@app.command("set-cron")
def set_cron(
    ctx: typer.Context,
    job_id: IdOption,
    expr: Annotated[
        str, typer.Option("--expr", help="five fields: minute hour day-of-month month weekday")
    ],
    task: TaskOption,
    tz: TzOption = None,
    deliver_to: DeliverToOption = None,
    agent: AgentOption = None,
    wake_session: WakeSessionOption = None,
    direct_wake: DirectWakeOption = False,
    paused: PausedOption = False,
    config: ConfigOption = None,
) -> None:
    """Set (create or replace) a job on a cron expression, e.g. --expr "0 9 * * 1-5"."""
    target = _target(deliver_to, wake_session, direct_wake)
    _set(ctx, config, job_id, {"kind": "cron", "expr": expr}, task, tz, agent, target, paused)


@app.command("set-at")
def set_at(
    ctx: typer.Context,
    job_id: IdOption,
    at: Annotated[
        str,
        typer.Option(
            "--at",
            help="when: 2035-03-01T09:00 read in --tz, or with its offset: …T09:00+01:00, …Z",
        ),
    ],
    task: TaskOption,
    tz: TzOption = None,
    deliver_to: DeliverToOption = None,
    agent: AgentOption = None,
    wake_session: WakeSessionOption = None,
    direct_wake: DirectWakeOption = False,
    paused: PausedOption = False,
    config: ConfigOption = None,
) -> None:
    """Set a job that fires once, then is kept (done) for its ledger."""
    target = _target(deliver_to, wake_session, direct_wake)
    fields = {"kind": "at", "at": _instant(job_id, at, tz)}
    _set(ctx, config, job_id, fields, task, tz, agent, target, paused)


@app.command("set-every")
def set_every(
    ctx: typer.Context,
    job_id: IdOption,
    every: Annotated[str, typer.Option("--every", help="interval: 15m, 1h30m, 90s, 2d, 1w")],
    task: TaskOption,
    tz: TzOption = None,
    deliver_to: DeliverToOption = None,
    agent: AgentOption = None,
    wake_session: WakeSessionOption = None,
    direct_wake: DirectWakeOption = False,
    paused: PausedOption = False,
    force: Annotated[
        bool, typer.Option("--force", help=f"allow an interval under {MIN_INTERVAL.seconds} s")
    ] = False,
    config: ConfigOption = None,
) -> None:
    """Set a job that fires at a fixed interval, counted from now."""
    target = _target(deliver_to, wake_session, direct_wake)
    fields = {"kind": "every", "every": every}
    _set(ctx, config, job_id, fields, task, tz, agent, target, paused, force=force)


# --- reading jobs ----------------------------------------------------------------------


@app.command("list")
def list_jobs(ctx: typer.Context, config: ConfigOption = None, as_json: JsonOption = False) -> None:
    """Every job: schedule, next fire (local and UTC), what it wakes and where output goes."""
    views = _call(ctx, config, lambda svc: svc.list_jobs())
    if as_json:
        print_json({"jobs": [job_json(v) for v in views]})
        return
    out = console()
    if not views:
        out.print("no cron jobs")
        return
    out.print(jobs_table(views, datetime.now(UTC)))


@app.command()
def show(
    ctx: typer.Context,
    job_id: JobIdArgument,
    config: ConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """One job in full, its next fire times and its latest runs."""

    async def go(svc: CronService) -> tuple[JobView, list[datetime], list[RunRecord]]:
        view = await svc.get(job_id)
        fires = await svc.next_fires(job_id, 5) if view.state == "active" else []
        return view, fires, await svc.runs(job_id, 5)

    view, fires, runs = _call(ctx, config, go)
    if as_json:
        print_json(
            {
                "job": job_json(view),
                "next_fires": [t.isoformat().replace("+00:00", "Z") for t in fires],
                "runs": [run_json(r) for r in runs],
            }
        )
        return
    out = console()
    for line in job_lines(view, fires):
        out.print(line, markup=False)
    if runs:
        out.print(runs_table(runs))


@app.command()
def runs(
    ctx: typer.Context,
    job_id: JobIdArgument,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, help="how many records")] = 20,
    config: ConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """The job's run ledger, oldest first: status, lateness, delivery, run id."""
    records = _call(ctx, config, lambda svc: svc.runs(job_id, limit))
    if as_json:
        print_json({"job_id": job_id, "runs": [run_json(r) for r in records]})
        return
    out = console()
    if not records:
        out.print(f"no runs recorded for cron job {job_id}", markup=False)
        return
    out.print(runs_table(records))


@app.command()
def explain(
    ctx: typer.Context,
    expr: Annotated[str, typer.Argument(help="a cron expression, e.g. '30 2 * * *'")],
    tz: TzOption = None,
    count: Annotated[int, typer.Option("--count", "-n", min=1, max=100)] = 5,
    config: ConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """The next fire times of an expression, in its zone and in UTC."""
    settings = _config(ctx, config)
    zone_name = tz or settings.cron.timezone or settings.timezone
    try:
        times = explain_expression(expr, zone_name, count)
    except InvalidJobError as exc:
        _bad_expression(expr, exc)
    if as_json:
        print_json(
            {
                "expr": expr,
                "timezone": zone_name,
                "next_fires": [t.isoformat().replace("+00:00", "Z") for t in times],
            }
        )
        return
    zone = ZoneInfo(zone_name)
    out = console()
    out.print(f"{expr} in {zone_name}: next {len(times)} fire time(s)", markup=False)
    for moment in times:
        out.print(f"  {both(moment, zone)}", markup=False)


# --- operating jobs --------------------------------------------------------------------


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
    typer.echo(f"resumed cron job {job_id}; {next_fire_words(view)}")


@app.command("run-now")
def run_now(
    ctx: typer.Context,
    job_id: JobIdArgument,
    wait: Annotated[
        float,
        typer.Option("--wait", help="seconds to wait for the outcome and its delivery", min=0),
    ] = 10.0,
    config: ConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Ask the running gateway to fire a job now (paused or not); print what became of it."""
    run = _call(
        ctx, config, lambda svc: svc.run_now(job_id, wait_seconds=wait, until_delivered=True)
    )
    if as_json:
        print_json({"job_id": job_id, "run": run_json(run) if run else None})
    elif run is None:
        typer.echo(
            f"asked the running gateway to fire cron job {job_id}; "
            f"`gateway cron runs {job_id}` shows the outcome"
        )
    else:
        typer.echo(f"cron job {job_id}: {run_words(run)}")
    if run is not None and (run.status == "failed" or run.delivery.startswith("failed")):
        raise typer.Exit(EXIT_FAILED)


# --- plumbing --------------------------------------------------------------------------


def _target(deliver_to: str | None, wake_session: str | None, direct_wake: bool) -> dict[str, Any]:
    """The job fields that say what it wakes and where its output goes."""
    if wake_session and not direct_wake and not deliver_to and _is_chat(wake_session):
        note(
            f"--wake-session {wake_session} without --direct-wake delivers the job's output to "
            f"that chat, as --deliver-to {wake_session} does (--direct-wake wakes it instead)"
        )
        return {"deliver_to": wake_session, "wake_session": None, "direct_wake": False}
    return {"deliver_to": deliver_to, "wake_session": wake_session, "direct_wake": direct_wake}


def _is_chat(key: str) -> bool:
    try:
        return SessionKey(key).is_user_facing
    except InvalidKeyError:
        return False


def _instant(job_id: str, at: str, tz: str | None) -> str | datetime:
    """``--at`` as the job takes it: a local time is read in ``--tz``; else as written."""
    if has_offset(at):
        return at
    if tz is None:
        _refused(
            InvalidJobError.one(
                "at",
                f"{at!r} has no UTC offset: add one (Z, +01:00), or give --tz ZONE to read it "
                "as the time there",
                job_id,
            )
        )
    try:
        return local_instant(at, tz)
    except ValueError as exc:
        field = "timezone" if "IANA" in str(exc) else "at"
        _refused(InvalidJobError.one(field, str(exc), job_id))


def _set(
    ctx: typer.Context,
    config: Path | None,
    job_id: str,
    fields: dict[str, Any],
    task: str,
    tz: str | None,
    agent: str | None,
    target: dict[str, Any],
    paused: bool,
    *,
    force: bool = False,
) -> None:
    settings = _config(ctx, config)

    async def go(svc: CronService) -> JobView:
        job = svc.draft(
            id=job_id,
            task=task,
            timezone=tz or svc.timezone,
            agent=agent,
            enabled=not paused,
            **target,
            **fields,
        )
        return await svc.upsert(job, min_interval=None if force else MIN_INTERVAL)

    view = _call(ctx, settings, go)
    typer.echo(
        f"set cron job {view.job.id}: {view.job.schedule_text} → {view.job.target_text}; "
        f"{next_fire_words(view)}"
    )


def _config(ctx: typer.Context, path: Path | GatewayConfig | None) -> GatewayConfig:
    if isinstance(path, GatewayConfig):
        return path
    if path is None and isinstance(ctx.obj, GatewayConfig):
        return ctx.obj
    try:
        return load_config(path)
    except ConfigError as exc:
        fail_config(exc)


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
        fail(str(exc))


def _refused(exc: InvalidJobError) -> NoReturn:
    what = f"cron job {exc.job_id!r}" if exc.job_id else "cron job"
    typer.echo(f"error: {what} refused; nothing was stored:", err=True)
    for problem in exc.problems:
        option = OPTION_OF_FIELD.get(problem.field)
        name = f"{option} ({problem.field})" if option else problem.field
        typer.echo(f"  {name}: {problem.message}", err=True)
    raise typer.Exit(EXIT_USAGE)


def _bad_expression(expr: str, exc: InvalidJobError) -> NoReturn:
    """``explain`` refuses an expression or a zone: say which, and what is wrong with it."""
    problem = exc.problems[0]
    if problem.field == "timezone":
        fail(f"--tz (timezone): {problem.message}", code=EXIT_USAGE)
    message = problem.message.removeprefix(f"{expr!r}: ")
    if "never fires" in message:
        fail(message, code=EXIT_USAGE)
    fail(f"{expr!r} is not a cron expression: {message}", code=EXIT_USAGE)


if __name__ == "__main__":
    app()
