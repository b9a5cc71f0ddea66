"""Pairing: an unknown direct-message sender gets a code; an operator approves it.

Under ``dm_policy = "pairing"`` a direct message from someone the channel does
not know never reaches a model. The sender is told a code instead — eight
characters from an alphabet without look-alikes (no 0/O, 1/I/L), valid for an
hour — and the bot's operator runs ``gateway pairing approve telegram CODE``.
The user is then told to send their message again, and from then on talks to
the bot like anyone on the allowlist.

Promises:

- One pending request per sender and channel: asking again within the hour
  answers the same code (a sender cannot mint codes). At most ``max_pending``
  (3) live requests per channel; a further sender is told to try later.
- ``approve`` adds the user to the channel's paired set and tells them through
  the channel; ``deny`` drops the request and tells them once; ``revoke``
  removes a paired user (silently). A code that is unknown or past its hour is
  an error naming it; codes are matched ignoring case, spaces and dashes.
- Everything lives in the gateway's state store (``pairing.pending``,
  ``pairing.paired``, ``pairing.notices``), so a pairing survives restarts and
  an operator may approve before the gateway starts. The paired users are
  also an in-memory set per channel, loaded by :meth:`PairingService.load`,
  updated by every change made through this object and refreshed from the
  store when another process changed it (a revision token, checked by the
  maintenance loop), so :meth:`PairingService.is_paired` is a set lookup.
- A user who cannot be told now (no gateway running, the channel down) gets a
  notice kept for a week and delivered by :meth:`deliver_notices` at the next
  start.
- An expired request stays readable for a day (so approving it says "expired",
  not "unknown") and then expires in the store; ``sweep`` removes what expired.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from channels.errors import (
    ChannelError,
    ExpiredCodeError,
    NotPairedError,
    UnknownChannelError,
    UnknownCodeError,
)
from threads.state import Clock, StateStore, StateStoreError, utc_now
from threads.store.watching import wait_for_change

log = logging.getLogger(__name__)

ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"
CODE_LENGTH = 8
CODE_TTL = timedelta(hours=1)
MAX_PENDING = 3
EXPIRED_KEPT = timedelta(days=1)
NOTICE_KEPT = timedelta(days=7)
SYNC_SECONDS = 30.0

PENDING = "pairing.pending"  # "<channel>:<code>" → PairingRequest
PAIRED = "pairing.paired"  # "<channel>:<user id>" → PairedUser
NOTICES = "pairing.notices"  # "<channel>:<user id>" → Notice
META = "pairing.meta"  # "revision" → a token that changes with every paired-set change

APPROVED_TEXT = "You're approved — send your message again."
DENIED_TEXT = "Your request to talk to this bot was declined."

# Tells a user something on a channel: (channel, chat id, text). Raises when it cannot.
Notifier = Callable[[str, str, str], Awaitable[None]]


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class PairingRequest(_Record):
    """A pending request: who asked, on which channel and chat, the code and its hour."""

    channel: str
    user_id: str
    user_name: str = ""
    chat_id: str
    code: str
    created: datetime
    expires: datetime


class PairedUser(_Record):
    """A user an operator approved on a channel."""

    channel: str
    user_id: str
    user_name: str = ""
    approved: datetime


class Notice(_Record):
    """A message for a user that could not be delivered when it was decided."""

    channel: str
    chat_id: str
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Ask:
    """What an unknown sender's message got: a new code, the same code again, or no room."""

    outcome: Literal["issued", "again", "full"]
    request: PairingRequest | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """An approval or denial, and whether its user was told now (else at the next start)."""

    request: PairingRequest
    told: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class ChannelPairing:
    """One channel's live pending requests and paired users, for listings."""

    pending: tuple[PairingRequest, ...]
    paired: tuple[PairedUser, ...]


def normal_code(code: str) -> str:
    """``code`` as stored: upper case, without spaces or dashes."""
    return "".join(code.split()).replace("-", "").upper()


def new_code(taken: set[str]) -> str:
    """A fresh code from :data:`ALPHABET`, not in ``taken``."""
    while True:
        code = "".join(secrets.choice(ALPHABET) for _ in range(CODE_LENGTH))
        if code not in taken:
            return code


class PairingService:
    """Pending requests and paired users of every channel with access control."""

    def __init__(
        self,
        store: StateStore,
        channels: Iterable[str],
        *,
        clock: Clock = utc_now,
        notify: Notifier | None = None,
        max_pending: int = MAX_PENDING,
        ttl: timedelta = CODE_TTL,
        sync_seconds: float = SYNC_SECONDS,
    ) -> None:
        self.store = store
        self.channels = tuple(channels)
        self.notify = notify
        self._clock = clock
        self._max_pending = max_pending
        self._ttl = ttl
        self._sync_seconds = sync_seconds
        self._paired: dict[str, set[str]] = {name: set() for name in self.channels}
        self._revision: object = None
        self._lock = asyncio.Lock()
        self._stopping = asyncio.Event()
        self._maintenance: asyncio.Task[None] | None = None

    # -- lifetime

    async def load(self) -> None:
        """Read every channel's paired users into memory."""
        revision = await self.store.get(META, "revision")
        paired: dict[str, set[str]] = {name: set() for name in self.channels}
        for _, raw in await self.store.scan(PAIRED):
            user = PairedUser.model_validate(raw)
            if user.channel in paired:
                paired[user.channel].add(user.user_id)
        self._paired = paired
        self._revision = revision

    async def start(self) -> None:
        """Load, then keep the paired sets in sync and sweep expired requests."""
        await self.load()
        self._maintenance = asyncio.create_task(self._maintain(), name="pairing maintenance")

    async def close(self) -> None:
        self._stopping.set()
        if self._maintenance is not None:
            self._maintenance.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._maintenance
            self._maintenance = None

    async def _maintain(self) -> None:
        while not self._stopping.is_set():
            await wait_for_change(self._stopping, self._sync_seconds)
            if self._stopping.is_set():
                return
            try:
                await self.refresh()
                await self.store.sweep()
            except StateStoreError as exc:
                log.warning("pairing: the state store failed a sync, will retry: %s", exc)

    async def refresh(self) -> bool:
        """Reload the paired sets when another process changed them; whether it did."""
        if await self.store.get(META, "revision") == self._revision:
            return False
        await self.load()
        return True

    async def sweep(self) -> int:
        """Remove expired requests and notices from the store now."""
        return await self.store.sweep()

    def now(self) -> datetime:
        """The time on the service's clock (injectable, for tests)."""
        return self._clock()

    # -- the hot path

    def is_paired(self, channel: str, user_id: str) -> bool:
        """Whether ``user_id`` is paired on ``channel`` (memory only, no I/O)."""
        return user_id in self._paired.get(channel, ())

    def paired(self, channel: str) -> frozenset[str]:
        return frozenset(self._paired.get(channel, ()))

    # -- requests

    async def ask(
        self, channel: str, user_id: str, *, user_name: str = "", chat_id: str = ""
    ) -> Ask:
        """An unknown sender's request: their code (new or the same again) or no room."""
        self._check(channel)
        async with self._lock:
            now = self._clock()
            everything = await self._requests(channel)
            live = [r for r in everything if r.expires > now]
            for request in live:
                if request.user_id == user_id:
                    return Ask(outcome="again", request=request)
            if len(live) >= self._max_pending:
                return Ask(outcome="full")
            request = PairingRequest(
                channel=channel,
                user_id=user_id,
                user_name=user_name,
                chat_id=chat_id or user_id,
                code=new_code({r.code for r in everything}),
                created=now,
                expires=now + self._ttl,
            )
            await self.store.put(
                PENDING,
                f"{channel}:{request.code}",
                request.model_dump(mode="json"),
                expires=request.expires + EXPIRED_KEPT,
            )
        log.info("pairing: %s user %s asked; code %s", channel, user_id, request.code)
        return Ask(outcome="issued", request=request)

    async def approve(self, channel: str, code: str) -> Outcome:
        """Pair the user who holds ``code`` and tell them to send their message again."""
        async with self._lock:
            request = await self._live_request(channel, code)
            user = PairedUser(
                channel=channel,
                user_id=request.user_id,
                user_name=request.user_name,
                approved=self._clock(),
            )
            await self.store.put(
                PAIRED, f"{channel}:{request.user_id}", user.model_dump(mode="json")
            )
            await self.store.delete(PENDING, f"{channel}:{request.code}")
            self._paired.setdefault(channel, set()).add(request.user_id)
            await self._bump()
        log.info("pairing: %s user %s approved", channel, request.user_id)
        return Outcome(request=request, told=await self._tell(request, APPROVED_TEXT))

    async def deny(self, channel: str, code: str) -> Outcome:
        """Drop the request that holds ``code``; its user is told once."""
        async with self._lock:
            request = await self._live_request(channel, code)
            await self.store.delete(PENDING, f"{channel}:{request.code}")
        log.info("pairing: %s user %s denied", channel, request.user_id)
        return Outcome(request=request, told=await self._tell(request, DENIED_TEXT))

    async def revoke(self, channel: str, user_id: str) -> PairedUser:
        """Unpair ``user_id``: their next direct message is treated as a stranger's."""
        self._check(channel)
        async with self._lock:
            raw = await self.store.get(PAIRED, f"{channel}:{user_id}")
            if raw is None:
                raise NotPairedError(channel, user_id)
            await self.store.delete(PAIRED, f"{channel}:{user_id}")
            self._paired.get(channel, set()).discard(user_id)
            await self._bump()
        log.info("pairing: %s user %s revoked", channel, user_id)
        return PairedUser.model_validate(raw)

    async def listing(self) -> dict[str, ChannelPairing]:
        """Every channel's live pending requests (oldest first) and paired users (by id)."""
        now = self._clock()
        out: dict[str, ChannelPairing] = {}
        for channel in self.channels:
            pending = sorted(
                (r for r in await self._requests(channel) if r.expires > now),
                key=lambda r: r.created,
            )
            paired = [
                PairedUser.model_validate(raw)
                for _, raw in await self.store.scan(PAIRED, f"{channel}:")
            ]
            out[channel] = ChannelPairing(pending=tuple(pending), paired=tuple(paired))
        return out

    # -- telling users

    async def deliver_notices(self) -> int:
        """Tell users what was decided while they could not be told; how many were told."""
        if self.notify is None:
            return 0
        told = 0
        for key, raw in await self.store.scan(NOTICES):
            notice = Notice.model_validate(raw)
            if notice.channel not in self.channels:
                continue
            try:
                await self.notify(notice.channel, notice.chat_id, notice.text)
            except (ChannelError, OSError) as exc:
                log.warning("pairing: still cannot tell %s: %s", key, exc)
                continue
            await self.store.delete(NOTICES, key)
            told += 1
        return told

    async def _tell(self, request: PairingRequest, text: str) -> bool:
        if self.notify is not None:
            try:
                await self.notify(request.channel, request.chat_id, text)
                return True
            except (ChannelError, OSError) as exc:
                log.warning(
                    "pairing: could not tell %s user %s now (%s); they are told at the next start",
                    request.channel,
                    request.user_id,
                    exc,
                )
        notice = Notice(channel=request.channel, chat_id=request.chat_id, text=text)
        await self.store.put(
            NOTICES,
            f"{request.channel}:{request.user_id}",
            notice.model_dump(mode="json"),
            expires=self._clock() + NOTICE_KEPT,
        )
        return False

    # -- helpers

    def _check(self, channel: str) -> None:
        if channel not in self.channels:
            raise UnknownChannelError(channel, self.channels)

    async def _requests(self, channel: str) -> list[PairingRequest]:
        return [
            PairingRequest.model_validate(raw)
            for _, raw in await self.store.scan(PENDING, f"{channel}:")
        ]

    async def _live_request(self, channel: str, code: str) -> PairingRequest:
        self._check(channel)
        wanted = normal_code(code)
        if len(wanted) != CODE_LENGTH or any(c not in ALPHABET for c in wanted):
            raise UnknownCodeError(channel, code.strip())
        raw = await self.store.get(PENDING, f"{channel}:{wanted}")
        if raw is None:
            raise UnknownCodeError(channel, wanted)
        request = PairingRequest.model_validate(raw)
        if request.expires <= self._clock():
            raise ExpiredCodeError(channel, wanted)
        return request

    async def _bump(self) -> None:
        token = secrets.token_hex(8)
        await self.store.put(META, "revision", token)
        self._revision = token


def listing_json(listing: dict[str, ChannelPairing]) -> dict[str, Any]:
    """A listing as JSON: what ``gateway pairing list --json`` prints."""
    return {
        "channels": {
            name: {
                "pending": [r.model_dump(mode="json") for r in found.pending],
                "paired": [u.model_dump(mode="json") for u in found.paired],
            }
            for name, found in listing.items()
        }
    }


def outcome_json(outcome: Outcome) -> dict[str, Any]:
    return {"request": outcome.request.model_dump(mode="json"), "told": outcome.told}
