"""The words every command shares: lateness, durations and sizes as a person reads them."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from cron.models import RunRecord
from gateway.cli_kit import duration_text, lateness_text, size_text
from gateway.cron_views import run_words

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("milliseconds", "words"),
    [
        (0.2, "on time"),
        (387.968, "388 ms late"),
        (2_400.0, "2.4 s late"),
        (95_000.0, "1 min 35 s late"),
        (2 * 3_600_000.0, "2 h late"),
    ],
)
def test_lateness_is_rounded_as_a_person_reads_it(milliseconds: float, words: str) -> None:
    assert lateness_text(milliseconds) == words


def test_run_now_prints_a_rounded_lateness_and_the_delivery() -> None:
    run = RunRecord(
        job_id="hello",
        status="fired",
        scheduled=datetime(2026, 12, 1, 9, 0, tzinfo=UTC),
        lateness_ms=387.968,
        run_id="s_1-t1",
        delivery="delivered",
    )
    words = run_words(run)
    assert words == (
        "fired (scheduled 2026-12-01 09:00:00Z, 388 ms late), run s_1-t1; delivery: delivered"
    )
    assert "387.968" not in words


@pytest.mark.parametrize(
    ("count", "words"),
    [(1, "1 byte"), (900, "900 bytes"), (3_400, "3.3 KiB"), (67_000_000, "63.9 MiB")],
)
def test_sizes_carry_their_unit(count: int, words: str) -> None:
    assert size_text(count) == words


@pytest.mark.parametrize(
    ("seconds", "words"),
    [
        (0.42, "0.4 s"),
        (12.3, "12 s"),
        (185, "3 min 5 s"),
        (7_800, "2 h 10 min"),
        (273_600, "3 d 4 h"),
    ],
)
def test_durations_read_as_words(seconds: float, words: str) -> None:
    assert duration_text(seconds) == words


def test_gateway_toml_is_kept_out_of_the_repository() -> None:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    ignored = subprocess.run(
        ["git", "check-ignore", "--no-index", "-q", "gateway.toml"], cwd=ROOT, check=False
    )
    assert ignored.returncode == 0
