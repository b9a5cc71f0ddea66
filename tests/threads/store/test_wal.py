"""The jsonl store's write-ahead log: one flush per round, and what a power loss took comes back."""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from tests.threads.store.helpers import fsync_refused, header, msg, texts
from tests.threads.store.test_jsonl import Spy
from threads.errors import UnavailableError
from threads.store.base import StoreOptions
from threads.store.codec import encode_header
from threads.store.entries import Header
from threads.store.jsonl import JsonlStore
from threads.store.keyfile import JOURNAL
from threads.store.wal import PREFIX, WRITE, ZEROED, WriteAheadLog, records

ROOT = Path(__file__).resolve().parents[3]


def logs(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if p.name.startswith(PREFIX))


class HeldWriter:
    """A store's ``pause``: its writer thread waits in its first append until released."""

    def __init__(self) -> None:
        self.entered, self.release = threading.Event(), threading.Event()

    def __call__(self, point: str) -> None:
        if point == "append:started" and not self.release.is_set():
            self.entered.set()
            self.release.wait(30)

    async def reached(self) -> None:
        """Once the writer thread is held (the appends after it queue behind)."""
        await asyncio.get_running_loop().run_in_executor(None, self.entered.wait, 30)


async def test_a_round_of_appends_to_many_sessions_is_flushed_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = HeldWriter()
    store = JsonlStore(tmp_path, pause=held)
    sessions = [header() for _ in range(16)]
    for h in sessions:
        await store.create(h)
    syncs = Spy(monkeypatch, "fsync")
    # The first append holds the writer thread; the other 63 queue behind it: one round.
    first = asyncio.ensure_future(store.append(sessions[0].id, [msg("first")]))
    await held.reached()
    rest = [
        asyncio.ensure_future(store.append(sessions[i % 16].id, [msg(str(i))]))
        for i in range(1, 64)
    ]
    await asyncio.sleep(0)  # let each append hand its write to the writer thread
    held.release.set()
    await asyncio.gather(first, *rest)
    # Two rounds (the held one and the other 63 over 16 files): two flushes of the log.
    assert len(syncs.calls) == 2
    loaded = [await store.load(h.id) for h in sessions]
    assert sum(len(each.entries) for each in loaded) == 64
    await store.close()


async def test_a_clean_close_flushes_the_sessions_and_removes_the_log(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    h = header()
    await store.create(h)
    await store.append(h.id, [msg("kept")])
    assert len(logs(tmp_path)) == 1
    await store.close()
    assert logs(tmp_path) == []
    again = JsonlStore(tmp_path)
    assert texts((await again.load(h.id)).entries) == ["kept"]
    await again.close()


async def test_the_log_starts_over_past_its_limit(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path, wal_limit=4096)
    h = header()
    await store.create(h)
    for i in range(200):
        await store.append(h.id, [msg(f"message {i} " + "x" * 100)])
        (log,) = logs(tmp_path)
        assert len(log.read_bytes().rstrip(b"\0")) < 4096 + 1024  # its records; zeros follow
    assert len((await store.load(h.id)).entries) == 200
    await store.close()


def test_reading_a_log_stops_at_a_torn_or_foreign_record(tmp_path: Path) -> None:
    wal = WriteAheadLog(str(tmp_path))
    wal.open()
    wal.record(WRITE, "a.jsonl", 0, b"one\n")
    wal.record(WRITE, "a.jsonl", 4, b"two\n")
    wal.sync()
    (path,) = logs(tmp_path)
    data = path.read_bytes().rstrip(b"\0")  # the records, without the zeros laid ahead
    assert [r[3] for r in records(data)] == [b"one\n", b"two\n"]
    assert [r[3] for r in records(data[:-2])] == [b"one\n"]  # the second record torn
    flipped = bytearray(data)
    flipped[-1] ^= 0xFF
    assert [r[3] for r in records(bytes(flipped))] == [b"one\n"]  # its checksum fails
    wal.checkpoint()  # a new generation: what follows the header is not read as its own
    assert list(records(path.read_bytes()[:16] + data[16:])) == []
    wal.close()


# A child writes through a jsonl store, reports what was acknowledged, and waits
# for the SIGKILL: its write-ahead log stays behind, unlocked.
CHILD = textwrap.dedent(
    """
    import asyncio, os, sys
    from threads.store.jsonl import JsonlStore
    from threads.store.entries import Header, MessageEntry
    from threads.messages import Message

    async def main():
        store = JsonlStore(sys.argv[1])
        await store.create(Header(id="s_kept"))
        for n in range(3):
            await store.append("s_kept", [MessageEntry(id=f"e_{n}", message=Message.user(f"b{n}"))])
        await store.create(Header(id="s_new"))
        await store.point("telegram:1", "s_new")
        sys.stdout.write("acked\\n")
        sys.stdout.flush()
        os.read(0, 1)  # wait for the SIGKILL

    asyncio.run(main())
    """
)


async def killed_after_its_acks(script: str, root: Path, *args: str) -> None:
    """Run ``script`` on a store at ``root`` until it says ``acked``, then SIGKILL it."""
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, str(root), *args,
        cwd=ROOT, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert child.stdout is not None
    assert await asyncio.wait_for(child.stdout.readline(), 60) == b"acked\n"
    child.send_signal(signal.SIGKILL)
    await child.wait()


async def test_acknowledged_writes_a_power_loss_took_come_back_from_the_log(
    tmp_path: Path,
) -> None:
    root = tmp_path / "sessions"
    await killed_after_its_acks(CHILD, root)
    # The power loss: what was never flushed on its own is gone from the files
    # (the appends of s_kept, the whole of s_new, the key index's line) ...
    kept = root / "s_kept.jsonl"
    kept.write_bytes(encode_header(Header(id="s_kept")))
    (root / "s_new.jsonl").unlink()
    (root / ".keys.jsonl").unlink()
    (dead,) = logs(root)  # ... and the dead writer's log is there.
    store = JsonlStore(root)
    assert texts((await store.load("s_kept")).entries) == ["b0", "b1", "b2"]
    assert (await store.load("s_new")).entries == []
    assert await store.resolve("telegram:1") == "s_new"
    assert dead not in logs(root)  # replayed and gone; the store's own log is open
    await store.append("s_kept", [msg("after")])
    assert texts((await store.load("s_kept")).entries) == ["b0", "b1", "b2", "after"]
    await store.close()


async def test_a_live_stores_log_is_never_replayed(tmp_path: Path) -> None:
    first = JsonlStore(tmp_path)
    h = header()
    await first.create(h)
    await first.append(h.id, [msg("mine")])
    (log,) = logs(tmp_path)
    second = JsonlStore(tmp_path)
    assert texts((await second.load(h.id)).entries) == ["mine"]
    assert log.exists()
    await first.append(h.id, [msg("still mine")])
    await second.close()
    await first.close()
    assert os.listdir(tmp_path) == [f"{h.id}.jsonl"]


async def test_a_round_whose_log_flush_fails_leaves_nothing_of_its_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = JsonlStore(tmp_path)
    h = header()
    await store.create(h)
    await store.append(h.id, [msg("before")])
    with fsync_refused():
        with pytest.raises(UnavailableError):
            await store.append(h.id, [msg("refused"), msg("also refused")])
        with pytest.raises(UnavailableError):
            await store.create(Header(id="s_refused"))
    assert texts((await store.load(h.id)).entries) == ["before"]
    assert not (tmp_path / "s_refused.jsonl").exists()
    await store.append(h.id, [msg("after")])
    await store.create(Header(id="s_refused"))
    assert texts((await store.load(h.id)).entries) == ["before", "after"]
    await store.close()
    again = JsonlStore(tmp_path)
    assert texts((await again.load(h.id)).entries) == ["before", "after"]
    await again.close()


async def test_after_a_refused_flush_a_lease_counts_what_the_file_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A session's write path compares this count with its view to learn
    # whether a failed write landed: counted wrong, the session stopped writing.
    store = JsonlStore(tmp_path)
    h = header()
    await store.create(h)
    holder = object()
    await store.acquire(h.id, holder)
    await store.append(h.id, [msg("one"), msg("two")])
    with fsync_refused(), pytest.raises(UnavailableError):
        await store.append(h.id, [msg("refused")])
    count, _created = await store.acquire(h.id, holder)
    assert count == 2
    await store.close()


# -- an append that need not be durable (a send's mark): written, not flushed


async def test_an_append_that_need_not_be_durable_is_flushed_by_the_next_durable_round(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = JsonlStore(tmp_path)
    h = header()
    await store.create(h)
    syncs = Spy(monkeypatch, "fsync")
    await store.append(h.id, [msg("mark")], durable=False)
    await store.append(h.id, [msg("mark 2")], durable=False)
    assert syncs.calls == []
    # Both are in the log already (written, not flushed) ...
    (log,) = logs(tmp_path)
    assert [data.count(b"mark") for *_, data in records(log.read_bytes())][-2:] == [1, 1]
    # ... so the next durable append's one flush makes them durable with it.
    await store.append(h.id, [msg("durable")])
    assert len(syncs.calls) == 1
    assert texts((await store.load(h.id)).entries) == ["mark", "mark 2", "durable"]
    await store.close()


async def test_a_create_and_a_point_that_need_not_be_durable_ride_with_the_next_flush(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = JsonlStore(tmp_path)
    await store.create(header())  # the log exists
    syncs = Spy(monkeypatch, "fsync")
    h = header()
    await store.create(h, durable=False)
    await store.point("telegram:1", h.id, durable=False)
    assert syncs.calls == []
    await store.append(h.id, [msg("first")])
    assert len(syncs.calls) == 1
    (log,) = logs(tmp_path)
    names = [name for _, name, _, _ in records(log.read_bytes())][-3:]
    assert names == [f"{h.id}.jsonl", JOURNAL, f"{h.id}.jsonl"]  # in the order they were made
    assert await store.resolve("telegram:1") == h.id
    await store.close()


async def test_a_flush_makes_an_append_that_need_not_be_durable_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = JsonlStore(tmp_path)
    h = header()
    await store.create(h)
    await store.append(h.id, [msg("mark")], durable=False)
    syncs = Spy(monkeypatch, "fsync")
    await store.flush(h.id)
    assert len(syncs.calls) == 1
    await store.flush(h.id)
    assert len(syncs.calls) == 1  # nothing written since: nothing to flush
    await store.close()


async def test_on_flush_treats_an_append_that_need_not_be_durable_as_any_other(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = JsonlStore(tmp_path, StoreOptions(fsync="on_flush"))
    h = header()
    await store.create(h)
    syncs = Spy(monkeypatch, "fsync")
    await store.append(h.id, [msg("1")], durable=False)
    await store.append(h.id, [msg("2")])
    assert syncs.calls == []
    await store.flush(h.id)
    assert len(syncs.calls) == 1
    await store.close()


async def test_a_round_whose_flush_fails_leaves_an_earlier_written_append_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = JsonlStore(tmp_path)
    h = header()
    await store.create(h)
    await store.append(h.id, [msg("before")])
    await store.append(h.id, [msg("mark")], durable=False)  # reported written
    with fsync_refused(errno.EIO), pytest.raises(UnavailableError):
        await store.append(h.id, [msg("refused")])
    # The failed round is taken back out; the mark written before it is not.
    assert texts((await store.load(h.id)).entries) == ["before", "mark"]
    await store.append(h.id, [msg("after")])
    await store.close()
    again = JsonlStore(tmp_path)
    assert texts((await again.load(h.id)).entries) == ["before", "mark", "after"]
    await again.close()


async def test_an_append_that_need_not_be_durable_keeps_its_place_in_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = HeldWriter()
    store = JsonlStore(tmp_path, pause=held)
    h, other = header(), header()
    await store.create(h)
    await store.create(other)
    syncs = Spy(monkeypatch, "fsync")
    # The first append holds the writer thread; the rest queue behind it: one round,
    # in which a durable append comes before the one that need not be durable.
    first = asyncio.ensure_future(store.append(other.id, [msg("held")]))
    await held.reached()
    rest = [
        asyncio.ensure_future(store.append(h.id, [msg("turn end")])),
        asyncio.ensure_future(store.append(h.id, [msg("mark")], durable=False)),
        asyncio.ensure_future(store.append(h.id, [msg("next prompt")])),
    ]
    await asyncio.sleep(0)  # let each append hand its write to the writer thread
    held.release.set()
    await asyncio.gather(first, *rest)
    assert len(syncs.calls) == 2  # the held round's flush and the round of the rest
    (log,) = logs(tmp_path)
    offsets = [offset for _, name, offset, _ in records(log.read_bytes()) if h.id in name]
    assert offsets == sorted(offsets)  # the log replays the file's order
    assert texts((await store.load(h.id)).entries) == ["turn end", "mark", "next prompt"]
    await store.close()


def test_a_refused_flush_has_the_next_flush_write_the_unflushed_records_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wal = WriteAheadLog(str(tmp_path))
    wal.open()
    assert wal.write(WRITE, "a.jsonl", 0, b"mark\n") is False  # written, not flushed
    wal.record(WRITE, "a.jsonl", 5, b"refused\n")
    with fsync_refused(errno.EIO), pytest.raises(OSError, match="Input/output error"):
        wal.sync()
    # The refused fsync may have left the mark's pages clean but not on the disk:
    # the next flush writes them again, where they are, before its own records.
    writes = Spy(monkeypatch, "pwrite")
    wal.record(WRITE, "a.jsonl", 5, b"after\n")
    wal.sync()
    (path,) = logs(tmp_path)
    data = path.read_bytes()
    mark_at = data.index(b"mark\n")
    again = [(buf, at) for _fd, buf, at in writes.calls if b"mark\n" in buf]
    assert len(again) == 1
    assert again[0][1] + again[0][0].index(b"mark\n") == mark_at
    assert [r[3] for r in records(data)] == [b"mark\n", b"after\n"]
    writes.calls.clear()
    wal.record(WRITE, "a.jsonl", 11, b"later\n")
    wal.sync()
    assert len(writes.calls) == 1  # flushed: not written again
    wal.close()


# A child makes durable appends with written-only ones between them, reports,
# and waits for the SIGKILL.
CHILD_MARKS = textwrap.dedent(
    """
    import asyncio, os, sys
    from threads.store.jsonl import JsonlStore
    from threads.store.entries import Header, MessageEntry
    from threads.messages import Message

    def entry(n, text):
        return [MessageEntry(id=f"e_{n}", message=Message.user(text))]

    async def written(store, n, text):
        if sys.argv[2] == "at_once":  # on the event loop's thread, the writer idle
            assert store.append_at_once("s_marks", entry(n, text), durable=False) is not None
        else:
            await store.append("s_marks", entry(n, text), durable=False)

    async def main():
        store = JsonlStore(sys.argv[1])
        await store.create(Header(id="s_marks"))
        await store.append("s_marks", entry(0, "turn 1"))
        await written(store, 1, "mark 1")
        await store.append("s_marks", entry(2, "turn 2"))
        await written(store, 3, "mark 2")
        sys.stdout.write("acked\\n")
        sys.stdout.flush()
        os.read(0, 1)  # wait for the SIGKILL

    asyncio.run(main())
    """
)


@pytest.mark.parametrize("written", ["awaited", "at_once"])
async def test_written_appends_outlive_a_kill_and_a_power_loss_keeps_the_durable_after_them(
    tmp_path: Path, written: str
) -> None:
    root = tmp_path / "sessions"
    await killed_after_its_acks(CHILD_MARKS, root, written)
    every = ["turn 1", "mark 1", "turn 2", "mark 2"]
    # The process died: everything it wrote, flushed or not, is in the file.
    reader = JsonlStore(root, StoreOptions(no_lock=True))  # replays no log
    assert texts((await reader.load("s_marks")).entries) == every
    await reader.close()
    # The power loss: nothing was flushed to the session file on its own. The log
    # holds the written appends too, so the acknowledged "turn 2" after "mark 1"
    # is not a record past the file's end: it comes back.
    (root / "s_marks.jsonl").write_bytes(encode_header(Header(id="s_marks")))
    (dead,) = logs(root)
    store = JsonlStore(root)
    assert texts((await store.load("s_marks")).entries)[:3] == every[:3]
    assert dead not in logs(root)
    await store.close()


async def test_records_are_written_over_zeros_laid_ahead_so_the_log_does_not_grow_per_round(
    tmp_path: Path,
) -> None:
    store = JsonlStore(tmp_path)
    h = header()
    await store.create(h)
    await store.append(h.id, [msg("first")])
    (log,) = logs(tmp_path)
    size = log.stat().st_size
    assert size >= ZEROED
    for n in range(20):
        await store.append(h.id, [msg(f"line {n}")])
    assert log.stat().st_size == size
    assert sum(1 for _ in records(log.read_bytes())) == 22  # the zeros end the reading
    await store.close()


async def test_the_log_is_opened_before_the_first_write_whose_round_then_flushes_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = JsonlStore(tmp_path / "sessions")
    assert await store.resolve("telegram:1") is None  # the store's first call: the log opens
    assert len(logs(tmp_path / "sessions")) == 1
    syncs = Spy(monkeypatch, "fsync")
    await store.create(header())
    assert len(syncs.calls) == 1
    await store.close()
    assert logs(tmp_path / "sessions") == []
