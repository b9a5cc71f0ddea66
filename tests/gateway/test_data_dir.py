"""The data directory is private: made 0700, refused when open to others, linked or foreign;
a store that cannot be reached stops the start in one line."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.app import Gateway
from gateway.errors import StartupError
from tests.gateway.conftest import Replies, make_config

GATEWAY = [sys.executable, "-m", "gateway"]


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def gateway_run(tmp_path: Path, toml: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "gateway.toml").write_text(toml)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    return subprocess.run(
        [*GATEWAY, "run", "--config", str(tmp_path / "gateway.toml")],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60, check=False,
    )  # fmt: skip


@pytest.fixture(autouse=True)
def loose_umask() -> object:
    old = os.umask(0o022)
    yield
    os.umask(old)


async def test_after_a_run_every_data_file_is_0600_and_every_directory_0700(
    tmp_path: Path,
) -> None:
    config = make_config(tmp_path)
    async with Gateway(config) as gw:
        assert gw.cli is not None
        replies = Replies()
        gw.cli.listeners.append(replies)
        await gw.cli.submit("hello")
        await replies.wait()
        data = config.data_dir
        # cron's SQLite file and its side files, while the gateway holds them open
        for name in ("gateway.db", "gateway.db-wal", "gateway.db-shm"):
            assert mode(data / name) == 0o600, name
    files = [p for p in data.rglob("*") if p.is_file() and not p.is_socket()]
    dirs = [data, *(p for p in data.rglob("*") if p.is_dir())]
    assert {p.name for p in files} >= {"gateway.db", "recovery.json", ".keys.jsonl"}
    assert any(p.suffix == ".jsonl" and p.name.startswith("s_") for p in files)
    assert {p.relative_to(data).as_posix(): mode(p) for p in files} == {
        p.relative_to(data).as_posix(): 0o600 for p in files
    }
    assert {p.as_posix(): mode(p) for p in dirs} == {p.as_posix(): 0o700 for p in dirs}


def test_a_data_dir_open_to_others_refuses_the_start_in_one_line(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    os.chmod(data, 0o755)
    result = gateway_run(
        tmp_path, f'data_dir = "{data}"\n[store]\nurl = "jsonl://{data}/sessions"\n'
    )
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"error: data_dir: {data} is open to other users (mode 0755): chmod 700 {data}"
    ]
    assert list(data.iterdir()) == []  # nothing was written into it


def test_a_session_directory_open_to_others_refuses_the_start(tmp_path: Path) -> None:
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    os.chmod(sessions, 0o750)
    config = make_config(tmp_path, store={"url": f"jsonl://{sessions}"})
    with pytest.raises(StartupError, match=rf"store.url: {sessions} .*chmod 700 {sessions}"):
        Gateway(config)._prepare_directories()


async def test_a_data_dir_that_is_a_link_refuses_the_start(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "data").symlink_to(real)
    gateway = Gateway(make_config(tmp_path))
    with pytest.raises(StartupError, match=r"^data_dir: .*/data is a symbolic link"):
        await gateway.start()
    assert list(real.iterdir()) == []


async def test_a_session_file_replaced_by_a_link_is_set_aside_and_not_followed(
    tmp_path: Path,
) -> None:
    config = make_config(tmp_path)
    async with Gateway(config) as gw:
        assert gw.cli is not None
        replies = Replies()
        gw.cli.listeners.append(replies)
        await gw.cli.submit("hello")
        await replies.wait()
    (session,) = (config.data_dir / "sessions").glob("s_*.jsonl")
    target = tmp_path / "elsewhere.jsonl"
    session.rename(target)
    before = target.read_bytes()
    session.symlink_to(target)
    (config.data_dir / "state" / "recovery.json").write_text('{"clean": false}')
    async with Gateway(config) as gw:
        (quarantined,) = (await gw.manager.health())["sessions"]["quarantined"]
        assert quarantined["reason"].startswith(f"{session} is a symbolic link")
    assert target.read_bytes() == before


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory away takes root")
async def test_a_data_dir_of_another_user_refuses_the_start(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    os.chown(data, 65534, 65534)
    with pytest.raises(StartupError, match="owned by uid 65534"):
        await Gateway(make_config(tmp_path)).start()


def test_an_unreachable_session_redis_is_one_line_naming_the_redacted_url(
    tmp_path: Path,
) -> None:
    result = gateway_run(
        tmp_path,
        f'data_dir = "{tmp_path / "data"}"\n'
        '[store]\nurl = "redis://:s3cretpw@127.0.0.1:1/0"\n[channels.web]\nenabled = false\n',
    )
    assert result.returncode == 1
    (line,) = result.stderr.splitlines()
    assert line.startswith(
        "error: store.url: the session store redis://:***@127.0.0.1:1/0 cannot be reached: "
    )
    assert "s3cretpw" not in result.stdout + result.stderr


def test_an_unreachable_state_redis_is_one_line_naming_the_redacted_url(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    result = gateway_run(
        tmp_path,
        f'data_dir = "{data}"\n[store]\nurl = "jsonl://{data}/sessions"\n'
        'state_url = "redis://:s3cretpw@127.0.0.1:1/0"\n[channels.web]\nenabled = false\n',
    )
    assert result.returncode == 1
    (line,) = result.stderr.splitlines()
    # Pairing opens the state store before cron does; either names the setting and URL.
    assert line.startswith(
        "error: store.state_url: state store redis://:***@127.0.0.1:1/0: cannot reach Redis"
    )
