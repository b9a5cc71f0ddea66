"""This process's identity among the gateways sharing one store: a node id and a boot count.

The node id is stable across restarts: given in the configuration
(``[cluster] node_id``) or generated once and kept in the data directory, so
a gateway that restarts finds the wakes that were sent to it before it died
and the keys it owned. The boot counter goes up by one at every start, so
two lives of one node are told apart (in logs, in ``gateway nodes``).
"""

from __future__ import annotations

import re
import secrets
import socket
from dataclasses import dataclass
from pathlib import Path

import orjson

from threads.store.private import make_private_dir, read_private, write_private

NODE_FILE = "node.json"
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeIdentity:
    """A node id and which start of that node this is (1 for the first)."""

    node_id: str
    boot: int

    @classmethod
    def load(cls, state_dir: Path, configured: str = "") -> NodeIdentity:
        """This start's identity, recorded in ``state_dir``: the boot counter goes up by one.

        ``configured`` wins over a kept id (an operator renaming a node); with
        neither, a new id is made from the host name and a random suffix.
        """
        path = state_dir / NODE_FILE
        kept: dict[str, object] = {}
        try:
            record = orjson.loads(read_private(path))
            if isinstance(record, dict):
                kept = record
        except FileNotFoundError:
            pass
        except orjson.JSONDecodeError:
            kept = {}  # a torn record: a new id is better than none
        node_id = configured or str(kept.get("node_id") or "") or new_node_id()
        previous = kept.get("boot") if kept.get("node_id") == node_id else 0
        boot = (previous if isinstance(previous, int) else 0) + 1
        make_private_dir(state_dir)
        write_private(path, orjson.dumps({"node_id": node_id, "boot": boot}))
        return cls(node_id=node_id, boot=boot)

    def __str__(self) -> str:
        return f"{self.node_id}#{self.boot}"


def new_node_id() -> str:
    """A readable, unique node id: the host name and six random hex digits."""
    host = _UNSAFE.sub("-", socket.gethostname()).strip("-")[:40] or "node"
    return f"{host}-{secrets.token_hex(3)}"
