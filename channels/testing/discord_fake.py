"""A fake Discord (REST API and gateway) on loopback, for testing bots with the real discord.py.

``FakeDiscord`` speaks Discord's wire protocol — REST under ``/api/v10`` with
Discord's JSON errors and rate-limit headers, the gateway WebSocket with
HELLO, IDENTIFY/READY, heartbeats, dispatches, RESUME, and zlib-stream
compression — well enough that discord.py 2.7 runs against it unmodified.

Pointing discord.py at it: discord.py has no per-client setting for either
address. A plain ``discord.Client`` sends REST calls to ``Route.BASE`` and
opens the gateway at ``DiscordWebSocket.DEFAULT_GATEWAY`` without asking
``GET /gateway/bot`` (only ``AutoShardedClient`` asks). So while the fake is
open it sets both class attributes (and ``Asset.BASE``, so no asset URL leads
off the machine) and restores them when it closes; resumes go to the
``resume_gateway_url`` READY gives, which is the fake's too. Pass
``redirect=False`` and use ``with fake.redirect_discord():`` to choose the
span yourself. Only one fake can be the target at a time::

    import asyncio, discord
    from channels.testing import FakeDiscord

    async def test_the_bot_echoes() -> None:
        async with FakeDiscord(bot_name="echo-bot") as fake:
            intents = discord.Intents.default()
            intents.message_content = True
            # on_ready waits guild_ready_timeout (2 s by default) after the last
            # GUILD_CREATE; a test has no guilds still arriving.
            client = discord.Client(intents=intents, guild_ready_timeout=0.05)

            @client.event
            async def on_message(message: discord.Message) -> None:
                if message.author != client.user:  # the bot hears its own messages too
                    await message.channel.send(message.content)

            async with client:
                runner = asyncio.create_task(client.start(fake.token))
                await fake.wait_for_ready()
                ann = fake.user("ann")
                fake.send_dm(ann, "hello")
                [reply] = await fake.wait_for_sent(ann, 1)
                assert reply.content == "hello"
            await runner

Acting as people (see ``Injector``): ``user()``, ``guild()``,
``text_channel()``, ``thread()``, ``send_dm()``, ``send_in_channel(mention=…,
reply_to=…, attachments=…)``, ``edit_message()``, ``delete_message()``,
``slash_command()``, ``press_button()``, ``dispatch()`` for a raw event.

Reading what the bot did: ``sent(channel)`` (frozen ``DcSentMessage`` records:
content and every edit, embeds, uploads, ``allowed_mentions``,
``message_reference``, whom it pinged), ``calls(route)``, ``typing()``,
``reactions()``, ``commands(guild)``, ``callbacks(interaction)``,
``handshakes()``, ``history(channel)``; waiting with a deadline:
``wait_for_ready()``, ``wait_for_sent(channel, n)``, ``wait_for_calls()``,
``wait_for_callback()``, ``wait_until(check)``.

Making Discord misbehave: ``fail_next(route, 429, retry_after=…)`` (or 403,
404, 5xx, a Cloudflare ban), ``hold_next(route, applied=…)``,
``hold_next_connection()``, ``drop_connection()`` (close code 4000: the bot
resumes), ``request_reconnect()`` (op 7), ``invalidate_session()`` (op 9).
``FakeDiscord(privileged_intents=…)`` sets the intents the application may
use; asking for another closes the gateway with 4014.

Where it differs from Discord, on purpose: no permission checks (members may
do what members usually may), no rate limits unless a test asks, no
interaction deadlines (3 s to answer, 15 min for followups), content counted
in code points, one application whose id is the bot's.
"""

from __future__ import annotations

import asyncio
import time
import warnings
from collections import deque
from collections.abc import Callable, Collection, Iterator
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING, TypeVar

import yarl
from aiohttp import web

from channels.testing.discord_gateway import Gateway
from channels.testing.discord_inject import ChannelRef, Injector
from channels.testing.discord_interactions import InteractionRoutes
from channels.testing.discord_rest import API_PREFIX, Failure, Rest
from channels.testing.discord_routes import ChannelRoutes
from channels.testing.discord_world import (
    PRIVILEGED_INTENTS,
    DcCall,
    DcCallback,
    DcGuild,
    DcHandshake,
    DcInteraction,
    DcReaction,
    DcSentMessage,
    DcTyping,
    DcUser,
    World,
    snowflake_at,
)
from channels.testing.errors import FakeUsageError
from channels.testing.telegram import Hold

if TYPE_CHECKING:
    from discord.asset import Asset
    from discord.gateway import DiscordWebSocket
    from discord.http import Route

T = TypeVar("T")
_DEFAULT_ERRORS = {
    400: (50035, "Invalid Form Body"),
    401: (0, "401: Unauthorized"),
    403: (50013, "Missing Permissions"),
    404: (0, "404: Not Found"),
    429: (0, "You are being rate limited."),
    500: (0, "500: Internal Server Error"),
    502: (0, "502: Bad Gateway"),
    503: (0, "503: Service Unavailable"),
}
# The application flags that let a bot use each privileged intent.
_INTENT_FLAGS = {"presences": 1 << 12, "members": 1 << 14, "message_content": 1 << 18}


class FakeDiscord(Injector):
    """A fake Discord for one bot; ``async with FakeDiscord() as fake:``."""

    def __init__(
        self,
        *,
        token: str = "FAKE.discord.bot-token",
        bot_name: str = "fake-bot",
        bot_id: int | None = None,
        privileged_intents: Collection[str] = ("members", "presences", "message_content"),
        heartbeat_interval: float = 41.25,
        redirect: bool = True,
        host: str = "127.0.0.1",
        port: int = 0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        unknown = set(privileged_intents) - set(PRIVILEGED_INTENTS)
        if unknown:
            raise FakeUsageError(
                f"privileged intents are {sorted(PRIVILEGED_INTENTS)}, not {sorted(unknown)}"
            )
        if not token or any(c.isspace() for c in token):
            raise FakeUsageError(f"token {token!r} must be non-empty, without spaces")
        self.token = token
        self.host = host
        self.port = port
        self.redirect = redirect
        self.privileged_intents = frozenset(privileged_intents)
        bot = DcUser(id=bot_id or snowflake_at(clock()), username=bot_name, bot=True)
        world = World(bot, token, clock)
        super().__init__(world)
        self.owner = self.user(f"{bot_name}-owner")
        self.gateway = Gateway(
            world,
            heartbeat_interval=heartbeat_interval,
            privileged_intents=sum(PRIVILEGED_INTENTS[i] for i in self.privileged_intents),
            resume_url=lambda: f"{self.ws_url}/resume",
        )
        routes = ChannelRoutes(
            world,
            owner=self.owner,
            application_flags=lambda: sum(_INTENT_FLAGS[i] for i in self.privileged_intents),
            gateway_url=lambda: self.ws_url,
        )
        self.rest = Rest(world, routes.routes() + InteractionRoutes(world).routes())
        self._connection_holds: list[Hold] = []
        self._runner: web.AppRunner | None = None
        self._redirected = ExitStack()

    # -- lifetime

    async def __aenter__(self) -> FakeDiscord:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Listen on ``host:port`` (a free port when 0) and, with ``redirect``, point discord.py here."""
        app = web.Application()
        app.router.add_get("/", self.gateway.handle)
        app.router.add_get("/resume", self.gateway.handle)
        app.router.add_get("/attachments/{channel_id}/{attachment_id}/{filename}", self._download)
        self.rest.install(app)
        self._runner = web.AppRunner(
            app, access_log=None, handler_cancellation=True, shutdown_timeout=5.0
        )
        await self._runner.setup()
        try:
            await web.TCPSite(self._runner, self.host, self.port).start()
            self.port = int(self._runner.addresses[0][1])
            self.world.base_url = self.url
            if self.redirect:
                self._redirected.enter_context(self.redirect_discord())
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        """Release held calls, close the gateway's connections, stop listening, restore discord.py."""
        for hold in self.rest.every_hold + self._connection_holds:
            hold.release()
        try:
            await self.gateway.close()
            if self._runner is not None:
                await self._runner.cleanup()
                self._runner = None
        finally:
            self._redirected.close()

    @property
    def url(self) -> str:
        """The server's root, ``http://127.0.0.1:<port>``; REST lives under ``/api/v10``."""
        return f"http://{self.host}:{self.port}"

    @property
    def api_url(self) -> str:
        """What ``discord.http.Route.BASE`` is set to."""
        return self.url + API_PREFIX

    @property
    def ws_url(self) -> str:
        """The gateway, ``ws://127.0.0.1:<port>``, as ``GET /gateway/bot`` answers it."""
        return f"ws://{self.host}:{self.port}"

    @property
    def bot(self) -> DcUser:
        return self.world.bot

    @property
    def application_id(self) -> int:
        """The bot's application id, which is the bot's user id, as for any new application."""
        return self.world.bot.id

    @contextmanager
    def redirect_discord(self) -> Iterator[None]:
        """Point discord.py at this fake inside the block, and restore it after."""
        if self._runner is None:
            raise FakeUsageError("the fake is not running; start it before redirecting discord.py")
        Route, DiscordWebSocket, Asset = _discord_classes()
        if not Route.BASE.startswith("https://discord.com/") and self.api_url != Route.BASE:
            raise FakeUsageError(
                f"discord.py already points at another fake ({Route.BASE}); "
                "one FakeDiscord can be discord.py's target at a time"
            )
        saved = Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY, Asset.BASE
        Route.BASE = self.api_url
        DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(self.ws_url + "/")
        Asset.BASE = self.url
        try:
            yield
        finally:
            Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY, Asset.BASE = saved

    # -- making Discord misbehave

    def fail_next(
        self,
        route: str,
        status: int = 429,
        *,
        retry_after: float = 0.1,
        message: str | None = None,
        code: int | None = None,
        is_global: bool = False,
        banned: bool = False,
        times: int = 1,
    ) -> None:
        """Answer the next ``times`` calls of ``route`` with an error instead of doing them.

        ``route`` is named as Discord names it: ``"POST
        /channels/{channel_id}/messages"``. A 429 carries ``retry_after``
        seconds in its body and headers and ``Via: 1.1 google``, so
        discord.py sleeps that long and retries; ``banned=True`` leaves
        ``Via`` out and answers HTML, which discord.py raises as
        ``HTTPException`` (a Cloudflare ban). discord.py retries 500, 502,
        504 after sleeping 1 s, 3 s, … and raises 403 as ``Forbidden``, 404
        as ``NotFound``, others as ``HTTPException``.
        """
        spec = self.rest.route(route)
        default_code, default_message = _DEFAULT_ERRORS.get(status, (0, f"{status}: Error"))
        failure = Failure(
            status=status,
            code=default_code if code is None else code,
            message=message or default_message,
            retry_after=retry_after,
            is_global=is_global,
            banned=banned,
        )
        self.rest.failures.setdefault(spec.name, deque()).extend([failure] * times)

    def hold_next(self, route: str, *, applied: bool = False) -> Hold:
        """Keep the next call of ``route`` unanswered until ``Hold.release()``.

        With ``applied=True`` the call takes effect at once and only the
        answer waits, so a client that times out does not know it happened.
        """
        spec = self.rest.route(route)
        hold = Hold(spec.name, applied=applied)
        self.rest.holds.setdefault(spec.name, deque()).append(hold)
        self.rest.every_hold.append(hold)
        return hold

    def hold_next_connection(self) -> Hold:
        """Keep the next gateway connection waiting, before its upgrade, until released."""
        hold = Hold("gateway connection", applied=False)
        self.gateway.holds.append(hold)
        self._connection_holds.append(hold)
        return hold

    async def drop_connection(self, *, code: int = 4000, timeout: float = 5.0) -> None:
        """Close the bot's gateway connections with ``code`` and wait until they are closed.

        Sessions stay: events from now on are kept for the bot's RESUME.
        discord.py resumes after any code but 1000 (from itself), 4004 and
        4010–4014.
        """
        if not self.gateway.live():
            raise FakeUsageError("no gateway connection is live; wait_for_ready() first")
        await self.gateway.drop(code, timeout=timeout)

    def request_reconnect(self) -> None:
        """Send RECONNECT (op 7); discord.py closes and resumes."""
        self.gateway.reconnect()

    def invalidate_session(self, *, resumable: bool = False) -> None:
        """Send INVALID_SESSION (op 9); unless ``resumable`` discord.py identifies anew."""
        self.gateway.invalidate(resumable=resumable)

    # -- what the bot did

    def sent(
        self, channel: ChannelRef | None = None, *, interaction: DcInteraction | None = None
    ) -> list[DcSentMessage]:
        """The messages the bot posted, in order, in one channel (a user means their DM) or
        in all; with ``interaction``, only that interaction's response and followups."""
        channel_id = None if channel is None else self.world.known_channel(channel).id
        sent = self.world.sent_messages(channel_id)
        if interaction is not None:
            sent = [s for s in sent if s.interaction_id == interaction.id]
        return sent

    def calls(self, route: str | None = None) -> list[DcCall]:
        """Every REST call the bot made (or those of one route), in order, answered or refused."""
        name = None if route is None else self.rest.route(route).name
        return [c for c in self.world.calls if name is None or c.route == name]

    def typing(self, channel: ChannelRef | None = None) -> list[DcTyping]:
        channel_id = None if channel is None else self.world.known_channel(channel).id
        return [t for t in self.world.typing if channel_id is None or t.channel_id == channel_id]

    def reactions(self, channel: ChannelRef | None = None) -> list[DcReaction]:
        channel_id = None if channel is None else self.world.known_channel(channel).id
        return [r for r in self.world.reactions if channel_id is None or r.channel_id == channel_id]

    def commands(self, guild: DcGuild | None = None) -> list[dict[str, object]]:
        """The commands the bot registered, global or in ``guild``, as Discord stores them."""
        return list(self.world.commands.get(None if guild is None else guild.id, []))

    def callbacks(self, interaction: DcInteraction | None = None) -> list[DcCallback]:
        """The bot's answers to interactions (to one, or to all), in order."""
        return [
            c
            for c in self.world.callbacks
            if interaction is None or c.interaction_id == interaction.id
        ]

    def handshakes(self) -> list[DcHandshake]:
        """Every IDENTIFY and RESUME on the gateway, in order."""
        return list(self.world.handshakes)

    def history(self, channel: ChannelRef) -> list[dict[str, object]]:
        """Every message now in ``channel`` (people's and the bot's), oldest first."""
        stored = self.world.messages[self.world.known_channel(channel).id]
        return [stored[i] for i in sorted(stored)]

    @property
    def heartbeats(self) -> int:
        """How many heartbeats the bot sent (each answered with HEARTBEAT_ACK)."""
        return self.gateway.heartbeats

    async def wait_until(
        self, check: Callable[[], T], *, timeout: float = 5.0, what: str = "the condition"
    ) -> T:
        """``check()`` once it is truthy, re-checked at every change; TimeoutError after ``timeout``."""
        try:
            async with asyncio.timeout(timeout):
                while True:
                    changed = self.world.changed()
                    result = check()
                    if result:
                        return result
                    await changed.wait()
        except TimeoutError:
            raise TimeoutError(f"{what} did not happen within {timeout} s") from None

    async def wait_for_ready(self, *, timeout: float = 5.0) -> None:
        """Wait until the bot has a live gateway session (READY and GUILD_CREATEs are on their way)."""
        await self.wait_until(self.gateway.live, timeout=timeout, what="a gateway session")

    async def wait_for_sent(
        self, channel: ChannelRef, count: int = 1, *, timeout: float = 5.0
    ) -> list[DcSentMessage]:
        """The first ``count`` messages the bot posted in ``channel``, once there are that many."""

        def enough() -> list[DcSentMessage]:
            sent = self.sent(channel)
            return sent[:count] if len(sent) >= count else []

        try:
            return await self.wait_until(enough, timeout=timeout)
        except TimeoutError:
            seen = [s.content for s in self.sent(channel)]
            where = self.world.known_channel(channel).id
            raise TimeoutError(
                f"channel {where} got {len(seen)} of {count} messages within {timeout} s: {seen}"
            ) from None

    async def wait_for_calls(
        self, route: str, count: int = 1, *, timeout: float = 5.0
    ) -> list[DcCall]:
        """The first ``count`` calls of ``route``, once there are that many."""

        def enough() -> list[DcCall]:
            calls = self.calls(route)
            return calls[:count] if len(calls) >= count else []

        return await self.wait_until(enough, timeout=timeout, what=f"{count} calls of {route}")

    async def wait_for_callback(
        self, interaction: DcInteraction, *, timeout: float = 5.0
    ) -> DcCallback:
        """The bot's answer to ``interaction``, once it came."""
        [first, *_] = await self.wait_until(
            lambda: self.callbacks(interaction),
            timeout=timeout,
            what=f"an answer to the interaction /{interaction.name}",
        )
        return first

    # -- the CDN

    async def _download(self, request: web.Request) -> web.Response:
        match = request.match_info
        stored = None
        if match["attachment_id"].isdigit():
            stored = self.world.files.get(int(match["attachment_id"]))
        if (
            stored is None
            or str(stored.channel_id) != match["channel_id"]
            or stored.file.filename != match["filename"]
        ):
            return web.Response(status=404, text="Not Found")
        return web.Response(
            body=stored.file.data,
            content_type=stored.file.content_type or "application/octet-stream",
        )


def _discord_classes() -> tuple[type[Route], type[DiscordWebSocket], type[Asset]]:
    """The discord.py classes that hold its addresses, imported when first redirected.

    discord.py imports ``audioop``, which Python 3.11 deprecates; that
    warning is discord.py's, so it does not reach a test run that makes
    warnings errors through us.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "'audioop' is deprecated", DeprecationWarning)
        from discord.asset import Asset
        from discord.gateway import DiscordWebSocket
        from discord.http import Route
    return Route, DiscordWebSocket, Asset
