"""The fake Discord speaks REST and the gateway well enough that the real discord.py runs on it."""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Generic, TypeVar

import pytest

from channels.testing import DcFile, FakeDiscord, FakeUsageError

with warnings.catch_warnings():
    # discord.py imports audioop, which Python 3.11 deprecates: discord.py's warning, not ours.
    warnings.filterwarnings("ignore", "'audioop' is deprecated", DeprecationWarning)
    import discord
    from discord import app_commands
    from discord.gateway import DiscordWebSocket
    from discord.http import Route

T = TypeVar("T")
SEND = "POST /channels/{channel_id}/messages"
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32


class Seen(Generic[T]):
    """What a bot's event handler saw, with a wait that wakes at each new one."""

    def __init__(self) -> None:
        self.items: list[T] = []
        self._changed = asyncio.Event()

    def add(self, item: T) -> None:
        self.items.append(item)
        self._changed.set()

    async def wait_for(self, count: int, *, timeout: float = 5.0) -> list[T]:
        async with asyncio.timeout(timeout):
            while len(self.items) < count:
                self._changed.clear()
                await self._changed.wait()
        return self.items[:count]


class Bot(discord.Client):
    """A plain discord.Client with the intents a chat bot uses, recording what it hears."""

    def __init__(self, *, message_content: bool = True, **options: Any) -> None:
        intents = discord.Intents.none()
        intents.guilds = intents.guild_messages = intents.dm_messages = True
        intents.message_content = message_content
        super().__init__(intents=intents, guild_ready_timeout=0.01, **options)
        self.messages: Seen[discord.Message] = Seen()
        self.edits: Seen[tuple[discord.Message, discord.Message]] = Seen()
        self.readies: Seen[None] = Seen()
        self.resumes: Seen[None] = Seen()

    async def on_ready(self) -> None:
        self.readies.add(None)

    async def on_resumed(self) -> None:
        self.resumes.add(None)

    async def on_message(self, message: discord.Message) -> None:
        self.messages.add(message)

    async def on_message_edit(self, before: discord.Message, after: discord.Message) -> None:
        self.edits.add((before, after))

    def from_people(self) -> list[discord.Message]:
        return [m for m in self.messages.items if m.author != self.user]


@pytest.fixture
async def fake() -> AsyncIterator[FakeDiscord]:
    async with FakeDiscord(bot_name="gw-test-bot") as server:
        yield server


@asynccontextmanager
async def running(fake: FakeDiscord, client: discord.Client) -> AsyncIterator[None]:
    """Run ``client`` as a bot runs it (``start``) until it is ready; close it after."""
    async with client:
        runner = asyncio.create_task(client.start(fake.token))
        ready = asyncio.create_task(client.wait_until_ready())
        done, _ = await asyncio.wait({runner, ready}, timeout=10, return_when="FIRST_COMPLETED")
        if ready not in done:
            ready.cancel()
            await client.close()
            await runner  # raises what went wrong
            pytest.fail("the client did not become ready within 10 s")
        try:
            yield
        finally:
            await client.close()
            await runner


async def test_a_client_logs_in_connects_and_is_ready_with_guilds_channels_and_threads(
    fake: FakeDiscord,
) -> None:
    guild = fake.guild("Lab")
    general = fake.text_channel(guild, "general")
    thread = fake.thread(general, "ideas")
    bot = Bot()
    async with running(fake, bot):
        await bot.readies.wait_for(1)
        assert bot.user is not None
        assert bot.user.id == fake.bot.id
        assert bot.user.name == "gw-test-bot"
        assert bot.user.bot
        assert bot.application_id == fake.application_id
        [lab] = bot.guilds
        assert lab.id == guild.id
        assert lab.me is not None
        assert [c.id for c in lab.text_channels] == [general.id]
        found = lab.get_thread(thread.id)
        assert found is not None
        assert found.parent_id == general.id
    routes = [c.route for c in fake.calls()]
    assert routes[:2] == ["GET /users/@me", "GET /oauth2/applications/@me"]
    [handshake] = fake.handshakes()
    assert handshake.kind == "identify"
    assert handshake.compress == "zlib-stream"  # and the fake answered compressed
    assert fake.heartbeats >= 1


async def test_a_dm_reaches_on_message_with_its_author_and_dm_channel(fake: FakeDiscord) -> None:
    bot = Bot()
    ann = fake.user("ann", global_name="Ann")
    async with running(fake, bot):
        posted = fake.send_dm(ann, "hello bot")
        [message] = await bot.messages.wait_for(1)
    assert message.id == posted.message_id
    assert message.content == "hello bot"
    assert message.author.id == ann.id
    assert message.author.name == "ann"
    assert message.author.display_name == "Ann"
    assert isinstance(message.channel, discord.DMChannel)
    assert message.channel.id == posted.channel_id == fake.dm_channel(ann).id
    assert message.guild is None


async def test_a_reply_is_recorded_with_its_allowed_mentions_reference_and_pings(
    fake: FakeDiscord,
) -> None:
    guild = fake.guild()
    general = fake.text_channel(guild)
    ann, bob = fake.user("ann"), fake.user("bob")
    bot = Bot()
    async with running(fake, bot):
        posted = fake.send_in_channel(general, ann, "hi", mention=True)
        [message] = await bot.messages.wait_for(1)
        assert bot.user in message.mentions
        await message.reply(
            f"@everyone <@{bob.id}> and <@{ann.id}>",
            allowed_mentions=discord.AllowedMentions(
                everyone=False, users=[discord.Object(bob.id)]
            ),
            mention_author=False,
        )
        [reply] = await fake.wait_for_sent(general, 1)
    assert reply.allowed_mentions == {
        "parse": ["roles"],
        "users": [bob.id],
        "replied_user": False,
    }
    assert reply.message_reference is not None
    assert reply.reply_to == posted.message_id
    assert reply.pinged_users == (bob.id,)
    assert not reply.pinged_everyone
    assert reply.guild_id == guild.id


async def test_a_reply_without_allowed_mentions_pings_everyone_it_names_and_its_author(
    fake: FakeDiscord,
) -> None:
    general = fake.text_channel(fake.guild())
    ann = fake.user("ann")
    bot = Bot()
    async with running(fake, bot):
        fake.send_in_channel(general, ann, "hi")
        [message] = await bot.messages.wait_for(1)
        await message.reply("@everyone listen")
        [reply] = await fake.wait_for_sent(general, 1)
    assert reply.allowed_mentions is None
    assert reply.pinged_everyone
    assert reply.pinged_users == (ann.id,)


async def test_the_bots_own_message_comes_back_over_the_gateway(fake: FakeDiscord) -> None:
    ann = fake.user("ann")
    bot = Bot()
    async with running(fake, bot):
        fake.send_dm(ann, "ping")
        [message] = await bot.messages.wait_for(1)
        sent = await message.channel.send("pong")
        _, echo = await bot.messages.wait_for(2)
    assert echo.id == sent.id == fake.sent(ann)[0].message_id
    assert echo.author == bot.user
    assert echo.content == "pong"


async def test_typing_is_recorded_per_channel(fake: FakeDiscord) -> None:
    general = fake.text_channel(fake.guild())
    bot = Bot()
    async with running(fake, bot):
        channel = bot.get_channel(general.id)
        assert isinstance(channel, discord.TextChannel)
        async with channel.typing():
            await channel.send("thinking done")
    assert [t.channel_id for t in fake.typing(general)] == [general.id]
    assert [s.content for s in fake.sent(general)] == ["thinking done"]


async def test_a_thread_message_arrives_with_the_thread_as_its_channel(fake: FakeDiscord) -> None:
    general = fake.text_channel(fake.guild())
    ann = fake.user("ann")
    bot = Bot()
    async with running(fake, bot):
        thread = fake.thread(general, "later", by=ann)  # THREAD_CREATE while connected
        posted = fake.send_in_channel(thread, ann, "in the thread")
        [message] = await bot.messages.wait_for(1)
        assert isinstance(message.channel, discord.Thread)
        assert message.channel.id == thread.id == posted.channel_id
        assert message.channel.parent_id == general.id
        await message.channel.send("answered in the thread")
        [answer] = await fake.wait_for_sent(thread, 1)
    assert answer.channel_id == thread.id
    assert fake.sent(general) == []


async def test_an_edit_arrives_as_on_message_edit(fake: FakeDiscord) -> None:
    ann = fake.user("ann")
    bot = Bot()
    async with running(fake, bot):
        posted = fake.send_dm(ann, "helo")
        await bot.messages.wait_for(1)
        fake.edit_message(posted, "hello")
        [(before, after)] = await bot.edits.wait_for(1)
    assert (before.id, after.id) == (posted.message_id, posted.message_id)
    assert (before.content, after.content) == ("helo", "hello")
    assert after.edited_at is not None


async def test_the_bots_edits_and_uploads_are_recorded(fake: FakeDiscord) -> None:
    ann = fake.user("ann")
    bot = Bot()
    async with running(fake, bot):
        channel = await bot.create_dm(discord.Object(ann.id))  # POST /users/@me/channels
        assert channel.id == fake.dm_channel(ann).id
        message = await channel.send("draft", file=discord.File(__file__, "notes.py"))
        await message.edit(content="final")
        await bot.edits.wait_for(1)
    [sent] = fake.sent(ann)
    assert sent.versions == ("draft", "final")
    assert sent.content == "final"
    [upload] = sent.attachments
    assert upload.filename == "notes.py"
    assert upload.data.startswith(b'"""The fake Discord')


async def test_a_slash_command_syncs_and_its_interaction_reaches_the_callback(
    fake: FakeDiscord,
) -> None:
    general = fake.text_channel(fake.guild())
    ann = fake.user("ann")
    bot = Bot()
    tree = app_commands.CommandTree(bot)
    asked: list[tuple[str, int]] = []

    @tree.command(name="ask", description="Ask the bot something")
    async def ask(interaction: discord.Interaction, question: str) -> None:
        asked.append((question, interaction.user.id))
        await interaction.response.send_message(f"you asked: {question}", ephemeral=True)
        await interaction.followup.send("and one more thing")

    async with running(fake, bot):
        synced = await tree.sync()
        assert [c.name for c in synced] == ["ask"]
        [registered] = fake.commands()
        assert registered["name"] == "ask"
        assert registered["options"][0]["name"] == "question"
        interaction = fake.slash_command(ann, "ask", {"question": "why?"}, channel=general)
        callback = await fake.wait_for_callback(interaction)
        await fake.wait_for_sent(general, 2)
        answer, followup = fake.sent(interaction=interaction)
    assert asked == [("why?", ann.id)]
    assert callback.type == 4
    assert callback.data is not None
    assert callback.data["content"] == "you asked: why?"
    assert answer.ephemeral
    assert answer.interaction_id == interaction.id
    assert followup.content == "and one more thing"
    assert not followup.ephemeral
    assert [c.route for c in fake.calls()][-2:] == [
        "POST /interactions/{interaction_id}/{interaction_token}/callback",
        "POST /webhooks/{application_id}/{interaction_token}",
    ]
    [call] = fake.calls("POST /interactions/{interaction_id}/{interaction_token}/callback")
    assert call.query == {"with_response": "1"}


async def test_a_429_makes_discord_py_wait_and_retry_and_the_message_appears_once(
    fake: FakeDiscord,
) -> None:
    ann = fake.user("ann")
    bot = Bot()
    async with running(fake, bot):
        channel = await bot.create_dm(discord.Object(ann.id))
        fake.fail_next(SEND, 429, retry_after=0.01)
        await channel.send("patience")
    assert [s.content for s in fake.sent(ann)] == ["patience"]
    assert [c.status for c in fake.calls(SEND)] == [429, 200]


async def test_a_cloudflare_ban_is_an_error_not_a_retry(fake: FakeDiscord) -> None:
    ann = fake.user("ann")
    bot = Bot()
    async with running(fake, bot):
        channel = await bot.create_dm(discord.Object(ann.id))
        fake.fail_next(SEND, 429, banned=True)
        with pytest.raises(discord.HTTPException) as caught:
            await channel.send("banned")
        fake.fail_next(SEND, 403)
        with pytest.raises(discord.Forbidden) as forbidden:
            await channel.send("not allowed")
    assert caught.value.status == 429
    assert forbidden.value.code == 50013
    assert fake.sent(ann) == []


async def test_content_over_2000_characters_is_refused_with_discords_form_error(
    fake: FakeDiscord,
) -> None:
    ann = fake.user("ann")
    bot = Bot()
    async with running(fake, bot):
        channel = await bot.create_dm(discord.Object(ann.id))
        await channel.send("x" * 2000)
        with pytest.raises(discord.HTTPException) as caught:
            await channel.send("x" * 2001)
    assert caught.value.status == 400
    assert caught.value.code == 50035
    assert "2000 or fewer" in caught.value.text
    assert len(fake.sent(ann)) == 1


async def test_a_dropped_socket_is_resumed_and_an_event_sent_meanwhile_arrives_once(
    fake: FakeDiscord,
) -> None:
    ann = fake.user("ann")
    bot = Bot()
    async with running(fake, bot):
        fake.send_dm(ann, "before")
        await bot.messages.wait_for(1)
        reconnecting = fake.hold_next_connection()
        await fake.drop_connection()
        await reconnecting.arrived()  # discord.py is reconnecting; the socket is down
        fake.send_dm(ann, "while down")
        reconnecting.release()
        await bot.resumes.wait_for(1)
        fake.send_dm(ann, "after")
        await bot.messages.wait_for(3)
    assert [m.content for m in bot.messages.items] == ["before", "while down", "after"]
    identify, resume = fake.handshakes()
    assert identify.kind == "identify"
    assert resume.kind == "resume"
    assert resume.session_id == identify.session_id
    assert resume.path == "/resume"  # READY's resume_gateway_url
    assert resume.seq is not None
    assert len(bot.readies.items) == 1


async def test_a_reconnect_request_is_answered_with_a_resume(fake: FakeDiscord) -> None:
    ann = fake.user("ann")
    bot = Bot()
    async with running(fake, bot):
        fake.request_reconnect()
        await bot.resumes.wait_for(1)
        fake.send_dm(ann, "still here")
        [message] = await bot.messages.wait_for(1)
    assert message.content == "still here"
    assert [h.kind for h in fake.handshakes()] == ["identify", "resume"]


class PromptBot(Bot):
    """A bot that identifies again at once; discord.py's own hook waits 5 s first."""

    async def before_identify_hook(self, shard_id: int | None, *, initial: bool = False) -> None:
        return None


async def test_an_invalid_session_makes_discord_py_identify_anew(fake: FakeDiscord) -> None:
    ann = fake.user("ann")
    bot = PromptBot()
    async with running(fake, bot):
        fake.invalidate_session(resumable=False)
        await bot.readies.wait_for(2)
        fake.send_dm(ann, "new session")
        [message] = await bot.messages.wait_for(1)
    assert message.content == "new session"
    first, second = fake.handshakes()
    assert (first.kind, second.kind) == ("identify", "identify")
    assert second.session_id != first.session_id
    assert second.path == "/"


async def test_a_send_with_a_nonce_discord_already_has_returns_the_first_message(
    fake: FakeDiscord,
) -> None:
    ann = fake.user("ann")
    bot = Bot()
    async with running(fake, bot):
        channel = await bot.create_dm(discord.Object(ann.id))
        first = await channel.send("once", nonce=1234)
        again = await channel.send("once", nonce=1234)
        await first.delete()
        with pytest.raises(discord.NotFound):
            await channel.send("once", nonce=1234)
    assert again.id == first.id
    [sent] = fake.sent(ann)
    assert sent.deleted


async def test_a_held_send_waits_until_released_and_applies_only_then(fake: FakeDiscord) -> None:
    ann = fake.user("ann")
    bot = Bot()
    async with running(fake, bot):
        channel = await bot.create_dm(discord.Object(ann.id))
        hold = fake.hold_next(SEND)
        sending = asyncio.create_task(channel.send("held"))
        request = await hold.arrived()
        assert request["body"]["content"] == "held"
        assert fake.sent(ann) == []
        hold.release()
        message = await sending
    [sent] = fake.sent(ann)
    assert sent.message_id == message.id


async def test_a_deferred_answer_is_edited_into_place(fake: FakeDiscord) -> None:
    ann = fake.user("ann")
    bot = Bot()
    tree = app_commands.CommandTree(bot)

    @tree.command(name="slow", description="Takes a while")
    async def slow(interaction: discord.Interaction) -> None:
        await interaction.response.defer(thinking=True)
        await interaction.edit_original_response(content="done")

    async with running(fake, bot):
        await tree.sync()
        interaction = fake.slash_command(ann, "slow")
        callback = await fake.wait_for_callback(interaction)
        await fake.wait_until(lambda: fake.sent(ann) and fake.sent(ann)[0].edits)
    assert callback.type == 5
    [answer] = fake.sent(ann)
    assert answer.versions == ("", "done")
    assert answer.interaction_id == interaction.id


async def test_reactions_deletes_history_and_threads_the_bot_starts(fake: FakeDiscord) -> None:
    general = fake.text_channel(fake.guild())
    ann = fake.user("ann")
    bot = Bot()
    async with running(fake, bot):
        fake.send_in_channel(general, ann, "first")
        fake.send_in_channel(general, ann, "second")
        first, second = await bot.messages.wait_for(2)
        await second.add_reaction("👀")
        await first.delete()
        history = [m.content async for m in second.channel.history(limit=10)]
        thread = await second.create_thread(name="about second")
        await thread.send("in my own thread")
        await fake.wait_for_sent(thread.id, 1)
    assert history == ["second"]
    [reaction] = fake.reactions(general)
    assert (reaction.message_id, reaction.emoji, reaction.added) == (second.id, "👀", True)
    assert [m["content"] for m in fake.history(general)] == ["second"]
    assert thread.id == second.id
    assert thread.parent_id == general.id
    assert [s.content for s in fake.sent(thread.id)] == ["in my own thread"]


async def test_a_client_with_the_members_intent_gets_its_guilds_members_in_chunks(
    fake: FakeDiscord,
) -> None:
    owner = fake.user("olga")
    guild = fake.guild(owner=owner)
    intents = discord.Intents.none()
    intents.guilds = intents.members = True
    client = discord.Client(intents=intents, guild_ready_timeout=0.01)
    async with running(fake, client):
        [found] = client.guilds
        assert found.chunked
        names = sorted(m.name for m in found.members)
    assert guild.owner_id == owner.id
    assert names == ["gw-test-bot", "olga"]


async def test_a_wrong_token_is_a_login_failure(fake: FakeDiscord) -> None:
    client = discord.Client(intents=discord.Intents.none())
    async with client:
        with pytest.raises(discord.LoginFailure):
            await client.login("not-the-token")
    [call] = fake.calls()
    assert (call.route, call.status) == ("GET /users/@me", 401)


async def test_an_attachments_url_downloads_the_registered_bytes(fake: FakeDiscord) -> None:
    ann = fake.user("ann")
    bot = Bot()
    async with running(fake, bot):
        fake.send_dm(
            ann,
            "look",
            attachments=[DcFile(filename="cat.png", data=PNG, content_type="image/png")],
        )
        [message] = await bot.messages.wait_for(1)
        [attachment] = message.attachments
        data = await attachment.read()
    assert data == PNG
    assert attachment.filename == "cat.png"
    assert attachment.size == len(PNG)
    assert attachment.content_type == "image/png"
    assert attachment.url.startswith(fake.url)


async def test_without_message_content_a_guild_message_arrives_empty_unless_it_mentions_the_bot(
    fake: FakeDiscord,
) -> None:
    general = fake.text_channel(fake.guild())
    ann = fake.user("ann")
    bot = Bot(message_content=False)
    async with running(fake, bot):
        fake.send_in_channel(general, ann, "talking among ourselves")
        fake.send_in_channel(general, ann, "hey you", mention=True)
        fake.send_dm(ann, "a secret")
        await bot.messages.wait_for(3)
    assert [m.content for m in bot.messages.items] == [
        "",
        f"<@{fake.bot.id}> hey you",
        "a secret",
    ]


async def test_a_privileged_intent_the_application_lacks_closes_the_gateway_with_4014() -> None:
    async with FakeDiscord(privileged_intents=()) as fake:
        bot = Bot()
        async with bot:
            with pytest.raises(discord.PrivilegedIntentsRequired):
                await bot.start(fake.token)


async def test_an_auto_sharded_client_finds_the_gateway_through_gateway_bot(
    fake: FakeDiscord,
) -> None:
    ann = fake.user("ann")
    intents = discord.Intents.none()
    intents.dm_messages = intents.message_content = True
    client = discord.AutoShardedClient(intents=intents, guild_ready_timeout=0.01)
    heard: Seen[discord.Message] = Seen()
    client.event(_forwarding(heard))
    with fake.redirect_discord():  # already redirected; a nested redirect is allowed
        async with running(fake, client):
            fake.send_dm(ann, "sharded")
            [message] = await heard.wait_for(1)
    assert message.content == "sharded"
    assert "GET /gateway/bot" in [c.route for c in fake.calls()]
    [handshake] = fake.handshakes()
    assert handshake.kind == "identify"


def _forwarding(heard: Seen[discord.Message]) -> Any:
    async def on_message(message: discord.Message) -> None:
        heard.add(message)

    return on_message


async def test_the_fake_points_discord_py_at_itself_and_restores_it_when_closed() -> None:
    base, gateway = Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY
    async with FakeDiscord() as fake:
        assert fake.api_url == Route.BASE
        assert str(DiscordWebSocket.DEFAULT_GATEWAY) == fake.ws_url + "/"
        with pytest.raises(FakeUsageError, match="another fake"):
            async with FakeDiscord():
                pass
    assert (base, gateway) == (Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY)


async def test_unknown_routes_and_names_are_clear_errors(fake: FakeDiscord) -> None:
    with pytest.raises(FakeUsageError, match="does not answer"):
        fake.fail_next("POST /channels/{id}/messagez")
    with pytest.raises(FakeUsageError, match="no slash command 'nope'"):
        fake.slash_command(fake.user(), "nope")
