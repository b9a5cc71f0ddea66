"""The composition root: one :class:`Gateway` owns every lifetime.

    async with Gateway(config) as gw:
        await gw.serve_forever()

Start-up checks the data directories (private: see :mod:`gateway.preflight`),
then builds the store (and checks it can be reached), the models, the tools,
the agent loop, the thread manager, the control socket, the MCP servers, the
channels' access control (pairing, on the state store), the router and the
channels, in that order; a failure part way tears down what started, in
reverse. Close does the same. A start that cannot work raises
:class:`StartupError`: one line naming the setting, credentials redacted.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from aiohttp import web

from channels.access import Access
from channels.api import ApiChannel
from channels.base import Attached, Channel, ChannelSink
from channels.cli import CliChannel
from channels.errors import ChannelError, ChannelStartError, DeliveryError
from channels.pairing import PairingService
from channels.web import WebChannel
from config.models import GatewayConfig
from cron import CronService, connect_store
from cron.base import Clock
from cron.errors import StoreError as CronStoreError
from cron.heartbeat import Heartbeats
from cron.manager_waker import ManagerWaker
from gateway.approvals import ApprovalDesk
from gateway.arenas import FreedMemory
from gateway.channel_setup import (
    build_discord,
    build_telegram,
    channel_problems,
    webhook_account,
)
from gateway.chat_commands import COMMANDS, compact_command
from gateway.cron_tools import cron_tools
from gateway.errors import StartupError
from gateway.http.admin import AdminPart, AdminTokenError
from gateway.http.server import HttpServer
from gateway.lifetimes import Lifetimes
from gateway.metrics import Metrics, TimedModels
from gateway.preflight import directory_problems, make_data_dirs, port_in_use
from gateway.router import Router, endpoint_of
from gateway.scaleout import CRON, HEARTBEATS, lead_bots, member_for, node_health, stand_by
from threads import faults
from threads.agent.loop import AgentLoop
from threads.agent.models import Models, UnknownModelError
from threads.agent.pin_tool import pin_message_tool
from threads.agent.tools import Tool, ToolRegistry
from threads.approvals.gate import DurableApprovals
from threads.approvals.grants import GrantBook
from threads.approvals.service import ApprovalService
from threads.clock import MonotonicClock, WallClock
from threads.cluster.clock import LeaseClock, server_time
from threads.cluster.owner import ManagerOwner
from threads.cluster.relay import RelaySink
from threads.dispatch import dispatch_tool
from threads.errors import NodeBusyError, UnreachableError, UnsafePathError
from threads.keys import SessionKey
from threads.llm.base import ModelClient
from threads.llm.errors import ModelError
from threads.manager import ThreadManager
from threads.media import Media
from threads.node import NodeIdentity, claim_node
from threads.ops import check_session_tool, health_tool
from threads.pool.recovery import recover_delegations
from threads.pool.tools import delegate_task_tool
from threads.sessions.access import SubagentToolFilter
from threads.sessions.catalog import Catalog
from threads.sessions.policy import SendPolicy, key_of_endpoint, send_command
from threads.sessions.tools import SESSION_TOOLS
from threads.sinks import Delivery, DropSink, OutboundMessage, Sink
from threads.state import StateStore, StateStoreError, open_state_store
from threads.store import check_reachable, open_store
from threads.store.base import SessionStore, StoreOptions
from threads.supervision import Supervisor
from threads.tools import builtin_tools
from threads.tools.images import ORIGIN as TOOL_MEDIA
from threads.tools.images import ImageStore

if TYPE_CHECKING:
    from threads.cluster.member import Member
    from threads.mcp import McpHub

log = logging.getLogger(__name__)


def check_models(config: GatewayConfig, models: Models) -> None:
    """Resolve every agent's and summarizer's model now: a bad provider stops the start-up."""
    refs = [
        (
            f"agents.{name}.model" if agent.model else "models.default",
            agent.model or config.models.default,
        )
        for name, agent in config.agents.items()
    ]
    refs += [
        (f"compaction.summary_models[{i}]", ref)
        for i, ref in enumerate(config.compaction.summary_models)
    ]
    for where, ref in refs:
        try:
            models.resolve(ref)
        except (ModelError, UnknownModelError) as exc:
            raise StartupError(f"{where} {ref!r}: {exc}") from None


def default_tools(config: GatewayConfig) -> list[Tool[Any]]:
    """The tools every gateway offers its agents (agents choose among them in config).

    The standard ones, and the opt-in built-ins (files, web, commands) an agent
    gets only by naming them.
    """
    return [
        dispatch_tool,
        check_session_tool,
        health_tool,
        *SESSION_TOOLS,
        delegate_task_tool,
        pin_message_tool,
        *builtin_tools(config),
    ]


class Gateway:
    """The whole gateway: store, threads, channels and control, with one lifetime.

    ``cron_clock`` is where cron takes its time from, ``approval_clock`` what
    approval requests lapse on: the wall clock unless a test brings its own.
    """

    def __init__(
        self,
        config: GatewayConfig,
        *,
        model_clients: Mapping[str, ModelClient] | None = None,
        channels: Sequence[Channel] | None = None,
        store: SessionStore | None = None,
        tools: Sequence[Tool[Any]] = (),
        control: bool = True,
        cron_clock: Clock | None = None,
        lease_clock: LeaseClock = server_time,
        approval_clock: WallClock | None = None,
    ) -> None:
        self.config = config
        self._model_clients = dict(model_clients or {})
        self._extra_channels = list(channels or [])
        self._given_store = store
        self._extra_tools = list(tools)
        self._control_enabled = control
        self._cron_clock = cron_clock
        self._lease_clock = lease_clock
        self.member: Member | None = None
        self._approval_clock = approval_clock or MonotonicClock()
        self._lifetimes = Lifetimes()
        self.channels: dict[str, Channel] = {}
        self.cli: CliChannel | None = None
        self.web: WebChannel | None = None
        self.api: ApiChannel | None = None
        self.http: HttpServer | None = None
        self.admin: AdminPart | None = None
        self.metrics: Metrics | None = None
        self._webhooks: dict[str, Callable[[web.Request], Awaitable[web.StreamResponse]]] = {}
        self._stopped = asyncio.Event()
        self._store: SessionStore | None = None
        self._manager: ThreadManager | None = None
        self.send_policy: SendPolicy | None = None
        self._router: Router | None = None
        self.control_path: Path | None = None
        self.cron: CronService | None = None
        self.heartbeats: Heartbeats | None = None
        self.pairing: PairingService | None = None
        self.access: dict[str, Access] = {}
        self.mcp: McpHub | None = None
        self.state: StateStore | None = None
        self.approvals: ApprovalService | None = None
        self.node: NodeIdentity | None = None

    @property
    def store(self) -> SessionStore:
        assert self._store is not None, "the gateway is not started"
        return self._store

    @property
    def manager(self) -> ThreadManager:
        assert self._manager is not None, "the gateway is not started"
        return self._manager

    @property
    def router(self) -> Router:
        assert self._router is not None, "the gateway is not started"
        return self._router

    async def __aenter__(self) -> Gateway:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def start(self) -> None:
        try:
            await self._start()
        except BaseException:
            await self._lifetimes.aclose()
            raise

    async def _start(self) -> None:
        config = self.config
        if faults.problem():
            raise StartupError(faults.problem())
        if faults.armed():
            log.warning("fault point %s is armed: this process kills itself there", faults.armed())
        self._prepare_directories()
        self.node = self._claim_node()
        if self._given_store is not None:
            self._store = self._given_store
        else:
            options = StoreOptions(
                salvage=config.store.salvage, fsync=config.store.fsync, node=self.node
            )
            self._store = open_store(config.store.url, options)
            self._lifetimes.push("session store", self._store.close)
        try:
            await check_reachable(self._store)
        except UnreachableError as exc:
            raise StartupError(f"store.url: {exc}") from None
        self.member = member_for(
            self._store, config, self.node, clock=self._lease_clock, info=self._node_info
        )

        if config.admin.enabled:
            # The dashboard's charts: turns, model calls and their latency, tokens per session.
            self.metrics = Metrics()
            models: Models = TimedModels(
                config.models, metrics=self.metrics, clients=self._model_clients
            )
        else:
            models = Models(config.models, clients=self._model_clients)
        self._lifetimes.push("model clients", models.close)
        check_models(config, models)
        grants = GrantBook(await self._open_state())
        tools = ToolRegistry(
            [*default_tools(config), *self._extra_tools],
            default_timeout=config.threads.tool_timeout_seconds,
            approvals=DurableApprovals(config, clock=self._approval_clock, grants=grants),
        )
        self.media = Media()
        agent = AgentLoop(
            config=config,
            models=models,
            tools=tools,
            tool_filter=SubagentToolFilter(config),
            media=self.media,
        )
        self._manager = ThreadManager(
            store=self._store,
            agent=agent,
            config=config,
            channel_sinks=self._channel_sink,
            user_sinks=self._user_sink,
            recovery_path=config.data_dir / "state" / "recovery.json",
            cluster=self.member,
        )
        agent.services = self._manager
        freed = FreedMemory()
        self._manager.release_listeners.append(freed.released)
        freed.watch()
        self._lifetimes.push("freed memory", freed.stop)
        self.approvals = ApprovalService(self._manager, clock=self._approval_clock, grants=grants)
        self._lifetimes.push("approvals", self.approvals.close)
        self._manager.health_sources["approvals"] = self.approvals.health
        self.send_policy = policy = SendPolicy(self._manager)
        self._manager.health_sources["node"] = lambda: node_health(self.node, self.member)
        if self.member is not None:
            self._manager.health_sources["cluster"] = self.member.view
        self._manager.health_sources["channels"] = self._channel_health
        if self.metrics is not None:
            self._manager.observe(self.metrics.observe)

        if self._control_enabled:
            # The node claim has stopped a second gateway on this data directory already;
            # the socket lets `gateway chat`, `health` and the other commands find this one.
            from gateway.control import ControlServer

            server = ControlServer(self, config.data_dir / "gateway.sock")
            await server.start()
            self.control_path = server.path
            self._lifetimes.push("control socket", server.stop)

        if config.mcp.servers:
            # Before the channels, so the first message finds the servers' tools. Imported
            # here: the MCP SDK takes a while to load, and most gateways have no servers.
            from threads.mcp import McpHub

            # Images the servers' tools return are kept on disk; a vision model sees them.
            images = ImageStore(config.data_dir / "media" / "tools")
            self.media.register(TOOL_MEDIA, images.fetch)
            self.mcp = McpHub(config.mcp, tools, log_dir=config.data_dir / "logs", images=images)
            self._lifetimes.push("MCP servers", self.mcp.close)
            await self.mcp.start()
            self._manager.health_sources["mcp"] = self.mcp.health

        for channel in self._build_channels():
            self.channels[channel.name] = channel
        await self._start_access()
        self._router = Router(self._manager, self.channels)
        self._router.access = self.access
        self._router.wrap_sink = policy.wrap
        self._router.commands["/send"] = send_command(policy)
        self._router.commands["/compact"] = compact_command(
            self._manager,
            lambda session, focus: agent.compact_session(session, instructions=focus),
        )
        self._router.commands.update(ApprovalDesk(self, self.approvals).commands())
        await self._start_http()
        bots = stand_by(self.channels) if self.member is not None else []
        for channel in self.channels.values():
            try:
                await channel.start(self._router.handle)
            except ChannelStartError as exc:
                raise StartupError(str(exc)) from None
            self._lifetimes.push(f"{channel.name} channel", channel.stop)

        # Delegations a stopped gateway left unsettled are settled or resumed before
        # any turn continues: a delegating call whose turn died is answered first.
        await recover_delegations(self._manager)
        # With the channels up, input left unsettled by the last run continues, and
        # running turns are drained at close while the channels can still deliver.
        try:
            await self._manager.start()
        except UnsafePathError as exc:
            raise StartupError(f"store.url: {exc}") from None
        if self.member is not None:
            owner = ManagerOwner(self._manager, ops={"send_policy": policy.set_here})
            await self.member.start(owner, deliver=self._deliver_here)
            # Closed after the threads: their leases are renewed while they finish.
            self._lifetimes.push("cluster", self.member.stop)
        self._lifetimes.push("thread manager", self._manager.close)
        if self.member is not None:
            self._lifetimes.push("cluster inbox", self.member.stop_reading)
            await lead_bots(self.member, bots)
        await self.approvals.start()
        # Closing, channels stop taking messages first; they deliver while turns finish.
        self._lifetimes.push("channel input", self._stop_receiving)
        Supervisor(self._manager).start()
        if config.cron.enabled:
            await self._start_cron(tools)
        if config.heartbeat.enabled:
            await self._start_heartbeats()
        if self.pairing is not None:
            # Approvals and denials made while no gateway ran are told now.
            self._manager.spawn(self.pairing.deliver_notices(), name="pairing notices")

    async def _open_state(self) -> StateStore:
        """The state store: grants, pairing (cron keeps its own connection)."""
        try:
            state: StateStore = await open_state_store(self.config.state_store_url())
        except StateStoreError as exc:
            raise StartupError(f"{self._state_setting()}: {exc}") from None
        self._lifetimes.push("state store", state.close)
        self.state = state
        return state

    def _claim_node(self) -> NodeIdentity:
        """This process's node identity, held until the gateway closes (one process per node).

        Its locks in a shared store carry it, so this start takes over at once
        the locks an earlier run of this data directory left (decision
        reliability-03).
        """
        try:
            claim = claim_node(self.config.data_dir / "state", node_id=self.config.node_id)
        except NodeBusyError as exc:
            raise StartupError(str(exc)) from None
        except (OSError, UnsafePathError) as exc:
            raise StartupError(f"data_dir: the node record cannot be written: {exc}") from None

        async def release() -> None:
            claim.close()

        self._lifetimes.push("node identity", release)
        return claim.identity

    async def _start_access(self) -> None:
        """Access control for the channels with an access section, and their pairing.

        Built whether or not those channels run, so ``gateway pairing`` works
        against any running gateway; pairing state lives in the state store.
        """
        sections = self.config.channels.access_sections()
        if not sections:
            return
        state = self.state or await self._open_state()
        self.pairing = pairing = PairingService(state, sections, notify=self._tell_user)
        await pairing.start()
        self._lifetimes.push("pairing", pairing.close)
        owners = self.config.session.owners
        self.access = {
            name: Access(name, section, pairing=pairing, session_owners=owners)
            for name, section in sections.items()
        }

    async def _tell_user(self, channel_name: str, chat_id: str, text: str) -> None:
        """Pairing's notifier: one plain message to a chat, past no policy (it is no agent's)."""
        channel = self.channels.get(channel_name)
        if channel is None:
            raise DeliveryError(channel_name, chat_id, "the channel is not running")
        await channel.deliver(chat_id, OutboundMessage(text=text))

    async def _stop_receiving(self) -> None:
        for channel in self.channels.values():
            stop = getattr(channel, "stop_receiving", None)
            if stop is not None:
                await stop()

    def _prepare_directories(self) -> None:
        """Refuse data directories that are links, not ours or open to others; make the rest.

        Channel secrets that cannot be found stop the start here too, before anything runs.
        """
        problems = [*directory_problems(self.config), *channel_problems(self.config)]
        if problems:
            raise StartupError("; ".join(str(p) for p in problems))
        try:
            make_data_dirs(self.config)
        except (OSError, UnsafePathError) as exc:
            raise StartupError(f"data_dir: {exc}") from None

    async def _start_heartbeats(self) -> None:
        """Heartbeats on the state store, waking threads through the manager."""
        state = self.state or await self._open_state()
        beats = Heartbeats(
            state,
            ManagerWaker(self.manager),
            self.config.heartbeat,
            clock=self._cron_clock or MonotonicClock(),
            zone=self.config.timezone,
        )
        if self.member is not None:
            # One ticker for all the gateways, as for cron: the node that leads beats.
            await self.member.lead(HEARTBEATS, beats.start, beats.stop)
        else:
            await beats.start()
        self._lifetimes.push("heartbeats", beats.stop)
        self.heartbeats = beats

    async def _start_cron(self, tools: ToolRegistry) -> None:
        """Cron on the state store, waking threads through the manager; its tools for agents."""
        try:
            store = await connect_store(self.config.state_store_url())
        except CronStoreError as exc:
            raise StartupError(f"{self._state_setting()}: {exc}") from None
        self._lifetimes.push("cron store", store.close)
        service = CronService.from_config(
            self.config,
            store,
            waker=ManagerWaker(self.manager),
            session_sink=self.manager.session_sink,
            chat_sink=self._user_sink,
            clock=self._cron_clock,
        )
        if self.member is not None:
            # One scheduler for all the gateways: the node that leads cron runs it.
            await self.member.lead(CRON, service.start, service.stop)
        else:
            await service.start()
        self._lifetimes.push("cron", service.stop)
        self.cron = service
        for cron_tool in cron_tools(service):
            tools.register(cron_tool)
        self.manager.health_sources["cron"] = self._cron_health

    def _state_setting(self) -> str:
        """The setting that places the state store (cron's jobs and ledger)."""
        if self.config.store.state_url:
            return "store.state_url"
        if self.config.store.url.startswith(("redis://", "rediss://")):
            return "store.url"
        return "data_dir"

    async def _cron_health(self) -> dict[str, Any]:
        assert self.cron is not None
        jobs = await self.cron.list_jobs()
        upcoming = sorted(
            ((v.next_fire, v.job) for v in jobs if v.next_fire is not None and v.job.enabled),
            key=lambda p: p[0],
        )
        return {
            "running": self.cron.running,
            "jobs": len(jobs),
            "enabled": sum(v.job.enabled for v in jobs),
            "next": [
                {"id": job.id, "next_fire": at.isoformat(), "target": str(job.session_key)}
                for at, job in upcoming[:5]
            ],
        }

    async def _start_http(self) -> None:
        """The one HTTP server, with every part in place: web chat, API, admin, webhooks."""
        if not self.config.http.enabled:
            return
        http = self.http = HttpServer(self.config.http)
        if self.web is not None:
            self.web.install(http.app)
        if self.config.admin.enabled:
            try:
                self.admin = AdminPart.from_config(self, self.config.admin, self.metrics)
            except AdminTokenError as exc:
                raise StartupError(str(exc)) from None
            self.admin.install(http)
        if self._webhooks:
            webhooks = web.Application()
            for account, handler in self._webhooks.items():
                webhooks.router.add_post(f"/{account}", handler)
            http.mount("/telegram", webhooks)
        if self.api is not None:
            http.mount("/v1", self.api.app())
        try:
            await http.start()
        except OSError as exc:
            raise StartupError(f"http.port: {port_in_use(http.host, http.port, exc)}") from None
        self._lifetimes.push("http server", http.stop)
        if self.web is not None:
            self.web.host, self.web.port = http.host, http.port
        if self.admin is not None:
            self.admin.started(http)
            # Closed before the server stops: its event streams end first.
            self._lifetimes.push("admin", self.admin.close)

    def _build_channels(self) -> list[Channel]:
        channels: list[Channel] = []
        given = {c.name for c in self._extra_channels}
        if self.config.channels.cli.enabled and "cli" not in given:
            self.cli = CliChannel(user_id=self.config.channels.cli.user_id)
            channels.append(self.cli)
        web = self.config.channels.web
        if web.enabled and "web" not in given:
            try:
                self.web = WebChannel.from_config(
                    web,
                    self.config.http,
                    state_dir=self.config.data_dir / "state",
                    media_dir=self.config.data_dir / "media" / "web",
                )
            except ChannelError as exc:
                raise StartupError(str(exc)) from None
            channels.append(self.web)
        api = self.config.channels.api
        if api.enabled and "api" not in given:
            try:
                self.api = ApiChannel.from_config(
                    api,
                    self.config.http,
                    agents=list(self.config.agents),
                    default_agent=self.config.default_agent,
                )
            except ChannelError as exc:
                raise StartupError(str(exc)) from None
            channels.append(self.api)
        for channel in self._extra_channels:
            if isinstance(channel, CliChannel):
                self.cli = channel
            if isinstance(channel, WebChannel):
                self.web = channel
            if isinstance(channel, ApiChannel):
                self.api = channel
            channels.append(channel)
        if self.web is not None:
            # The page shows the conversation from the session; models see its pictures.
            self.web.catalog = Catalog.of(self.manager)
            if self.web.files is not None:
                self.web.files.serve_to(self.media)
        for telegram in build_telegram(self.config, COMMANDS):
            if telegram.name in given:
                continue
            self.media.register_channel(telegram.name, telegram.fetch_file)
            if telegram.options.mode == "webhook":
                self._webhooks[webhook_account(telegram.name)] = telegram.webhook
            channels.append(telegram)
        for discord in build_discord(self.config, COMMANDS):
            if discord.name in given:
                continue
            self.media.register_channel(discord.name, discord.fetch_file)
            channels.append(discord)
        return channels

    async def close(self) -> None:
        self._stopped.set()
        await self._lifetimes.aclose()

    @property
    def stopping(self) -> bool:
        """True once :meth:`stop` or :meth:`close` was called: parts may be closing."""
        return self._stopped.is_set()

    def stop(self) -> None:
        """Ask :meth:`serve_forever` to return."""
        self._stopped.set()

    def spawn_drain(self) -> None:
        """Start :meth:`drain` in a task the manager supervises (a control request's answer)."""
        self.manager.spawn(self.drain(), name="drain")

    async def drain(self) -> None:
        """Hand this node's work to the others, then stop (``gateway drain``).

        It leads nothing from now on, takes no key it does not hold, and
        stops: its threads finish within the close deadline and the keys
        still holding input are handed over to other nodes.
        """
        if self.member is not None:
            self.member.draining = True
            await self.member.resign()
            await self.member.publish()
        self.stop()

    def _node_info(self) -> dict[str, Any]:
        """What this node's cluster record adds: where its HTTP server answers."""
        return {"http": self.web.url if self.web is not None else ""}

    async def serve_forever(self) -> None:
        await self._stopped.wait()

    # -- sinks the thread manager asks for

    def _channel_sink(self, wire: Mapping[str, str]) -> Sink:
        channel = self.channels.get(wire.get("channel", ""))
        if channel is None:
            return DropSink(reason=f"the {wire.get('channel', '?')} channel, which is not running")
        chat = wire.get("chat", "")
        sink: Sink = ChannelSink(channel=channel, chat_id=chat, reply_to=wire.get("reply_to", ""))
        origin = wire.get("node", "")
        elsewhere = self.member is not None and origin not in ("", self.member.node)
        if elsewhere and self.member is not None and isinstance(channel, Attached):
            # The chat is a connection to the node the wake came in on: deliver there.
            sink = RelaySink(relay=self.member.relay, node=origin, wire=wire)
        key = wire.get("key") or key_of_endpoint(channel.name, chat)
        return self.send_policy.wrap(key, sink) if self.send_policy else sink

    async def _deliver_here(self, name: str, chat: str, message: OutboundMessage) -> Delivery:
        """A message another node relays for a chat on this node (scale-out)."""
        channel = self.channels.get(name)
        if channel is None:
            raise DeliveryError(name, chat, "the channel is not running on this node")
        return await channel.deliver(chat, message)

    def _user_sink(self, key: SessionKey) -> Sink | None:
        """The user of a chat key, through the send policy; None when its channel is not running."""
        endpoint = endpoint_of(key)
        if endpoint is None:
            return None
        channel = self.channels.get(endpoint[0])
        if channel is None:
            return None
        sink = ChannelSink(channel=channel, chat_id=endpoint[1])
        return self.send_policy.wrap(key, sink) if self.send_policy else sink

    def _channel_health(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, channel in self.channels.items():
            entry: dict[str, Any] = {"running": True}
            if isinstance(channel, WebChannel):
                entry["url"] = channel.url
            report = getattr(channel, "health", None)
            if callable(report):
                entry.update(report())
            out[name] = entry
        return out

    async def wait_idle(self) -> None:
        """Wait until no thread has a turn running or queued, here or (forwarded) elsewhere."""
        while True:
            busy: list[Awaitable[object]] = [
                t.session.wait_idle() for t in self.manager.threads() if t.session.busy
            ]
            if self.member is not None:
                busy += [turn.wait() for turn in self.member.relay.handles()]
            if not busy:
                return
            await asyncio.gather(*busy, return_exceptions=True)
