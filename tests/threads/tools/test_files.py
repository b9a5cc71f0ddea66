"""The files tools: an agent's own workspace, and every way out of it refused."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tests.threads.tools.conftest import Caller, tools_config


@pytest.fixture
def call(tmp_path: Path) -> Caller:
    return Caller(tools_config(tmp_path))


async def test_a_written_file_reads_back_and_lists_in_the_agents_workspace(
    tmp_path: Path, call: Caller
) -> None:
    wrote = await call("write_file", path="notes/todo.md", content="buy milk\n")
    assert not wrote.is_error, wrote.content
    assert (
        await call("write_file", path="notes/todo.md", content="call mum\n", append=True)
    ).content == ("appended 9 bytes to notes/todo.md (now 18 bytes)")
    read = await call("read_file", path="notes/todo.md")
    assert read.content == "buy milk\ncall mum\n"
    listing = await call("list_files", recursive=True)
    assert listing.content == "notes/\nnotes/todo.md  18 bytes"
    workspace = tmp_path / "data" / "workspaces" / "default"
    assert (workspace / "notes" / "todo.md").read_text() == "buy milk\ncall mum\n"
    assert stat.S_IMODE(workspace.stat().st_mode) == 0o700
    assert stat.S_IMODE((workspace / "notes").stat().st_mode) == 0o700
    assert stat.S_IMODE((workspace / "notes" / "todo.md").stat().st_mode) == 0o600


async def test_each_agent_has_its_own_workspace_and_one_may_be_placed_in_config(
    tmp_path: Path,
) -> None:
    config = tools_config(
        tmp_path,
        agents={"default": {}, "coder": {"workspace": str(tmp_path / "code")}},
    )
    await Caller(config, "default")("write_file", path="a.txt", content="mine")
    await Caller(config, "coder")("write_file", path="a.txt", content="theirs")
    assert (tmp_path / "data" / "workspaces" / "default" / "a.txt").read_text() == "mine"
    assert (tmp_path / "code" / "a.txt").read_text() == "theirs"
    assert (await Caller(config, "coder")("read_file", path="a.txt")).content == "theirs"


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("../outside.txt", "leads out of your workspace"),
        ("notes/../../outside.txt", "leads out of your workspace"),
        ("/etc/passwd", "is absolute"),
    ],
)
async def test_paths_that_escape_the_workspace_are_refused(
    tmp_path: Path, call: Caller, path: str, says: str
) -> None:
    (tmp_path / "data").mkdir(mode=0o700)
    (tmp_path / "data" / "outside.txt").write_text("secret")
    for output in (
        await call("read_file", path=path),
        await call("write_file", path=path, content="x"),
        await call("list_files", path=path),
    ):
        assert output.is_error
        assert says in output.content
    assert (tmp_path / "data" / "outside.txt").read_text() == "secret"


async def test_symbolic_links_are_never_followed_out_of_the_workspace(
    tmp_path: Path, call: Caller
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    await call("write_file", path="keep.txt", content="x")
    workspace = tmp_path / "data" / "workspaces" / "default"
    os.symlink(outside, workspace / "linked_dir")
    os.symlink(outside / "secret.txt", workspace / "linked_file")

    for output in (
        await call("read_file", path="linked_file"),
        await call("read_file", path="linked_dir/secret.txt"),
        await call("write_file", path="linked_dir/new.txt", content="x"),
        await call("write_file", path="linked_file", content="overwritten"),
        await call("list_files", path="linked_dir"),
    ):
        assert output.is_error
        assert "is a symbolic link; links are not followed" in output.content
    assert (outside / "secret.txt").read_text() == "secret"
    assert not (outside / "new.txt").exists()
    listing = await call("list_files", recursive=True)
    assert "linked_dir  (link)" in listing.content
    assert "secret.txt" not in listing.content


async def test_reads_are_capped_and_say_how_to_read_on(tmp_path: Path) -> None:
    call = Caller(tools_config(tmp_path, tools={"files": {"max_read_bytes": 10}}))
    await call("write_file", path="long.txt", content="0123456789abcdefghij")
    first = await call("read_file", path="long.txt")
    assert first.content == (
        "0123456789\n[bytes 0-10 of 20; call read_file with offset=10 for more]"
    )
    rest = await call("read_file", path="long.txt", offset=10)
    assert rest.content == "abcdefghij\n[bytes 10-20 of 20]"


async def test_writes_over_the_cap_are_refused_and_nothing_is_written(tmp_path: Path) -> None:
    call = Caller(tools_config(tmp_path, tools={"files": {"max_write_bytes": 5}}))
    output = await call("write_file", path="big.txt", content="123456")
    assert output.is_error
    assert "over the cap of 5 ([tools.files] max_write_bytes)" in output.content
    assert (
        await call("read_file", path="big.txt")
    ).content == "'big.txt' does not exist in your workspace"


async def test_listings_stop_at_the_cap_and_say_so(tmp_path: Path) -> None:
    call = Caller(tools_config(tmp_path, tools={"files": {"max_list_entries": 2}}))
    for name in "abc":
        await call("write_file", path=f"{name}.txt", content=name)
    listing = await call("list_files")
    assert (
        listing.content
        == "a.txt  1 bytes\nb.txt  1 bytes\n[more entries not shown: the listing stops at 2]"
    )


async def test_binary_files_are_not_shown_as_text(tmp_path: Path, call: Caller) -> None:
    await call("write_file", path="x", content="")
    (tmp_path / "data" / "workspaces" / "default" / "blob.bin").write_bytes(b"\x00\x01\x02")
    output = await call("read_file", path="blob.bin")
    assert output.is_error
    assert "binary file (3 bytes)" in output.content
