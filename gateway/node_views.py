"""The gateway nodes as text: ``gateway nodes``, and the node and cluster parts of ``health``."""

from __future__ import annotations

import time
from typing import Any

from gateway.cli_kit import duration_text

KEYS_SHOWN = 8


def node_lines(info: dict[str, Any]) -> list[str]:
    """``health``'s node section: this process's id, boot and part in the cluster."""
    node = info["node"]
    line = f"node: {node.get('id', '?')} (boot {node.get('boot', '?')})"
    if "keys_owned" in node:
        line += f", owns {node['keys_owned']} keys"
        leads = node.get("leads") or []
        line += f", leads {', '.join(leads)}" if leads else ", leads nothing"
        if node.get("draining"):
            line += ", draining"
    return [line]


def cluster_lines(view: dict[str, Any], where: str = "") -> list[str]:
    """Every node (alive or gone), what it leads and the keys it owns; lapsed leases last."""
    head = "cluster" + (f" on {where}" if where else "")
    lines = [f"{head} (leases last {view.get('lease_seconds', '?')} s):"]
    now = time.time()
    for row in view.get("nodes", []):
        state = "alive" if row.get("alive") else "gone"
        if row.get("draining"):
            state = "draining"
        bits = [f"  {row.get('node', '?'):<14} {state:<8}"]
        if row.get("boot"):
            bits.append(f"boot {row['boot']}")
        if row.get("pid"):
            bits.append(f"pid {row['pid']} on {row.get('host', '?')}")
        if row.get("started"):
            bits.append(f"up {duration_text(max(0.0, now - float(row['started'])))}")
        if "thread_count" in row:
            running = sum(t.get("state") == "running" for t in row.get("threads", []))
            bits.append(f"{row['thread_count']} threads, {running} running")
        leads = row.get("leads") or []
        if leads:
            bits.append(f"leads {', '.join(leads)}")
        lines.append("  ".join(bits))
        keys = sorted(row.get("keys", []))
        if keys:
            shown = ", ".join(keys[:KEYS_SHOWN])
            more = f" and {len(keys) - KEYS_SHOWN} more" if len(keys) > KEYS_SHOWN else ""
            lines.append(f"      owns {len(keys)} keys: {shown}{more}")
    lapsed = view.get("lapsed_leases") or []
    if lapsed:
        lines.append("  lapsed, not yet taken over:")
        for lease in lapsed:
            ago = -float(lease.get("expires_in_seconds", 0.0))
            lines.append(
                f"    {lease.get('name')} (node {lease.get('node')}, "
                f"lapsed {duration_text(max(0.0, ago))} ago)"
            )
    return lines
