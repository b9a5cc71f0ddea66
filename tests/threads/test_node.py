"""The node identity: an id kept in the data directory, a boot counter, one live process."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest

from threads.errors import NodeBusyError
from threads.node import NodeIdentity, claim_node


def test_the_node_id_is_kept_and_every_start_is_a_new_boot(tmp_path: Path) -> None:
    first = claim_node(tmp_path / "state")
    first.close()
    second = claim_node(tmp_path / "state")
    second.close()
    assert second.identity.node_id == first.identity.node_id
    assert (first.identity.boot, second.identity.boot) == (1, 2)
    record = orjson.loads((tmp_path / "state" / "node.json").read_bytes())
    assert record == {"node_id": first.identity.node_id, "boot": 2}
    assert (tmp_path / "state" / "node.json").stat().st_mode & 0o777 == 0o600


def test_a_second_live_process_on_the_node_is_refused_naming_the_holder(tmp_path: Path) -> None:
    held = claim_node(tmp_path / "state")
    try:
        with pytest.raises(NodeBusyError, match=f"process {os.getpid()} is already running"):
            claim_node(tmp_path / "state")
    finally:
        held.close()
    claim_node(tmp_path / "state").close()  # once let go, the next start gets it


def test_a_configured_node_id_names_the_locks(tmp_path: Path) -> None:
    claim = claim_node(tmp_path / "state", node_id="edge-1")
    claim.close()
    assert claim.identity == NodeIdentity(node_id="edge-1", boot=1)


def test_a_damaged_node_record_gives_a_new_node_not_a_failed_start(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir(mode=0o700)
    (tmp_path / "state" / "node.json").write_bytes(b"{not json")
    claim = claim_node(tmp_path / "state")
    claim.close()
    assert claim.identity.boot == 1
    assert claim.identity.node_id.startswith("n_")


def test_only_an_earlier_boot_of_the_same_node_counts_as_gone() -> None:
    me = NodeIdentity(node_id="n_a", boot=3)
    assert me.left_by_earlier_boot("n_a/2/f00d")
    assert not me.left_by_earlier_boot("n_a/3/f00d")  # this boot: another store of this process
    assert not me.left_by_earlier_boot("n_a/4/f00d")
    assert not me.left_by_earlier_boot("n_b/1/f00d")  # another node may be alive
    assert not me.left_by_earlier_boot("0123456789abcdef01234567")  # an older build's token
