"""What only the jsonl backend promises: its files, its writes, its fsyncs, its key index."""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import stat
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.threads.store.helpers import at, header, msg, texts
from threads.errors import LockedError, NotFoundError
from threads.store import open_store
from threads.store.base import StoreOptions
from threads.store.codec import encode_header
from threads.store.jsonl import JsonlStore
from threads.store.keyfile import JOURNAL
from threads.store.lines import encode_batch

ROOT = Path(__file__).resolve().parents[3]


class Spy:
    """Counts calls of an os function (the OS boundary), passing them through."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
        self.calls: list[tuple[Any, ...]] = []
        real: Callable[..., Any] = getattr(os, name)

        def spy(*args: Any) -> Any:
            self.calls.append(args)
            return real(*args)

        monkeypatch.setattr(os, name, spy)


async def test_the_directory_is_private_and_each_session_one_private_file(tmp_path: Path) -> None:
    root = tmp_path / "data" / "sessions"
    store = JsonlStore(root)
    h = header()
    await store.create(h)
    await store.append(h.id, [msg("hi")])
    await store.close()
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    assert [p.name for p in root.iterdir()] == [f"{h.id}.jsonl"]
    path = root / f"{h.id}.jsonl"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    lines = path.read_bytes().splitlines()
    assert orjson.loads(lines[0])["type"] == "session"
    assert orjson.loads(lines[1])["message"]["content"][0]["text"] == "hi"


async def test_a_batch_is_one_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = JsonlStore(tmp_path)
    h = header()
    await store.create(h)
    await store.append(h.id, [msg("warm")])
    writes = Spy(monkeypatch, "write")
    await store.append(h.id, [msg(str(i)) for i in range(50)])
    assert len(writes.calls) == 1
    assert writes.calls[0][1].count(b"\n") == 50
    await store.close()


async def test_every_append_is_fsynced_before_it_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = JsonlStore(tmp_path)
    h = header()
    await store.create(h)
    syncs = Spy(monkeypatch, "fsync")
    await store.append(h.id, [msg("durable")])
    assert len(syncs.calls) == 1
    await store.close()


async def test_on_flush_defers_the_fsync_to_flush(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = JsonlStore(tmp_path, StoreOptions(fsync="on_flush"))
    h = header()
    await store.create(h)
    syncs = Spy(monkeypatch, "fsync")
    await store.append(h.id, [msg("1")])
    await store.append(h.id, [msg("2")])
    assert syncs.calls == []
    await store.flush(h.id)
    assert len(syncs.calls) == 1
    await store.flush(h.id)
    assert len(syncs.calls) == 1  # nothing buffered: nothing to sync
    await store.close()


async def test_concurrent_appends_share_fsyncs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = JsonlStore(tmp_path)
    sessions = [header() for _ in range(16)]
    for h in sessions:
        await store.create(h)
    syncs = Spy(monkeypatch, "fsync")
    appends = [store.append(sessions[i % 16].id, [msg(str(i))]) for i in range(256)]
    await asyncio.gather(*appends)
    # Group commit: at most one fsync per touched file per round, so far fewer than 256.
    assert len(syncs.calls) < 200
    for h in sessions:
        assert len((await store.load(h.id)).entries) == 16
    await store.close()


async def test_two_unlocked_writers_never_overwrite_each_others_lines(tmp_path: Path) -> None:
    # O_APPEND: even without the lock, every write lands at the end of the file.
    first = JsonlStore(tmp_path, StoreOptions(no_lock=True))
    second = JsonlStore(tmp_path, StoreOptions(no_lock=True))
    h = header()
    await first.create(h)
    for i in range(20):
        await first.append(h.id, [msg(f"a{i}")])
        await second.append(h.id, [msg(f"b{i}")])
    got = texts((await first.load(h.id)).entries)
    assert sorted(got) == sorted([f"a{i}" for i in range(20)] + [f"b{i}" for i in range(20)])
    await first.close()
    await second.close()


async def test_open_descriptors_are_bounded_and_leased_sessions_stay_held(
    tmp_path: Path,
) -> None:
    store = JsonlStore(tmp_path, max_open=4)
    other = JsonlStore(tmp_path)
    leased = [header() for _ in range(3)]
    plain = [header() for _ in range(10)]
    for h in leased + plain:
        await store.create(h)
    for h in leased:
        await store.acquire(h.id, object())
    for h in plain:
        await store.append(h.id, [msg("x")])

    def open_sessions() -> int:
        count = 0
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(FileNotFoundError):
                target = os.readlink(f"/proc/self/fd/{fd}")
                count += target.startswith(str(tmp_path)) and target.endswith(".jsonl")
        return count

    assert open_sessions() <= 4
    for h in leased:  # evicting a leased session would hand it to another writer
        with pytest.raises(LockedError):
            await other.append(h.id, [msg("intruder")])
    # An evicted plain session was released: another store may now take it.
    await other.append(plain[0].id, [msg("taken over")])
    await store.close()
    await other.close()


# A child process: lower the open-files limit, open some descriptors of its own
# (the rest of a gateway), then hold N sessions (leased unless told otherwise), each
# one written and read back. It prints "ok <soft limit>" or "error <message>".
MANY_SESSIONS = textwrap.dedent(
    """
    import asyncio, logging, os, resource, sys
    root, soft, hard, sessions = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    leased, others = sys.argv[5] == "leased", int(sys.argv[6])
    kept = [os.open(os.devnull, os.O_RDONLY) for _ in range(others)]
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(message)s")
    from threads.messages import Message
    from threads.store.base import StoreOptions
    from threads.store.entries import Header, MessageEntry
    from threads.store.jsonl import JsonlStore

    async def main():
        store = JsonlStore(root, StoreOptions(fsync="on_flush"))
        ids = [f"s_{n}" for n in range(sessions)]
        try:
            for session in ids:
                await store.create(Header(id=session))
                if leased:
                    await store.acquire(session, object())
            for session in ids:
                await store.append(session, [MessageEntry(id="e_1", message=Message.user("x"))])
            for session in ids:
                assert len((await store.load(session)).entries) == 1
            print("ok", resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        except OSError as exc:
            print("error", exc)
        finally:
            await store.close()

    asyncio.run(main())
    """
)


async def run_many_sessions(
    root: Path, soft: int, hard: int, sessions: int, *, leased: bool = True, others: int = 0
) -> tuple[str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        MANY_SESSIONS,
        str(root),
        str(soft),
        str(hard),
        str(sessions),
        "leased" if leased else "plain",
        str(others),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    out, err = await asyncio.wait_for(proc.communicate(), 50)
    assert proc.returncode == 0, err.decode()
    return out.decode().strip(), err.decode()


async def test_four_hundred_leased_sessions_work_under_a_soft_limit_of_256(
    tmp_path: Path,
) -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 1024:
        pytest.skip(f"the hard open-files limit here is {hard}: there is nothing to raise to")
    out, err = await run_many_sessions(tmp_path / "sessions", 256, hard, 400)
    assert out.startswith("ok"), out
    assert int(out.split()[1]) > 400  # the store raised the soft limit when it opened
    assert "raised the open-files limit (RLIMIT_NOFILE) from 256" in err


async def test_running_out_of_descriptors_is_an_error_naming_the_limit(tmp_path: Path) -> None:
    out, _ = await run_many_sessions(tmp_path / "sessions", 256, 256, 400)
    assert out.startswith("error"), out
    assert "open-files limit (RLIMIT_NOFILE 256, hard limit 256)" in out
    assert "leased" in out
    assert "ulimit -n" in out


async def test_at_the_limit_sessions_without_a_lease_are_closed_to_make_room(
    tmp_path: Path,
) -> None:
    # The rest of the process holds 150 of 256: the writer's budget (half) is too
    # much, and it learns so at the limit, leaving descriptors for readers.
    root = tmp_path / "sessions"
    out, err = await run_many_sessions(root, 256, 256, 400, leased=False, others=150)
    assert out.startswith("ok"), out
    assert "out of file descriptors opening session" in err


def create_again_on_the_same_inode(path: Path, kept: Path, data: bytes) -> None:
    """Create a session file again at ``path`` with ``data``, on the inode ``kept`` holds.

    This is what ext4 does when it hands a deleted session's inode to the next
    file created under its id — only on purpose, so a test need not hope for
    it: ``kept`` is a second link that kept the inode alive through the delete.
    """
    with kept.open("r+b") as f:
        f.truncate(0)
        f.write(data)
    os.link(kept, path)
    os.unlink(kept)


async def test_list_does_not_trust_an_inode_number_a_new_session_reuses(tmp_path: Path) -> None:
    root = tmp_path / "sessions"
    store = JsonlStore(root)
    old = header(created=at(1), key="old")
    await store.create(old)
    await store.append(old.id, [msg("old")])
    assert (await store.list()).sessions == [old]
    path, kept = root / f"{old.id}.jsonl", tmp_path / "kept"
    inode = path.stat().st_ino
    os.link(path, kept)
    await store.delete(old.id)
    again = header(old.id, created=at(2), key="again")
    create_again_on_the_same_inode(path, kept, encode_header(again))
    assert path.stat().st_ino == inode
    assert (await store.list()).sessions == [again]
    await store.close()


async def test_a_watcher_ends_when_its_session_is_created_again_on_the_same_inode(
    tmp_path: Path,
) -> None:
    root = tmp_path / "sessions"
    writer = JsonlStore(root)
    reader = JsonlStore(root, poll_interval=3600)  # it looks again only when woken
    h = header()
    await writer.create(h)
    await writer.append(h.id, [msg("1"), msg("2")])
    stream = reader.watch(h.id)
    assert texts([await anext(stream), await anext(stream)]) == ["1", "2"]
    pending = asyncio.ensure_future(anext(stream))
    path, kept = root / f"{h.id}.jsonl", tmp_path / "kept"
    os.link(path, kept)
    await writer.delete(h.id)
    # Created again, header and all, with a longer history, on the old inode.
    history = b"".join(encode_batch([msg(str(n))]) for n in (3, 4, 5))
    create_again_on_the_same_inode(path, kept, encode_header(h) + history)
    assert not pending.done()
    await reader.create(header())  # a write of its own wakes the reader's watchers
    with pytest.raises(NotFoundError, match=h.id):
        await asyncio.wait_for(pending, 10)
    await writer.close()
    await reader.close()


async def test_a_torn_tail_is_truncated_in_the_file_by_the_next_writer(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    h = header()
    await store.create(h)
    await store.append(h.id, [msg("one")])
    await store.close()
    path = tmp_path / f"{h.id}.jsonl"
    whole = path.read_bytes()
    with path.open("ab") as f:
        f.write(b'{"type":"message","id":"e_cut","crea')
    writer = JsonlStore(tmp_path)
    await writer.acquire(h.id, object())
    assert path.read_bytes() == whole  # repaired when the lock is taken, before any append
    await writer.append(h.id, [msg("two")])
    assert path.read_bytes().startswith(whole)
    assert path.read_bytes().count(b"\n") == 3
    await writer.close()


async def test_the_key_index_is_rebuilt_from_headers_when_its_journal_is_missing(
    tmp_path: Path,
) -> None:
    from tests.threads.store.helpers import at

    store = JsonlStore(tmp_path)
    old, new, other = (
        header(created=at(1), key="telegram:1"),
        header(created=at(2), key="telegram:1"),
        header(created=at(3), key="cli"),
    )
    for h in (old, new, other):
        await store.create(h)
    await store.close()
    assert not (tmp_path / JOURNAL).exists()
    reopened = JsonlStore(tmp_path)
    assert await reopened.resolve("telegram:1") == new.id  # the newest session of the key
    assert await reopened.keys() == {"telegram:1": new.id, "cli": other.id}
    await reopened.point("telegram:1", old.id)
    await reopened.close()
    assert (tmp_path / JOURNAL).exists()
    third = JsonlStore(tmp_path)
    assert await third.resolve("telegram:1") == old.id
    await third.close()


async def test_the_key_journal_is_compacted_when_it_bloats(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path, StoreOptions(fsync="on_flush"))
    h = header()
    await store.create(h)
    for _ in range(300):
        await store.point("cli", h.id)
    await store.close()
    assert (tmp_path / JOURNAL).read_bytes().count(b"\n") == 300
    again = JsonlStore(tmp_path)
    await again.point("web:1", h.id)  # the writer opens the journal, sees the bloat
    await again.close()
    assert (tmp_path / JOURNAL).read_bytes().count(b"\n") == 2
    third = JsonlStore(tmp_path)
    assert await third.keys() == {"cli": h.id, "web:1": h.id}
    await third.close()


async def test_a_second_store_cannot_write_the_key_index(tmp_path: Path) -> None:
    first, second = JsonlStore(tmp_path), JsonlStore(tmp_path)
    await first.point("cli", "s_1")
    with pytest.raises(LockedError, match="key index"):
        await second.point("cli", "s_2")
    await first.close()
    await second.close()


def test_open_store_picks_the_backend_by_scheme(tmp_path: Path) -> None:
    from threads.store.memory import MemoryStore
    from threads.store.redis import RedisStore
    from threads.store.sqlite import SqliteStore

    assert isinstance(open_store("memory://"), MemoryStore)
    assert isinstance(open_store(f"jsonl://{tmp_path}"), JsonlStore)
    assert isinstance(open_store(f"sqlite:///{tmp_path}/g.db"), SqliteStore)
    assert isinstance(open_store("redis://127.0.0.1:6379/1"), RedisStore)
    with pytest.raises(ValueError, match="unknown store scheme 'mongodb'"):
        open_store("mongodb://x")
    with pytest.raises(ValueError, match="no scheme"):
        open_store("./data/sessions")


async def test_temporary_files_a_killed_writer_left_are_swept_old_ones_only(
    tmp_path: Path,
) -> None:
    # A create or a checkpoint's write killed mid-way leaves a ".<id>.<random>.tmp".
    root = tmp_path / "sessions"
    (root / "checkpoints").mkdir(parents=True)
    old = [root / ".s_old.1a2b.tmp", root / "checkpoints" / ".s_old.3c4d.tmp"]
    fresh = [root / ".s_new.5e6f.tmp", root / "checkpoints" / ".s_new.7a8b.tmp"]
    for path in [*old, *fresh]:
        path.write_bytes(b"half")
    day_ago = time.time() - 86_400
    for path in old:
        os.utime(path, (day_ago, day_ago))
    store = JsonlStore(root)
    await store.create(header())
    await store.close()
    assert [path.exists() for path in old] == [False, False]
    assert [path.exists() for path in fresh] == [True, True]  # another writer's, maybe
