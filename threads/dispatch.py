"""``dispatch``: the single turn-terminating routing primitive (seed 000).

A call is validated whole before anything is sent: every send's target, its
params, the kind asserted against the wake that started the turn, and the
uniqueness rules. An invalid call is a tool error naming the field, where it
belongs and the corrected shape; the turn goes on so the model can fix it.
A valid call is applied in order and ends the turn; the result reports who
received each send and which child sessions were created or resumed.

Every send is recorded in the outbound ledger, in one durable append with
the call itself, before the first one leaves; each send's mark lands with
the turn's end. A gateway that dies part-way through leaves a record of
every send, which the restart completes without repeating a delivered one
(:mod:`threads.outbound`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from threads import outbound
from threads.agent.tools import ToolContext, ToolOutput, json_text, tool
from threads.errors import InvalidKeyError
from threads.faults import fault
from threads.keys import TASK_ID, USER_CHANNELS, SessionKey, base_channel, endpoint_key
from threads.outbound import Outgoing
from threads.pool.pool import DELEGATION
from threads.session_sink import WakeSink
from threads.sessions import access
from threads.sessions.catalog import Catalog
from threads.sessions.errors import SessionToolError
from threads.sinks import OutboundMessage, Sink
from threads.wake import (
    Cause,
    SessionCaller,
    SystemCaller,
    UserCaller,
    Wake,
    WakeSource,
    wake_to_wire,
)

if TYPE_CHECKING:
    from threads.manager import ThreadManager

Target = Literal["caller:user", "caller:session", "user", "subagent", "fork", "session"]

# The params keys a model may put beside to and body by mistake; the error moves them.
PARAM_KEYS = ("task_id", "agent", "session_key", "channel", "user_id")
SHOWN_BODY = 40


class Send(BaseModel):
    """One send: a target, a body, and the target's params."""

    model_config = ConfigDict(extra="forbid")

    to: Target = Field(
        description=(
            "caller:user | caller:session | user | subagent | fork | session — see the tool "
            "description for when to use which"
        )
    )
    body: str = Field(default="", description="the message (for subagent/fork: the task)")
    params: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "subagent/fork: {task_id, agent?}; session: {session_key} or {channel, user_id}"
        ),
    )

    @model_validator(mode="before")
    @classmethod
    def _params_in_params(cls, data: Any) -> Any:
        """A param given beside ``to`` and ``body`` is refused with the send as it should be."""
        if not isinstance(data, dict):
            return data
        misplaced = [k for k in PARAM_KEYS if k in data]
        if not misplaced:
            return data
        unknown = sorted(set(data) - {*misplaced, "to", "body", "params"})
        raise ValueError(
            f"{', '.join(misplaced)} {'belongs' if len(misplaced) == 1 else 'belong'} in params, "
            "not at the top level of the send: a send has only to, body and params"
            + (f" (drop {unknown})" if unknown else "")
            + f". Send it as {corrected_shape(data, misplaced)}"
        )


def corrected_shape(data: dict[str, Any], misplaced: Sequence[str]) -> str:
    """The send ``data`` with the ``misplaced`` keys moved into params, as JSON."""
    given = data.get("params")
    params = dict(given) if isinstance(given, dict) else {}
    params.update({k: data[k] for k in misplaced})
    body = data.get("body", "...")
    if not isinstance(body, str) or len(body) > SHOWN_BODY:
        body = "..."
    shape = {"to": data.get("to", "..."), "body": body, "params": params}
    return json.dumps(shape, ensure_ascii=False, default=str)


class DispatchArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    sends: list[Send] = Field(
        default_factory=list, description="where the turn's output goes; [] ends silently"
    )


DESCRIPTION = """End the turn and route its output. Call it exactly once, last.
Targets (`to`):
- caller:user — reply to whoever woke this turn, asserting it is the channel user (no caller_session_key in the wake header).
- caller:session — reply to the session that woke you (caller_session_key present in the wake header).
- user — message your own channel user (user-facing sessions, or when the wake header says your output goes to a user), e.g. when cron or another session woke you.
- subagent — params {task_id, agent?}: start (or resume, same task_id) a child thread with `body` as its task.
- fork — params {task_id, agent?}: a child that starts from this conversation's history.
- session — wake another session's AI: params {session_key} (must exist) or {channel, user_id} (created if missing; groups: user_id "group:<chatid>").
System callers (cron, heartbeat, progress, child_completed) cannot be answered: end with dispatch({}) or use `user`.
dispatch({}) ends the turn silently; history is still recorded."""


@dataclass(frozen=True, slots=True, kw_only=True)
class _Planned:
    index: int
    send: Send
    target: SessionKey | None = None
    sink: Sink | None = None
    agent: str | None = None


class DispatchError(ValueError):
    """An invalid dispatch call; the message tells the model how to fix it."""


async def plan(sends: Sequence[Send], ctx: ToolContext) -> list[_Planned]:
    """Validate every send against the wake and the rules; raise :class:`DispatchError`."""
    manager: ThreadManager = ctx.services
    wake: Wake = ctx.run.payload
    key = SessionKey(ctx.key)
    problems: list[str] = []
    planned: list[_Planned] = []
    seen_targets: set[str] = set()
    callers = users = 0
    for index, send in enumerate(sends):
        where = f"sends[{index}]"
        if not send.body.strip():
            problems.append(f"{where}.body is empty: every send needs a body (the message or task)")
            continue
        if send.to in ("caller:user", "caller:session"):
            callers += 1
            problem = _check_caller(send.to, wake, where)
            if problem:
                problems.append(problem)
                continue
            _no_params(send, where, problems)
            planned.append(_Planned(index=index, send=send, sink=wake.sink))
            continue
        if send.to == "user":
            users += 1
            sink = manager.user_sink(key)
            if sink is None and _names_a_user(wake):
                sink = wake.sink
            if sink is None and key.is_user_facing:
                problems.append(f"{where}.to 'user': {_not_running(key.channel)}")
                continue
            if sink is None:
                problems.append(
                    f"{where}.to 'user' is only valid in a user-facing session "
                    f"(telegram:*, discord:*, cli, web:*); {key} is not one. Reply to your caller "
                    'instead: {"to": "caller:session", "body": ...} when caller_session_key is set'
                )
                continue
            _no_params(send, where, problems)
            planned.append(_Planned(index=index, send=send, sink=sink))
            continue
        if send.to in ("subagent", "fork"):
            item = _plan_child(send, index, key, manager, problems)
        else:
            item = await _plan_session(send, index, key, ctx.agent, manager, problems)
        if item is None:
            continue
        target = str(item.target)
        if target in seen_targets:
            problems.append(
                f"{where} targets {target} a second time: each target at most once per call"
            )
            continue
        seen_targets.add(target)
        planned.append(item)
    if callers > 1:
        problems.append("at most one caller:* send per call; merge the bodies into one")
    if users > 1:
        problems.append("at most one 'user' send per call; merge the bodies into one")
    if problems:
        raise DispatchError(
            "dispatch refused, nothing was sent — fix and call again:\n- " + "\n- ".join(problems)
        )
    return planned


def _check_caller(to: str, wake: Wake, where: str) -> str:
    if wake.sink.drops:
        return (
            f"{where}.to {to!r}: this turn's caller is {_caller_name(wake)} and its output is "
            "dropped, so no caller form is valid. End with dispatch({}) or, in a user-facing "
            'session, use {"to": "user", "body": ...}'
        )
    if isinstance(wake.caller, SystemCaller):
        return (
            f"{where}.to {to!r}: this turn's caller is {wake.caller.name}, a system source "
            "that cannot be answered. The wake header's delivery line says where your output "
            'goes: answer in plain text, or use {"to": "user", "body": ...}'
        )
    if to == "caller:user" and not isinstance(wake.caller, UserCaller):
        return (
            f"{where}.to 'caller:user' asserts the channel user woke you, but the caller is "
            f"session {wake.caller_session_key} (caller_session_key is in the wake header). "
            'Use {"to": "caller:session", "body": ...}'
        )
    if to == "caller:session" and not isinstance(wake.caller, SessionCaller):
        return (
            f"{where}.to 'caller:session' asserts another session woke you, but there is no "
            "caller_session_key in the wake header: the caller is the channel user. "
            'Use {"to": "caller:user", "body": ...}'
        )
    return ""


def _names_a_user(wake: object) -> bool:
    """A system wake that carries a live sink names this turn's user (a cron job's chat)."""
    return isinstance(wake, Wake) and isinstance(wake.caller, SystemCaller) and not wake.sink.drops


def _caller_name(wake: Wake) -> str:
    return wake.source.value


def _no_params(send: Send, where: str, problems: list[str]) -> None:
    if send.params:
        problems.append(
            f"{where}.params must be empty for to={send.to!r}; remove {sorted(send.params)}"
        )


def _plan_child(
    send: Send, index: int, key: SessionKey, manager: ThreadManager, problems: list[str]
) -> _Planned | None:
    where = f"sends[{index}].params"
    extra = set(send.params) - {"task_id", "agent"}
    if extra:
        problems.append(
            f"{where} has unknown keys {sorted(extra)}; {send.to} takes {{task_id, agent?}}"
        )
        return None
    task_id = send.params.get("task_id", "")
    if not task_id:
        problems.append(
            f"{where}.task_id is required for to={send.to!r}: "
            f'{{"to": "{send.to}", "params": {{"task_id": "find-news"}}, "body": "..."}}'
        )
        return None
    if not TASK_ID.fullmatch(task_id):
        problems.append(f"{where}.task_id {task_id!r} must match [a-z0-9_-]+ (e.g. 'find-news')")
        return None
    agent = send.params.get("agent") or None
    if agent is not None and agent not in manager.config.agents:
        problems.append(
            f"{where}.agent {agent!r} is not a configured agent; have: {sorted(manager.config.agents)}"
        )
        return None
    try:
        target = key.child(send.to, task_id)
    except InvalidKeyError as exc:
        problems.append(f"{where}.task_id: {exc}")
        return None
    return _Planned(index=index, send=send, target=target, agent=agent)


async def _plan_session(
    send: Send,
    index: int,
    key: SessionKey,
    agent: str,
    manager: ThreadManager,
    problems: list[str],
) -> _Planned | None:
    where = f"sends[{index}].params"
    params = send.params
    extra = set(params) - {"session_key", "channel", "user_id"}
    if extra:
        problems.append(f"{where} has unknown keys {sorted(extra)}")
        return None
    if "session_key" in params:
        if "channel" in params or "user_id" in params:
            problems.append(
                f"{where}: session_key and channel+user_id are two exclusive forms; pass one"
            )
            return None
        try:
            target = SessionKey(params["session_key"])
        except InvalidKeyError as exc:
            problems.append(f"{where}.session_key: {exc}")
            return None
        if target == key:
            problems.append(
                f"{where}.session_key {target} is this session; a session cannot wake itself"
            )
            return None
        if not await manager.session_exists(target):
            problems.append(
                f"{where}.session_key {target} does not exist. To reach a channel user who may have "
                'no session yet use {"channel": "telegram", "user_id": "123"} instead'
            )
            return None
        if not await _may_wake(key, agent, target, manager):
            problems.append(f"{where}.session_key {target}: {_NOT_YOURS}")
            return None
        return _Planned(index=index, send=send, target=target)
    channel, user_id = params.get("channel", ""), params.get("user_id", "")
    if not channel or not user_id:
        problems.append(
            f"{where} needs session_key, or channel and user_id: "
            '{"session_key": "telegram:12345"} or {"channel": "telegram", "user_id": "12345"}'
        )
        return None
    if base_channel(channel) not in USER_CHANNELS:
        problems.append(
            f"{where}.channel {channel!r} is not a channel; one of {sorted(USER_CHANNELS)}"
        )
        return None
    try:
        target = endpoint_key(channel, user_id)
    except InvalidKeyError as exc:
        problems.append(f"{where}.user_id: {exc}")
        return None
    if target == key:
        problems.append(f"{where} names this session ({target}); a session cannot wake itself")
        return None
    if manager.user_sink(target) is None:
        problems.append(f"{where}.channel {channel!r}: {_not_running(channel)}")
        return None
    if not await _may_wake(key, agent, target, manager):
        problems.append(f"{where} names {target}: {_NOT_YOURS}")
        return None
    return _Planned(index=index, send=send, target=target)


def _not_running(channel: str) -> str:
    return (
        f"the {channel} channel is not running in this gateway (not enabled, or it failed to "
        "start), so nothing can reach that chat now; tell your caller instead"
    )


_NOT_YOURS = (
    "another conversation, which this chat session may not wake: it reaches only the sessions "
    "it started. Answer your own user instead (an operator may grant more: session.owners, or "
    "the agent's session_tools_visibility = 'all')"
)


async def _may_wake(
    key: SessionKey, agent: str, target: SessionKey, manager: ThreadManager
) -> bool:
    """Whether ``key``'s dispatch may wake ``target`` (the session-tool scope, see ``access``)."""
    config = manager.config
    seen = access.scope(key, agent, config)
    if seen == "all":
        return True
    if seen == "own" and target.startswith(f"{key}:"):
        return True
    catalog = Catalog.of(manager)
    try:
        resolved = await catalog.resolve(target)
        view = await catalog.view(resolved.key, resolved.session_id)
    except (SessionToolError, InvalidKeyError):
        return False
    return access.visible(key, agent, config, target, view.meta)


async def apply(planned: Sequence[_Planned], ctx: ToolContext) -> dict[str, Any]:
    """Record every send, then deliver them in order; the report names each receiver."""
    manager: ThreadManager = ctx.services
    run = ctx.run
    key = SessionKey(ctx.key)
    wake: Wake = run.payload
    cause = Cause.after(wake)
    sends: list[Outgoing] = []
    existed: list[bool] = []
    for item in planned:
        send = item.send
        kind = f"{outbound.DISPATCH}{send.to}"
        if item.sink is not None:
            message = OutboundMessage(text=send.body)
            sends.append(
                outbound.outgoing(run.send_id(), item.sink, message, kind=kind, run_id=run.run_id)
            )
            existed.append(True)
            continue
        assert item.target is not None
        exists = await manager.session_exists(item.target)
        existed.append(exists)
        meta: dict[str, str] = {}
        if send.to in ("subagent", "fork"):
            # A child of this session: a delegation, its receipt in the append that records the send.
            delegation, accepted = manager.pool.expect(
                run.session, key, item.target, prompt=send.body, run=run.run_id
            )
            run.ledger.append(accepted)
            meta[DELEGATION] = delegation.receipt
            if send.to == "subagent" and not exists:
                await manager.pool.create_child(delegation, agent=item.agent)
        child_wake = Wake(
            source=WakeSource.SESSION,
            body=send.body,
            caller=SessionCaller(session_key=key),
            sink=manager.session_sink(key, item.target, cause=cause),
            agent=item.agent,
            meta=meta,
            chain=cause.chain,
            depth=cause.depth,
        )
        sink = WakeSink(
            target=item.target,
            wake=child_wake,
            manager=manager,
            fork_of=run.session if send.to == "fork" else None,
        )
        sends.append(
            outbound.outgoing(
                run.send_id(),
                sink,
                OutboundMessage(text=send.body),
                kind=kind,
                run_id=run.run_id,
                target=str(item.target),
                wake=wake_to_wire(child_wake),
            )
        )
    if sends:
        await run.record(sends)
    delivered: list[dict[str, Any]] = []
    notes: list[str] = []
    replied = False
    for item, out, exists in zip(planned, sends, existed, strict=True):
        send = item.send
        entry: dict[str, Any] = {"to": send.to}
        result, done = await outbound.send(out)
        if result is not None:
            fault("after_delivery_before_record")
        if done is not None:
            run.ledger.append(done)
        if result is None:
            entry["error"] = done.error if done is not None else "not sent: the gateway is stopping"
        elif item.target is None:
            entry["delivered_to"] = result.delivered_to
            if result.blocked:
                entry["blocked"] = result.blocked
            replied = replied or send.to == "caller:session"
        elif result.blocked:
            entry["blocked"] = result.blocked
        else:
            note = "resumed" if exists else "created"
            if send.to == "session" and exists:
                note = "woken"
            entry["delivered_to"] = result.delivered_to
            entry["session_key"] = str(item.target)
            entry["run_id"] = result.message_ids[0] if result.message_ids else ""
            entry["note"] = note
            notes.append(f"{item.target}: {note}")
        delivered.append(entry)
    report: dict[str, Any] = {"ok": True, "delivered_to": delivered}
    if notes:
        report["notes"] = notes
    if not planned:
        report["note"] = "turn ended silently; history recorded"
    report["replied_to_caller_session"] = replied and wake.caller_session_key is not None
    return report


@tool("dispatch", DESCRIPTION, DispatchArgs, terminates=True)
async def dispatch_tool(args: DispatchArgs, ctx: ToolContext) -> ToolOutput:
    try:
        planned = await plan(args.sends, ctx)
    except DispatchError as exc:
        return ToolOutput(content=str(exc), is_error=True)
    report = await apply(planned, ctx)
    # What the turn answered its caller, for whoever reads the turn's end (an exchange).
    reply = next((p.send.body for p in planned if p.send.to.startswith("caller:")), "")
    return ToolOutput(content=json_text(report), ends_turn=True, data={**report, "reply": reply})
