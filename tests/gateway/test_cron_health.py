"""A running gateway's health carries its cron figures: the service, its jobs, what fires next."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from gateway.app import Gateway
from gateway.control import connected
from tests.gateway.conftest import make_config


async def test_a_running_gateways_health_includes_its_jobs_and_what_fires_next(
    tmp_path: Path,
) -> None:
    # A paused job is counted, but not among what fires next: its fires are skipped.
    soon = (datetime.now(UTC) + timedelta(hours=1)).replace(microsecond=0)
    async with Gateway(make_config(tmp_path), control=False) as gateway:
        cron = gateway.cron
        assert cron is not None
        await cron.upsert(
            cron.draft(
                id="checkin", kind="at", at=soon, task="look", wake_session="cli", direct_wake=True
            )
        )
        await cron.upsert(cron.draft(id="digest", kind="every", every="2h", task="digest"))
        await cron.upsert(cron.draft(id="idle", kind="every", every="1h", task="x"))
        await cron.pause("idle")

        health = await gateway.manager.health()

    assert health["cron"] == {
        "running": True,
        "jobs": 3,
        "enabled": 2,
        "next": [
            {"id": "checkin", "next_fire": soon.isoformat(), "target": "cli"},
            {
                "id": "digest",
                "next_fire": health["cron"]["next"][1]["next_fire"],
                "target": "cron:digest",
            },
        ],
    }
    digest = datetime.fromisoformat(health["cron"]["next"][1]["next_fire"])
    assert soon + timedelta(minutes=59) < digest <= datetime.now(UTC) + timedelta(hours=2)


async def test_the_health_answer_over_the_control_socket_carries_the_cron_jobs(
    tmp_path: Path,
) -> None:
    async with Gateway(make_config(tmp_path)) as gateway:
        assert gateway.cron is not None
        assert gateway.control_path is not None
        await gateway.cron.upsert(
            gateway.cron.draft(id="digest", kind="every", every="2h", task="digest")
        )
        async with connected(gateway.control_path) as client:
            assert client is not None
            answer = await client.call("health")
    cron = answer["health"]["cron"]
    assert (cron["running"], cron["jobs"], [n["id"] for n in cron["next"]]) == (
        True,
        1,
        ["digest"],
    )


async def test_a_gateway_without_cron_reports_no_cron_figures(tmp_path: Path) -> None:
    async with Gateway(make_config(tmp_path, cron={"enabled": False}), control=False) as gateway:
        assert gateway.cron is None
        health = await gateway.manager.health()
    assert "cron" not in health
