"""Restart: a process killed mid-turn loses nothing it accepted, and runs each wake once."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

from tests.private_redis import PrivateRedis, private_redis  # noqa: F401 - the fixture
from tests.threads.conftest import make_runtime, prompts, receipts, stored, turn_entries
from threads.inbox import CRASHED
from threads.manager import RESUME_BODY
from threads.node import claim_node
from threads.store import open_store
from threads.store.base import StoreOptions
from threads.store.entries import Entry, ReceiptEntry
from threads.testing.scripted import ScriptedModel
from threads.tree import unsettled_receipts

KEY = "telegram:42"
ROOT = Path(__file__).resolve().parents[2]


async def _kill_mid_turn(root: Path, *store_url: str) -> list[str]:
    """Run the child until it has accepted its wakes mid-turn, then SIGKILL it."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.threads.restart_child",
        str(root),
        *store_url,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    lines: list[str] = []
    try:
        async with asyncio.timeout(30):
            while not lines or lines[-1] != "ACCEPTED":
                line = await proc.stdout.readline()
                assert line, f"the child exited early (code {await proc.wait()}) after {lines}"
                lines.append(line.decode().strip())
    finally:
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
    assert proc.returncode == -signal.SIGKILL
    return lines


def _body(entry: Entry) -> str:
    text = entry.message.text() if hasattr(entry, "message") else ""
    return str(text).rsplit("\n", 1)[-1]


async def test_every_wake_accepted_before_a_sigkill_mid_turn_runs_once_after_restart(
    tmp_path: Path,
) -> None:
    assert await _kill_mid_turn(tmp_path) == ["MID-TURN", "ACCEPTED"]

    store = open_store(f"jsonl://{tmp_path / 'sessions'}")
    session_id = await store.resolve(KEY)
    assert session_id is not None
    before = await stored(store, session_id)
    assert [_body(p) for p in prompts(before)] == ["wake 1"]
    assert turn_entries(before) == []
    assert len(unsettled_receipts(before)) == 4

    rt = await make_runtime(store, ScriptedModel(), recovery_path=tmp_path / "recovery.json")
    thread = rt.manager.thread(KEY)
    assert thread is not None
    await thread.session.wait_idle()
    entries = await stored(store, session_id)

    # The interrupted turn is recorded as canceled; its wake is resumed, not replayed.
    ends = {t.run_id: t for t in turn_entries(entries)}
    first = f"{session_id}-t1"
    assert ends[first].canceled
    assert ends[first].err == CRASHED
    bodies = [_body(p) for p in prompts(entries) if p.run_id != first]
    assert bodies == [RESUME_BODY, "steer 5", "wake 2", "wake 3", "wake 4"]
    # Each ran exactly once, to its end.
    for prompt in prompts(entries):
        if prompt.run_id != first:
            assert not ends[prompt.run_id].canceled
    assert [_body(p) for p in prompts(entries)].count("wake 1") == 1
    assert unsettled_receipts(entries) == []
    (deferred,) = receipts(entries, "deferred")
    assert isinstance(deferred, ReceiptEntry)
    # Every reply went to the sink of the wake it answers.
    for chat, body in [
        ("w1", RESUME_BODY),
        ("w2", "wake 2"),
        ("w3", "wake 3"),
        ("w4", "wake 4"),
        ("w5", "steer 5"),
    ]:
        (reply,) = await rt.inbox(chat).wait()
        assert reply.endswith(body)
    await rt.manager.close()
    await store.close()

    # A further restart finds nothing left to run.
    store = open_store(f"jsonl://{tmp_path / 'sessions'}")
    again = await make_runtime(store, ScriptedModel(), recovery_path=tmp_path / "recovery.json")
    assert again.manager.threads() == []
    await again.manager.close()
    assert len(turn_entries(await stored(store, session_id))) == len(ends)
    await store.close()


async def test_a_restart_on_redis_takes_over_the_locks_the_killed_run_left_at_once(
    tmp_path: Path,
    private_redis: PrivateRedis,  # noqa: F811
) -> None:
    """The killed run's locks (30 s to lapse) belong to an earlier boot of this node."""
    assert await _kill_mid_turn(tmp_path, private_redis.url) == ["MID-TURN", "ACCEPTED"]
    claim = claim_node(tmp_path / "state")
    assert claim.identity.boot == 2
    store = open_store(private_redis.url, StoreOptions(node=claim.identity))
    rt = await make_runtime(store, ScriptedModel(), recovery_path=tmp_path / "recovery.json")
    thread = rt.manager.thread(KEY)
    assert thread is not None  # continued now, not refused as locked
    await thread.session.wait_idle()
    for chat in ("w1", "w2", "w3", "w4", "w5"):
        assert len(await rt.inbox(chat).wait()) == 1
    session_id = await store.resolve(KEY)
    assert session_id is not None
    entries = await stored(store, session_id)
    assert unsettled_receipts(entries) == []
    await rt.manager.close()
    await store.close()
    claim.close()
