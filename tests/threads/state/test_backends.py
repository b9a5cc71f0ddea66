"""What one backend promises beyond the conformance suite: files, prefixes, Redis expiry."""

from __future__ import annotations

import contextlib
import os
import secrets
import sqlite3
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from cron.models import Job
from cron.store import open_store as open_cron_store
from tests.conftest import require_service
from tests.threads.store.conftest import REDIS_DB, REDIS_HOST, REDIS_PORT, REDIS_URL, delete_prefix
from threads.state import StateStoreError, open_state_store
from threads.state.redis import DEFAULT_PREFIX, RedisStateStore, split_address


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_the_sqlite_file_is_created_private_in_a_private_directory(tmp_path: Path) -> None:
    path = tmp_path / "data" / "gateway.db"
    store = await open_state_store(f"sqlite:///{path}")
    try:
        await store.put("ns", "k", 1)
    finally:
        await store.close()
    assert mode(path) == 0o600
    assert mode(path.parent) == 0o700


async def test_an_existing_sqlite_file_is_made_private(tmp_path: Path) -> None:
    path = tmp_path / "gateway.db"
    path.touch(mode=0o644)
    os.chmod(path, 0o644)
    store = await open_state_store(f"sqlite:///{path}")
    await store.close()
    assert mode(path) == 0o600


async def test_a_sqlite_path_that_is_a_symbolic_link_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.db"
    target.touch()
    link = tmp_path / "gateway.db"
    link.symlink_to(target)
    with pytest.raises(StateStoreError, match="symbolic link"):
        await open_state_store(f"sqlite:///{link}")


async def test_state_and_cron_jobs_share_one_gateway_db(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'gateway.db'}"
    state = await open_state_store(url)
    try:
        async with open_cron_store(url) as cron:
            now = datetime.now(UTC)
            job = Job(id="j", kind="every", every="1h", task="t", created=now, updated=now)
            await cron.upsert(job, next_fire=None)
            await state.put("ns", "k", "v")
            assert [j.id for j in await cron.jobs()] == ["j"]
        assert await state.get("ns", "k") == "v"
    finally:
        await state.close()


async def test_an_unknown_scheme_is_refused_naming_the_schemes() -> None:
    with pytest.raises(StateStoreError, match="sqlite:///PATH"):
        await open_state_store("jsonl://./data")


@pytest.mark.parametrize(
    ("url", "address", "prefix"),
    [
        ("redis://h:6379/0", "redis://h:6379/0", None),
        ("redis://h:6379/0?cron_prefix=staging:cron:", "redis://h:6379/0", "staging:state:"),
        (
            "redis://h/0?cron_prefix=a:&ssl_cert_reqs=none",
            "redis://h/0?ssl_cert_reqs=none",
            "a:state:",
        ),
    ],
)
def test_a_cron_prefix_in_the_url_gives_the_state_its_own_prefix_beside_it(
    url: str, address: str, prefix: str | None
) -> None:
    assert split_address(url) == (address, prefix)


async def test_redis_keys_live_under_the_prefix_and_a_put_without_expiry_clears_one() -> None:
    require_service("redis", REDIS_HOST, REDIS_PORT)
    prefix = f"test-state-{secrets.token_hex(8)}:"
    store = await RedisStateStore.open(REDIS_URL, prefix=prefix)
    raw = aioredis.Redis(host=REDIS_HOST, port=REDIS_PORT, db=REDIS_DB)
    try:
        await store.put("ns", "k", 1, expires=datetime.now(UTC) + timedelta(hours=1))
        assert await raw.pttl(f"{prefix}v:ns:k") > 0
        await store.put("ns", "k", 2)
        assert await raw.pttl(f"{prefix}v:ns:k") == -1
        keys = {key.decode() async for key in raw.scan_iter(match=f"{prefix}*")}
        assert keys == {f"{prefix}v:ns:k", f"{prefix}i:ns", f"{prefix}namespaces"}
    finally:
        await store.close()
        await raw.aclose()
        await delete_prefix(prefix)


async def test_redis_without_a_prefix_uses_the_default() -> None:
    require_service("redis", REDIS_HOST, REDIS_PORT)
    store = await RedisStateStore.open(REDIS_URL)
    try:
        assert store.prefix == DEFAULT_PREFIX
    finally:
        await store.close()


async def test_an_unreachable_redis_is_one_error_naming_the_redacted_url() -> None:
    with pytest.raises(StateStoreError) as caught:
        await open_state_store("redis://:hunter2@127.0.0.1:9/0")
    assert "hunter2" not in str(caught.value)
    assert "cannot reach Redis" in str(caught.value)


async def test_the_sqlite_file_runs_in_wal_mode_so_the_cli_and_a_gateway_share_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "gateway.db"
    store = await open_state_store(f"sqlite:///{path}")
    await store.close()
    again = await open_state_store(f"sqlite:///{path}")  # already WAL: opened without a switch
    await again.close()
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
