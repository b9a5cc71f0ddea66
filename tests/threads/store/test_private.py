"""What the store keeps on disk is private: files 0600, directories 0700, links never followed."""

from __future__ import annotations

import logging
import os
import sqlite3
import stat
from pathlib import Path

import pytest

from tests.threads.store.helpers import header, msg
from threads.errors import UnsafePathError
from threads.recovery import RecoveryLog
from threads.store.jsonl import JsonlStore
from threads.store.keyfile import JOURNAL
from threads.store.memory import MemoryStore
from threads.store.private import dir_problem, make_private_dir
from threads.store.sqlite import SqliteStore

SECRET = b"the target of a planted link: never read, never written\n"


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture(autouse=True)
def loose_umask() -> object:
    """The common umask (0022) would make new files 0644 and directories 0755."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def planted(tmp_path: Path) -> Path:
    target = tmp_path / "elsewhere" / "precious.txt"
    target.parent.mkdir()
    target.write_bytes(SECRET)
    return target


async def test_jsonl_files_are_0600_and_their_directories_0700_under_a_loose_umask(
    tmp_path: Path,
) -> None:
    root = tmp_path / "new" / "sessions"
    store = JsonlStore(root)
    try:
        h = header(key="cli")
        await store.create(h)
        await store.append(h.id, [msg("hi")])
        await store.point("cli", h.id)
    finally:
        await store.close()
    assert mode(root) == 0o700
    assert mode(root.parent) == 0o700  # a parent the store created is private too
    assert mode(root / f"{h.id}.jsonl") == 0o600
    assert mode(root / JOURNAL) == 0o600


async def test_a_session_file_planted_as_a_link_is_refused_and_its_target_untouched(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "sessions"
    store = JsonlStore(root)
    try:
        real = header()
        await store.create(real)
        target = planted(tmp_path)
        linked = header()
        os.symlink(target, root / f"{linked.id}.jsonl")
        with pytest.raises(UnsafePathError, match="symbolic link"):
            await store.load(linked.id)
        with pytest.raises(UnsafePathError, match="symbolic link"):
            await store.append(linked.id, [msg("written through the link?")])
        with caplog.at_level(logging.WARNING):
            page = await store.list()
    finally:
        await store.close()
    assert [s.id for s in page.sessions] == [real.id]
    assert "symbolic link" in caplog.text
    assert target.read_bytes() == SECRET


async def test_a_key_index_planted_as_a_link_is_refused_and_its_target_untouched(
    tmp_path: Path,
) -> None:
    root = tmp_path / "sessions"
    root.mkdir(mode=0o700)
    target = planted(tmp_path)
    os.symlink(target, root / JOURNAL)
    store = JsonlStore(root)
    try:
        h = header()
        await store.create(h)
        with pytest.raises(UnsafePathError, match="symbolic link"):
            await store.point("cli", h.id)
        with pytest.raises(UnsafePathError):
            await store.resolve("cli")
    finally:
        await store.close()
    assert target.read_bytes() == SECRET


async def test_a_session_directory_that_is_a_link_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "sessions").symlink_to(real)
    store = JsonlStore(tmp_path / "sessions")
    try:
        with pytest.raises(UnsafePathError, match="symbolic link"):
            await store.create(header())
        with pytest.raises(UnsafePathError, match="symbolic link"):
            await store.list()
    finally:
        await store.close()
    assert list(real.iterdir()) == []


async def test_sqlite_session_file_and_its_wal_are_0600_from_the_start(tmp_path: Path) -> None:
    path = tmp_path / "db" / "sessions.db"
    store = SqliteStore(path)
    try:
        h = header()
        await store.create(h)
        await store.append(h.id, [msg("hi")])
        # Checked while open (mode() fails on a missing file): SQLite removes them at close.
        assert mode(Path(f"{path}-wal")) == 0o600
        assert mode(Path(f"{path}-shm")) == 0o600
    finally:
        await store.close()
    assert mode(path) == 0o600
    assert mode(path.parent) == 0o700


async def test_a_sqlite_file_an_older_build_left_0644_is_tightened(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    sqlite3.connect(path).close()
    assert mode(path) == 0o644
    store = SqliteStore(path)
    try:
        await store.create(header())
    finally:
        await store.close()
    assert mode(path) == 0o600


async def test_a_sqlite_file_planted_as_a_link_is_refused_and_its_target_untouched(
    tmp_path: Path,
) -> None:
    target = planted(tmp_path)
    (tmp_path / "sessions.db").symlink_to(target)
    store = SqliteStore(tmp_path / "sessions.db")
    try:
        with pytest.raises(UnsafePathError, match="symbolic link"):
            await store.create(header())
    finally:
        await store.close()
    assert target.read_bytes() == SECRET


async def test_the_recovery_record_is_0600_in_a_0700_directory(tmp_path: Path) -> None:
    log = RecoveryLog(tmp_path / "data" / "state" / "recovery.json")
    await log.begin(MemoryStore())
    await log.end(["cli"])
    assert mode(tmp_path / "data" / "state") == 0o700
    assert mode(tmp_path / "data" / "state" / "recovery.json") == 0o600


async def test_a_recovery_record_planted_as_a_link_is_replaced_not_followed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    target = planted(tmp_path)
    (state / "recovery.json").symlink_to(target)
    log = RecoveryLog(state / "recovery.json")
    with caplog.at_level(logging.WARNING):
        await log.begin(MemoryStore())
    await log.end([])
    assert "symbolic link" in caplog.text
    assert target.read_bytes() == SECRET
    assert not (state / "recovery.json").is_symlink()
    assert mode(state / "recovery.json") == 0o600


def test_a_directory_open_to_others_is_named_with_the_fix(tmp_path: Path) -> None:
    loose = tmp_path / "data"
    loose.mkdir(mode=0o755)
    os.chmod(loose, 0o755)
    assert dir_problem(loose) == f"is open to other users (mode 0755): chmod 700 {loose}"
    os.chmod(loose, 0o700)
    assert dir_problem(loose) is None
    (tmp_path / "link").symlink_to(loose)
    assert "symbolic link" in (dir_problem(tmp_path / "link") or "")


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory away takes root")
def test_a_directory_of_another_user_is_named(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, 65534, 65534)
    assert "owned by uid 65534" in (dir_problem(theirs) or "")


def test_making_a_private_directory_refuses_a_link_in_its_place(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "data").symlink_to(real)
    with pytest.raises(UnsafePathError, match="symbolic link"):
        make_private_dir(tmp_path / "data")
