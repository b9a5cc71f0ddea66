"""Approvals where the person is: the question in their chat, the buttons, the commands.

When a call parks, the :class:`ApprovalDesk` asks in the chat of the turn
that parked (or the conversation's own chat, for a turn no person started):
with Approve / Always / Deny buttons on a channel that has them
(:class:`~channels.base.AsksApproval`), else as a message naming the
commands. ``/approve ID``, ``/always ID`` and ``/deny ID [reason]`` are chat
commands on every channel, and a button press arrives as one of them; each
goes to :meth:`~threads.approvals.service.ApprovalService.decide`, which
checks who may decide. Once a request is decided — from a chat, the CLI,
the dashboard or by expiry — the question is edited to say how (its buttons
go), or, where it cannot be edited, the chat is told in one line.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import TYPE_CHECKING

import orjson

from channels.approvals import commands_hint
from channels.base import ApprovalAsk, AsksApproval, Follows, Inbound
from gateway.router import Command, endpoint_of
from threads.approvals.errors import ApprovalError, NotAllowedError, NotPendingError
from threads.approvals.service import ApprovalService, Decider, Settled, Waiting
from threads.keys import SessionKey
from threads.runner import Thread
from threads.sinks import OutboundMessage
from threads.turns import Turn
from threads.wake import UserCaller, Wake

if TYPE_CHECKING:
    from gateway.app import Gateway

log = logging.getLogger(__name__)

ARGS_SHOWN = 600


def question(waiting: Waiting, *, buttons: bool) -> str:
    """The words of an approval question: what would run, why it asks, until when."""
    r = waiting.request
    args = orjson.dumps(r.args or {}, option=orjson.OPT_INDENT_2).decode()
    if len(args) > ARGS_SHOWN:
        args = args[: ARGS_SHOWN - 1] + "…"
    lines = [f"Approval needed: the agent wants to run {r.tool}", args]
    if r.reason:
        lines.append(f"Why it asks: {r.reason}")
    if r.expiry is not None:
        lines.append(f"Denied on its own if undecided by {r.expiry:%Y-%m-%d %H:%M} UTC.")
    if not buttons:
        lines.append(commands_hint(r.id))
    return "\n".join(lines)


def outcome_text(settled: Settled) -> str:
    """How a request was decided, in one line (the question's new text)."""
    d, tool = settled.decision, settled.request.tool
    if d.via == "expiry":
        return f"⌛ Expired: {tool} was not run (no one decided in time)."
    if d.outcome != "approve":
        return f"⛔ Denied by {d.who}: {tool} was not run ({d.reason})."
    if d.always:
        return f"✅ Approved by {d.who}, and allowed from now on here: {tool} runs."
    return f"✅ Approved by {d.who}: {tool} runs."


class ApprovalDesk:
    """Asks people in their chats and takes their answers; see the module docstring."""

    def __init__(self, gateway: Gateway, service: ApprovalService) -> None:
        self.gateway = gateway
        self.service = service
        # request id → where its question was shown (channel, chat, message id)
        self._shown: dict[str, list[tuple[str, str, str]]] = defaultdict(list)
        # requests being decided from a chat, which hears the command's own answer
        self._answering: set[str] = set()
        service.asks.append(self.ask)
        service.settles.append(self.settle)
        gateway.manager.observe(self._behind)

    def commands(self) -> dict[str, Command]:
        return {
            "/approve": self._command(approve=True),
            "/always": self._command(approve=True, always=True),
            "/deny": self._command(approve=False),
        }

    # -- asking

    def where(self, waiting: Waiting) -> tuple[str, str] | None:
        """The chat to ask in: the parked turn's, else the conversation's own."""
        sink = waiting.sink
        if sink.get("kind") == "channel" and sink.get("channel") in self.gateway.channels:
            return sink["channel"], sink.get("chat", "")
        endpoint = endpoint_of(SessionKey(waiting.key).root)
        if endpoint is not None and endpoint[0] in self.gateway.channels:
            return endpoint
        return None

    async def ask(self, waiting: Waiting) -> None:
        where = self.where(waiting)
        if where is None:
            log.info(
                "approval request %s (%s) has no chat to ask in; decide it with "
                "`gateway approvals` or the dashboard",
                waiting.request.id,
                waiting.key,
            )
            return
        name, chat = where
        channel = self.gateway.channels[name]
        if isinstance(channel, AsksApproval):
            ask = ApprovalAsk(request_id=waiting.request.id, text=question(waiting, buttons=True))
            message_id = await channel.ask_approval(chat, ask)
            self._shown[waiting.request.id].append((name, chat, message_id))
            return
        await channel.deliver(chat, OutboundMessage(text=question(waiting, buttons=False)))

    async def settle(self, settled: Settled) -> None:
        text = outcome_text(settled)
        shown = self._shown.pop(settled.request.id, [])
        for name, chat, message_id in shown:
            shows = self.gateway.channels.get(name)
            if shows is not None and isinstance(shows, AsksApproval):
                await shows.settle_approval(chat, message_id, text)
        where = self.where(
            Waiting(key=settled.key, session_id="", agent="", request=settled.request)
        )
        if where is None:
            return
        channel = self.gateway.channels[where[0]]
        if not shown and settled.request.id not in self._answering:
            # Decided away from the chat (the CLI, the dashboard, the clock): it hears it once.
            await channel.deliver(where[1], OutboundMessage(text=text))
        if settled.resume is not None and isinstance(channel, Follows):
            channel.follow(where[1], settled.resume)  # typing while the resumed turn runs

    def _behind(self, thread: Thread, wake: Wake, turn: Turn) -> None:
        """A person whose message waits behind a pending approval is told why it waits."""
        pending = thread.session.approvals.pending()
        if not pending or not isinstance(wake.caller, UserCaller) or wake.sink.drops:
            return
        ids = ", ".join(f"/approve {r.id}" for r in pending)
        text = f"Your message waits until the pending approval is decided ({ids} or /deny)."
        self.gateway.manager.spawn(_tell(wake, text), name="tell a message waits")

    # -- answers from chats

    def _command(self, *, approve: bool, always: bool = False) -> Command:
        async def decide(inbound: Inbound, key: SessionKey, rest: str) -> str:
            request_id, _, reason = rest.partition(" ")
            if not request_id:
                return self._pending_here(key)
            where = (inbound.channel, inbound.chat_id, inbound.message_id)
            if inbound.press and inbound.message_id and where not in self._shown[request_id]:
                self._shown[request_id].append(where)
            decider = Decider(
                channel=inbound.channel, user_id=inbound.user_id, name=inbound.user_name
            )
            self._answering.add(request_id)
            try:
                settled = await self.service.decide(
                    request_id,
                    approve=approve,
                    decider=decider,
                    reason=reason.strip(),
                    always=always,
                    key=str(key),
                )
            except NotPendingError as exc:
                return f"This request is no longer waiting: {exc.fate}."
            except NotAllowedError:
                return (
                    "You can't decide this one: only the person who asked, an owner or an "
                    "approver can."
                )
            except ApprovalError as exc:
                return f"Not recorded: {exc}"
            finally:
                self._answering.discard(request_id)
            return _answer(settled)

        return decide

    def _pending_here(self, key: SessionKey) -> str:
        thread = self.gateway.manager.thread(key)
        pending = thread.session.approvals.pending() if thread is not None else []
        if not pending:
            return "Nothing here waits for an approval."
        lines = [f"{r.id}: {r.tool}" for r in pending]
        return "Waiting for a decision:\n" + "\n".join(lines) + "\nReply /approve ID or /deny ID."


async def _tell(wake: Wake, text: str) -> None:
    try:
        await wake.sink.deliver(OutboundMessage(text=text))
    except Exception:
        log.exception("telling a person that their message waits failed")


def _answer(settled: Settled) -> str:
    d, tool = settled.decision, settled.request.tool
    if d.outcome != "approve":
        return f"Denied: {tool} will not run; the agent is told."
    if d.always:
        return f"Approved: {tool} runs now, and this same call runs without asking from now on."
    return f"Approved: {tool} runs now."
