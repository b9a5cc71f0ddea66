"""``gateway nodes`` and ``gateway drain``: the gateways sharing one Redis, for operators.

``nodes`` asks the running gateway, or — with none running here — reads the
cluster's leases and node records from Redis itself, so an operator can look
from any machine with the configuration. ``drain`` asks the running gateway
to hand its work to the other nodes and stop, and waits until it has.
"""

from __future__ import annotations

import asyncio
from typing import Any

import typer

from config import GatewayConfig
from gateway.cli_kit import App, ConfigOption, JsonOption, fail, load, print_json
from gateway.control import ControlClient
from gateway.errors import ControlError
from gateway.node_views import cluster_lines
from gateway.ops_cli import ask, no_gateway
from threads.errors import ThreadsError
from threads.store import check_reachable, open_store

DRAIN_MARGIN_SECONDS = 30.0


def register(app: App) -> None:
    app.command("nodes")(nodes)
    app.command("drain")(drain)


def nodes(config: ConfigOption = None, as_json: JsonOption = False) -> None:
    """The gateway processes on this Redis: alive or gone, their leases and the keys each owns."""
    settings = load(config)
    try:
        view = asyncio.run(_view(settings))
    except (ControlError, ThreadsError) as exc:
        fail(str(exc))
    if view is None:
        fail(
            f"sessions are not in Redis (store.url is {settings.store.safe_url}): this gateway "
            "runs on its own, with no other nodes; see docs/scale-out.md"
        )
    if as_json:
        print_json(view)
        return
    typer.echo("\n".join(cluster_lines(view, settings.store.safe_url)))


def drain(config: ConfigOption = None) -> None:
    """Hand this gateway's keys, cron and bots over to the other nodes, then stop it."""
    settings = load(config)
    try:
        answer = asyncio.run(ask(settings, "drain"))
    except ControlError as exc:
        fail(str(exc))
    if answer is None:
        fail(no_gateway(settings))
    if not answer.get("ok"):
        fail(str(answer.get("error")))
    leads = ", ".join(answer.get("leads", [])) or "nothing"
    typer.echo(
        f"node {answer['node']} is draining: it led {leads}, and hands over its "
        f"{answer['keys']} keys as its threads finish"
    )
    deadline = settings.threads.close_deadline_seconds + DRAIN_MARGIN_SECONDS
    try:
        asyncio.run(_wait_gone(settings, deadline))
    except TimeoutError:
        fail(f"node {answer['node']} is still running after {deadline:g} s; see its log")
    typer.echo(f"node {answer['node']} stopped; the other nodes have its work")


async def _view(settings: GatewayConfig) -> dict[str, Any] | None:
    answer = await ask(settings, "nodes")
    if answer is not None:
        cluster = answer.get("cluster")
        return dict(cluster) if isinstance(cluster, dict) else None
    from threads.cluster.leases import LeaseTable
    from threads.cluster.nodes import NodeBook, cluster_view
    from threads.store.redis import RedisStore

    store = open_store(settings.store.url)
    try:
        if not isinstance(store, RedisStore):
            return None
        await check_reachable(store)
        prefix = f"{store.prefix}cluster:"
        leases = LeaseTable(store.client, prefix, node="", ttl=settings.cluster.lease_seconds)
        view = await cluster_view(leases, NodeBook(store.client, prefix))
        return {"node": None, "lease_seconds": settings.cluster.lease_seconds, **view}
    finally:
        await store.close()


async def _wait_gone(settings: GatewayConfig, deadline: float) -> None:
    """Return once no gateway answers on this data directory's control socket."""
    async with asyncio.timeout(deadline):
        while True:
            client = await ControlClient.connect(settings.data_dir / "gateway.sock")
            if client is None:
                return
            await client.close()
            await asyncio.sleep(0.2)
