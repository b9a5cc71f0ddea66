"""``gateway cron …``: the operator's commands, in-process and as separate processes."""

from __future__ import annotations

import asyncio
import re
import sys
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner, Result

from cron.service import CronService
from cron.store import connect_store
from gateway.cron_cli import app
from tests.clock import ManualClock
from tests.cron.conftest import DEADLINE, FakeWaker, eventually, redis_space

ROOT = Path(__file__).resolve().parents[2]
Cli = Callable[..., Result]


def write_config(tmp_path: Path, state_url: str = "") -> Path:
    path = tmp_path / "gateway.toml"
    lines = ['timezone = "Europe/Berlin"', f'data_dir = "{tmp_path / "data"}"']
    if state_url:
        lines += ["[store]", f'state_url = "{state_url}"']
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return write_config(tmp_path)


@pytest.fixture
def cli(config: Path) -> Cli:
    """The cron commands, on a wide terminal (the 80-column layout has tests of its own)."""
    runner = CliRunner()

    def invoke(*args: str) -> Result:
        return runner.invoke(app, [*args, "--config", str(config)], env={"COLUMNS": "200"})

    return invoke


@pytest.fixture
def narrow(config: Path) -> Cli:
    """The cron commands writing to a pipe: 80 columns."""
    runner = CliRunner()

    def invoke(*args: str) -> Result:
        return runner.invoke(app, [*args, "--config", str(config)], env={"COLUMNS": ""})

    return invoke


def later(hours: float = 2) -> str:
    return (datetime.now(UTC) + timedelta(hours=hours)).isoformat().replace("+00:00", "Z")


def test_set_cron_then_list_shows_next_fire_in_local_time_and_utc(cli: Cli) -> None:
    result = cli("set-cron", "--id", "digest", "--expr", "30 2 * * *", "--task", "digest")
    assert result.exit_code == 0, result.output
    listing = cli("list")
    out = listing.output
    assert listing.exit_code == 0
    assert "digest" in out
    assert "30 2 * * * (Europe/Berlin)" in out
    assert re.search(r"02:30:00 CES?T", out)  # local
    assert re.search(r"0[01]:30:00Z", out)  # UTC
    assert "cron:digest" in out
    assert "yes" in out


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["set-cron", "--expr", "61 * * * *"], "--expr (expr)"),
        (["set-cron", "--expr", "0 9 * * *", "--tz", "Mars/Base"], "--tz (timezone)"),
        (["set-every", "--every", "15 minutes"], "--every (every)"),
        (["set-at", "--at", "2030-01-01T09:00:00"], "--at (at)"),
        (["set-at", "--at", "2020-01-01T09:00:00Z"], "--at (at)"),
        (["set-at", "--at", "next tuesday"], "--at (at)"),
        (["set-cron", "--expr", "0 9 * * *", "--direct-wake"], "--wake-session (wake_session)"),
        (
            [
                "set-cron",
                "--expr",
                "0 9 * * *",
                "--direct-wake",
                "--wake-session",
                "cli",
                "--agent",
                "default",
            ],
            "--agent (agent)",
        ),
        (["set-cron", "--expr", "0 9 * * *", "--agent", "nobody"], "--agent (agent)"),
    ],
)
def test_bad_input_is_refused_naming_the_option_exits_non_zero_and_stores_nothing(
    cli: Cli, args: list[str], option: str
) -> None:
    result = cli(*args, "--id", "bad", "--task", "x")
    assert result.exit_code == 2, result.output
    assert f"  {option}: " in result.output
    assert "nothing was stored" in result.output
    assert "no cron jobs" in cli("list").output


def test_setting_the_same_id_again_replaces_the_job(cli: Cli) -> None:
    cli("set-every", "--id", "tick", "--every", "15m", "--task", "first")
    cli("set-every", "--id", "tick", "--every", "1h", "--task", "second")
    out = cli("show", "tick").output
    assert "every 1h" in out
    assert "second" in out
    assert out.count("tick") >= 1
    assert "first" not in out


def test_show_pause_resume_remove_and_a_missing_id(cli: Cli) -> None:
    cli(
        "set-at",
        "--id",
        "once",
        "--at",
        later(),
        "--task",
        "ping",
        "--wake-session",
        "cli",
        "--direct-wake",
    )
    assert "cli (direct wake" in cli("show", "once").output
    assert cli("pause", "once").exit_code == 0
    assert "no (paused)" in cli("list").output
    assert "none while paused" in cli("show", "once").output
    resumed = cli("resume", "once")
    assert resumed.exit_code == 0
    assert "next fire" in resumed.output
    assert cli("remove", "once").exit_code == 0
    missing = cli("remove", "once")
    assert missing.exit_code == 1
    assert "cron job 'once' not found" in missing.output


def test_explain_prints_the_next_five_fire_times_in_the_zone_and_utc(
    cli: Cli,
) -> None:
    result = cli("explain", "0 9 * * 1-5", "--tz", "Europe/Berlin")
    lines = [line for line in result.output.splitlines() if line.startswith("  ")]
    assert len(lines) == 5
    assert all(
        re.search(r"09:00:00 CES?T  \(\d{4}-\d\d-\d\d 0[78]:00:00Z\)", line) for line in lines
    )


def test_explain_refuses_a_bad_zone_naming_it(cli: Cli) -> None:
    result = cli("explain", "0 9 * * *", "--tz", "Nowhere/Town")
    assert result.exit_code == 2
    assert "--tz (timezone)" in result.output


@pytest.mark.parametrize(
    ("expr", "why"),
    [
        ("61 * * * *", "is not a cron expression: minute field '61': 61 is outside 0-59"),
        ("* * * *", "is not a cron expression: '* * * *' has 4 fields"),
        ("0 0 30 2 *", "never fires (no such date, e.g. 30 February)"),
    ],
)
def test_explain_says_what_is_wrong_with_the_expression_not_that_a_job_was_refused(
    cli: Cli, expr: str, why: str
) -> None:
    result = cli("explain", expr)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: '{expr}' {why}")
    assert "refused" not in result.stderr
    assert "stored" not in result.stderr


def test_a_day_of_month_and_a_weekday_fire_on_either_as_in_classic_cron(cli: Cli) -> None:
    times = orjson.loads(cli("explain", "0 9 1-7 * 1", "--tz", "UTC", "-n", "20", "--json").stdout)
    days = [datetime.fromisoformat(t) for t in times["next_fires"]]
    assert all(d.day <= 7 or d.weekday() == 0 for d in days)
    assert any(d.day > 7 for d in days)  # a Monday past the 7th
    assert any(d.day <= 7 and d.weekday() != 0 for d in days)  # a first-week day that is no Monday


def test_an_interval_under_ten_seconds_is_refused_unless_forced(cli: Cli) -> None:
    refused = cli("set-every", "--id", "fast", "--every", "1s", "--task", "x")
    assert refused.exit_code == 2
    assert "--every (every): 1s is shorter than 10 s" in refused.stderr
    assert "--force" in refused.stderr
    assert "no cron jobs" in cli("list").output
    forced = cli("set-every", "--id", "fast", "--every", "1s", "--task", "x", "--force")
    assert forced.exit_code == 0, forced.output
    assert cli("set-every", "--id", "ok", "--every", "10s", "--task", "x").exit_code == 0


def test_set_at_reads_a_local_time_in_the_zone_given_by_tz(cli: Cli) -> None:
    result = cli(
        "set-at", "--id", "dentist", "--at", "2035-03-01T09:00", "--tz", "Europe/Berlin",
        "--task", "remind me",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    job = orjson.loads(cli("show", "dentist", "--json").stdout)["job"]
    assert job["at"] == "2035-03-01T08:00:00Z"
    assert job["next_fire"] == "2035-03-01T08:00:00Z"
    assert job["timezone"] == "Europe/Berlin"
    summer = cli("set-at", "--id", "s", "--at", "2035-07-01 09:00", "--tz", "Europe/Berlin",
                 "--task", "x")  # fmt: skip
    assert summer.exit_code == 0, summer.output
    assert orjson.loads(cli("show", "s", "--json").stdout)["job"]["at"] == "2035-07-01T07:00:00Z"


def test_set_at_without_an_offset_or_a_zone_says_how_to_give_either(cli: Cli) -> None:
    result = cli("set-at", "--id", "x", "--at", "2035-03-01T09:00", "--task", "x")
    assert result.exit_code == 2
    assert "--at (at): '2035-03-01T09:00' has no UTC offset" in result.stderr
    assert "--tz ZONE" in result.stderr
    gap = cli("set-at", "--id", "x", "--at", "2035-03-25T02:30", "--tz", "Europe/Berlin",
              "--task", "x")  # fmt: skip
    assert gap.exit_code == 2
    assert "does not exist in Europe/Berlin" in gap.stderr


def test_a_paused_job_shows_no_next_fire(cli: Cli) -> None:
    cli("set-every", "--id", "tick", "--every", "15m", "--task", "x", "--paused")
    (job,) = orjson.loads(cli("list", "--json").stdout)["jobs"]
    assert (job["state"], job["next_fire"]) == ("paused", None)
    row = next(line for line in cli("list").output.splitlines() if "tick" in line)
    assert "paused" in row
    assert not re.search(r"\d\d:\d\d:\d\d", row)
    assert "next fire" in cli("resume", "tick").output


def test_list_show_and_runs_print_documented_json(cli: Cli) -> None:
    cli("set-cron", "--id", "digest", "--expr", "0 9 * * *", "--task", "digest",
        "--deliver-to", "telegram:42")  # fmt: skip
    (job,) = orjson.loads(cli("list", "--json").stdout)["jobs"]
    assert set(job) == {
        "id", "kind", "schedule", "expr", "at", "every", "timezone", "task", "session",
        "direct_wake", "wake_session", "deliver_to", "output", "agent", "state", "enabled",
        "next_fire", "last_status", "last_fired", "created", "updated",
    }  # fmt: skip
    assert (job["session"], job["deliver_to"], job["state"]) == (
        "cron:digest",
        "telegram:42",
        "active",
    )
    shown = orjson.loads(cli("show", "digest", "--json").stdout)
    assert set(shown) == {"job", "next_fires", "runs"}
    assert len(shown["next_fires"]) == 5
    assert orjson.loads(cli("runs", "digest", "--json").stdout) == {"job_id": "digest", "runs": []}


def test_the_job_list_fits_80_columns_and_no_row_breaks(narrow: Cli) -> None:
    narrow("set-cron", "--id", "a-rather-long-job-name", "--expr", "30 2 * * *", "--task", "x",
           "--deliver-to", "telegram:123456789")  # fmt: skip
    narrow("set-every", "--id", "tick", "--every", "15m", "--task", "x", "--paused")
    result = narrow("list")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    start = next(i for i, line in enumerate(lines) if line.startswith("┡"))
    body = lines[start + 1 : -1]
    assert body
    assert all(line.startswith("│") and line.endswith("│") for line in body)


def test_wake_session_alone_delivers_to_that_chat_and_says_so(cli: Cli) -> None:
    result = cli("set-every", "--id", "hello", "--every", "30s", "--task", "Greet the user",
                 "--wake-session", "cli")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "note: --wake-session cli without --direct-wake delivers" in result.stderr
    job = orjson.loads(cli("show", "hello", "--json").stdout)["job"]
    assert (job["deliver_to"], job["wake_session"], job["direct_wake"]) == ("cli", None, False)


def test_deliver_to_must_be_a_chat(cli: Cli) -> None:
    result = cli("set-every", "--id", "x", "--every", "1h", "--task", "x",
                 "--deliver-to", "cron:other")  # fmt: skip
    assert result.exit_code == 2
    assert "--deliver-to (deliver_to): 'cron:other' is not a chat" in result.stderr


def test_run_now_with_no_gateway_running_says_so_and_exits_non_zero(
    cli: Cli,
) -> None:
    cli("set-cron", "--id", "digest", "--expr", "0 9 * * *", "--task", "digest")
    result = cli("run-now", "digest")
    assert result.exit_code == 1
    assert "no gateway is running" in result.output


def test_runs_prints_the_ledger(cli: Cli, config: Path, tmp_path: Path) -> None:
    from cron.models import RunRecord

    cli("set-cron", "--id", "digest", "--expr", "0 9 * * *", "--task", "digest")

    async def record() -> None:
        store = await connect_store(f"sqlite:///{tmp_path / 'data' / 'gateway.db'}")
        at = datetime(2026, 1, 5, 8, 0, tzinfo=UTC)
        await store.record(
            "digest",
            [
                RunRecord(job_id="digest", status="missed", scheduled=at, lateness_ms=90_000),
                RunRecord(
                    job_id="digest",
                    status="failed",
                    scheduled=at,
                    fired=at,
                    error="RuntimeError: boom",
                ),
            ],
            advance=None,
        )
        await store.close()

    asyncio.run(record())
    out = cli("runs", "digest").output
    assert "missed" in out
    assert "failed" in out
    assert "RuntimeError: boom" in out
    assert "2026-01-05 08:00:00Z" in out
    assert "failed" in cli("list").output


# --- as separate processes, against a running service ----------------------------------


async def gateway_cron(config: Path, *args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway.cron_cli",
        *args,
        "--config",
        str(config),
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 30)
    return proc.returncode or 0, out.decode()


@pytest.fixture(params=["sqlite", "redis"])
async def process_config(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Path]:
    """A config file whose state store is SQLite, or the test Redis (keys of its own)."""
    if request.param == "sqlite":
        yield write_config(tmp_path)
        return
    async with redis_space() as url:
        yield write_config(tmp_path, url)


async def test_a_cli_edit_is_applied_by_the_running_gateway_at_its_next_poll(
    process_config: Path, waker: FakeWaker, clock: ManualClock
) -> None:
    from config import load_config

    settings = load_config(process_config)
    store = await connect_store(settings.state_store_url())
    service = CronService.from_config(settings, store, waker, clock=clock)
    await service.start()
    try:
        # The CLI judges `at` on the wall clock: an hour ahead of it is ahead of the service's too.
        due = (datetime.now(UTC) + timedelta(hours=1)).replace(microsecond=0)
        code, out = await gateway_cron(
            process_config, "set-at", "--id", "live", "--at", due.isoformat(), "--task", "ping"
        )
        assert code == 0, out
        assert service.scheduled_fire("live") is None
        clock.advance(service.poll_seconds)
        await eventually(lambda: service.scheduled_fire("live") == due, within=DEADLINE)
        code, out = await gateway_cron(process_config, "remove", "live")
        assert code == 0, out
        clock.advance(service.poll_seconds)
        await eventually(lambda: service.scheduled_fire("live") is None, within=DEADLINE)
    finally:
        await service.stop()
        await store.close()


async def test_concurrent_cli_processes_never_lose_each_others_edits(process_config: Path) -> None:
    codes = await asyncio.gather(
        *(
            gateway_cron(
                process_config, "set-every", "--id", f"job-{i}", "--every", "15m", "--task", f"t{i}"
            )
            for i in range(6)
        )
    )
    assert all(code == 0 for code, _ in codes), codes
    code, out = await gateway_cron(process_config, "list")
    assert code == 0
    assert all(f"job-{i}" in out for i in range(6))


async def test_cli_run_now_is_fired_by_the_running_gateway(
    process_config: Path, waker: FakeWaker
) -> None:
    from config import load_config

    settings = load_config(process_config)
    store = await connect_store(settings.state_store_url())
    service = CronService.from_config(settings, store, waker)
    await service.start()
    try:
        await service.upsert(
            service.draft(id="digest", kind="cron", expr="0 9 * * *", task="write the digest")
        )
        code, out = await gateway_cron(process_config, "run-now", "digest", "--wait", "10")
        assert code == 0, out
        assert "cron job digest: fired" in out
        assert [str(key) for key, _ in waker.wakes] == ["cron:digest"]
    finally:
        await service.stop()
        await store.close()


def test_list_tells_a_spent_at_job_from_a_paused_one(cli: Cli, tmp_path: Path) -> None:
    from cron.base import Advance

    cli("set-at", "--id", "spent", "--at", later(), "--task", "ping")
    cli("set-at", "--id", "paused", "--at", later(), "--task", "ping", "--paused")

    async def spend() -> None:
        store = await connect_store(f"sqlite:///{tmp_path / 'data' / 'gateway.db'}")
        job = await store.get("spent")
        assert job is not None
        await store.record("spent", [], advance=Advance(next_fire=None, schedule_rev=job.revision))
        await store.disable_if_unchanged("spent", job.revision)
        await store.close()

    asyncio.run(spend())
    rows = {
        line.split("│")[1].strip(): line for line in cli("list").output.splitlines() if "│" in line
    }  # one line per row on a wide terminal
    assert "no (done)" in rows["spent"]
    assert "no (paused)" in rows["paused"]
