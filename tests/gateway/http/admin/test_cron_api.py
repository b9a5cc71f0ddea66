"""The cron endpoints: create, edit, pause, resume, run now, runs, remove, explain."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from tests.gateway.http.admin.conftest import AdminRig, admin_gateway

JOB = {"id": "nightly", "kind": "cron", "expr": "30 2 * * *", "task": "tidy up"}


async def test_a_job_is_created_and_shows_its_next_fires(rig: AdminRig) -> None:
    body = await rig.api.ok("POST", "/cron/jobs", JOB, status=201)
    assert body["job"]["id"] == "nightly"
    assert body["job"]["timezone"] == "UTC"
    assert len(body["next_fires"]) == 5
    assert all(t.endswith("02:30:00Z") for t in body["next_fires"])
    assert body["next_fire"] == body["next_fires"][0]
    listed = await rig.api.ok("GET", "/cron/jobs")
    assert [v["job"]["id"] for v in listed["jobs"]] == ["nightly"]
    assert listed["jobs"][0]["next_fire"] == body["next_fire"]


async def test_creating_a_taken_id_is_409(rig: AdminRig) -> None:
    await rig.api.ok("POST", "/cron/jobs", JOB, status=201)
    status, body = await rig.api.post("/cron/jobs", JOB)
    assert status == 409
    assert "PUT /api/cron/jobs/nightly" in body["error"]["message"]


async def test_a_refused_job_is_400_naming_each_field(rig: AdminRig) -> None:
    status, body = await rig.api.post("/cron/jobs", {**JOB, "expr": "61 * * * *"})
    assert status == 400
    assert body["error"]["field"] == "expr"
    status, body = await rig.api.post(
        "/cron/jobs", {**JOB, "timezone": "Mars/Olympus", "task": " "}
    )
    assert status == 400
    assert {p["field"] for p in body["error"]["problems"]} == {"timezone", "task"}
    status, body = await rig.api.post(
        "/cron/jobs", {"kind": "cron", "expr": "* * * * *", "task": "x"}
    )
    assert (status, body["error"]["field"]) == (400, "id")
    status, body = await rig.api.post("/cron/jobs", {**JOB, "kind": "hourly"})
    assert (status, body["error"]["field"]) == (400, "kind")


async def test_at_and_every_jobs(rig: AdminRig) -> None:
    soon = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    body = await rig.api.ok(
        "POST", "/cron/jobs", {"id": "once", "kind": "at", "at": soon, "task": "remind"}, 201
    )
    assert body["next_fires"] == [body["job"]["at"]]
    body = await rig.api.ok(
        "POST", "/cron/jobs", {"id": "often", "kind": "every", "every": "15m", "task": "t"}, 201
    )
    assert body["job"]["every"] == "15m"
    past = (datetime.now(UTC) - timedelta(days=1)).isoformat()
    status, body = await rig.api.post(
        "/cron/jobs", {"id": "late", "kind": "at", "at": past, "task": "t"}
    )
    assert (status, body["error"]["field"]) == (400, "at")


async def test_an_interval_under_ten_seconds_needs_force_as_on_the_cli(rig: AdminRig) -> None:
    job = {"id": "flood", "kind": "every", "every": "1s", "task": "t"}
    status, body = await rig.api.post("/cron/jobs", job)
    assert (status, body["error"]["field"]) == (400, "every")
    assert '"force": true' in body["error"]["message"]
    assert (await rig.api.ok("GET", "/cron/jobs"))["jobs"] == []
    forced = await rig.api.ok("POST", "/cron/jobs", {**job, "force": True}, status=201)
    assert forced["job"]["every"] == "1s"


async def test_a_job_is_replaced_whole_and_a_missing_one_is_404(rig: AdminRig) -> None:
    await rig.api.ok("POST", "/cron/jobs", JOB, status=201)
    body = await rig.api.ok(
        "PUT", "/cron/jobs/nightly", {"kind": "cron", "expr": "0 9 * * 1", "task": "week starts"}
    )
    assert (body["job"]["expr"], body["job"]["task"]) == ("0 9 * * 1", "week starts")
    assert body["job"]["revision"] == 2
    status, _ = await rig.api.put(
        "/cron/jobs/ghost", {"kind": "cron", "expr": "* * * * *", "task": "x"}
    )
    assert status == 404
    status, body = await rig.api.put("/cron/jobs/nightly", {**JOB, "id": "other"})
    assert (status, body["error"]["field"]) == (400, "id")


async def test_pause_and_resume_flip_enabled_alone(rig: AdminRig) -> None:
    await rig.api.ok("POST", "/cron/jobs", JOB, status=201)
    body = await rig.api.ok("POST", "/cron/jobs/nightly/pause")
    assert body["job"]["enabled"] is False
    assert body["job"]["expr"] == "30 2 * * *"
    body = await rig.api.ok("POST", "/cron/jobs/nightly/resume")
    assert body["job"]["enabled"] is True
    status, _ = await rig.api.post("/cron/jobs/ghost/pause")
    assert status == 404


async def test_run_now_fires_and_the_run_is_in_the_ledger(rig: AdminRig) -> None:
    await rig.api.ok("POST", "/cron/jobs", JOB, status=201)
    body = await rig.api.ok("POST", "/cron/jobs/nightly/run")
    assert body["run"]["status"] == "fired"
    assert body["run"]["via"] == "run-now"
    await rig.gateway.wait_idle()
    runs = await rig.api.ok("GET", "/cron/jobs/nightly/runs?limit=5")
    assert [r["status"] for r in runs["runs"]] == ["fired"]
    assert runs["runs"][0]["session_key"] == "cron:nightly"
    assert (await rig.api.get("/cron/jobs/ghost/runs"))[0] == 404


async def test_remove_keeps_the_runs_and_the_job_is_gone(rig: AdminRig) -> None:
    await rig.api.ok("POST", "/cron/jobs", JOB, status=201)
    await rig.api.ok("POST", "/cron/jobs/nightly/run")
    body = await rig.api.ok("DELETE", "/cron/jobs/nightly")
    assert body == {"id": "nightly", "removed": True}
    assert (await rig.api.get("/cron/jobs/nightly"))[0] == 404
    assert (await rig.api.delete("/cron/jobs/nightly"))[0] == 404
    runs = await rig.api.ok("GET", "/cron/jobs/nightly/runs")
    assert len(runs["runs"]) == 1


async def test_explain_gives_the_next_fire_times_in_the_zone(rig: AdminRig) -> None:
    body = await rig.api.ok("GET", "/cron/explain?expr=0+9+*+*+*&timezone=Europe/Berlin&count=3")
    assert body["timezone"] == "Europe/Berlin"
    assert len(body["times"]) == 3
    hours = {datetime.fromisoformat(t).hour for t in body["times"]}
    assert hours <= {7, 8}  # 09:00 in Berlin is 07:00 or 08:00 UTC


async def test_explain_names_the_bad_field(rig: AdminRig) -> None:
    status, body = await rig.api.get("/cron/explain?expr=*+*+*")
    assert (status, body["error"]["field"]) == (400, "expr")
    status, body = await rig.api.get("/cron/explain?expr=*+*+*+*+*&timezone=Nowhere/Land")
    assert (status, body["error"]["field"]) == (400, "timezone")
    status, body = await rig.api.get("/cron/explain?expr=0+0+30+2+*")
    assert status == 400
    assert "never fires" in body["error"]["message"]
    status, body = await rig.api.get("/cron/explain")
    assert (status, body["error"]["field"]) == (400, "expr")


async def test_with_cron_off_the_cron_endpoints_are_404(tmp_path: Path) -> None:
    async with admin_gateway(tmp_path, cron={"enabled": False}) as rig:
        status, body = await rig.api.get("/cron/jobs")
        assert status == 404
        assert "[cron] enabled = false" in body["error"]["message"]
