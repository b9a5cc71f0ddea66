"""The metrics recorder: per-minute counts in a fixed ring, read as series."""

from __future__ import annotations

from gateway.metrics import LATENCY_BOUNDS_MS, Metrics
from tests.clock import Seconds

START = 1_000_020.0


def test_turns_and_tokens_land_in_their_minute() -> None:
    clock = Seconds(START)
    metrics = Metrics(minutes=10, clock=clock)
    metrics.record_turn("cli", tokens=10)
    clock.now += 60
    metrics.record_turn("cli", tokens=5, failed=True)
    metrics.record_turn("web:a", tokens=20)
    series = metrics.series()
    assert series["minutes"] == 10
    points = series["points"]
    assert [p["turns"] for p in points[-2:]] == [1, 2]
    assert points[-1]["failed_turns"] == 1
    assert points[-1]["minute"] == int(clock.now // 60) * 60_000
    assert series["sessions"] == [
        {"key": "web:a", "total_tokens": 20, "tokens": [0] * 9 + [20]},
        {"key": "cli", "total_tokens": 15, "tokens": [0] * 8 + [10, 5]},
    ]


def test_an_old_minute_is_forgotten_when_its_slot_comes_round_again() -> None:
    clock = Seconds(START)
    metrics = Metrics(minutes=3, clock=clock)
    metrics.record_turn("cli", tokens=1)
    clock.now += 3 * 60
    metrics.record_turn("cli", tokens=0)
    points = metrics.series()["points"]
    assert [p["turns"] for p in points] == [0, 0, 1]
    assert metrics.series()["sessions"] == []


def test_model_latency_has_an_average_quantiles_and_a_maximum() -> None:
    metrics = Metrics(clock=Seconds(START))
    for ms in (3, 4, 8, 40, 900):
        metrics.record_model_call(ms / 1000)
    metrics.record_model_call(0.002, failed=True)
    point = metrics.series(1)["points"][0]
    assert point["model_calls"] == 6
    assert point["model_errors"] == 1
    assert point["latency_avg_ms"] == round((3 + 4 + 8 + 40 + 900 + 2) / 6, 1)
    assert point["latency_max_ms"] == 900.0
    assert point["latency_p50_ms"] == 5.0  # the bucket holding the median: up to 5 ms
    assert point["latency_p95_ms"] == 900.0  # never above the largest call seen
    assert LATENCY_BOUNDS_MS[0] == 5


def test_a_minute_without_model_calls_has_no_latency_not_zero() -> None:
    metrics = Metrics(clock=Seconds(START))
    metrics.record_turn("cli", tokens=3)
    point = metrics.series(1)["points"][0]
    for name in ("latency_avg_ms", "latency_p50_ms", "latency_p95_ms", "latency_max_ms"):
        assert point[name] is None


def test_every_record_changes_the_version() -> None:
    metrics = Metrics(clock=Seconds(START))
    before = metrics.version
    metrics.record_model_call(0.01)
    metrics.record_turn("cli", tokens=0)
    assert metrics.version == before + 2


def test_a_series_is_never_longer_than_the_ring() -> None:
    metrics = Metrics(minutes=5, clock=Seconds(START))
    assert len(metrics.series(60)["points"]) == 5
    assert len(metrics.series(2)["points"]) == 2
