"""A call that needs a person parks the turn durably; a decision resumes it, once."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from tests.threads.approvals.conftest import Rig
from tests.threads.conftest import kinds
from threads.approvals.errors import NotPendingError
from threads.approvals.service import Decider
from threads.messages import ToolResultPart
from threads.store.entries import (
    ApprovalAuditEntry,
    ApprovalDecisionEntry,
    ApprovalRequestEntry,
    Entry,
    TurnEntry,
)
from threads.store.memory import MemoryStore
from threads.testing.scripted import call, calls, dispatch
from threads.turns import Outcome

OWNER = Decider(channel="telegram", user_id="7", name="Ada")


class BatchStore(MemoryStore):
    """The in-process store, keeping the kinds of every append batch."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[list[str]] = []

    async def append(
        self, session_id: str, entries: Sequence[Entry], *, durable: bool = True
    ) -> None:
        self.batches.append(kinds(entries))
        await super().append(session_id, entries, durable=durable)


def results(rig: Rig, key: str) -> list[str]:
    assert rig.manager is not None
    thread = rig.manager.thread(key)
    assert thread is not None
    return [
        p.content
        for m in thread.session.context()
        for p in m.content
        if isinstance(p, ToolResultPart)
    ]


async def test_the_turn_entry_request_and_audit_land_in_one_append_and_the_call_does_not_run(
    rig: Rig,
) -> None:
    assert rig.manager is not None
    store = BatchStore()
    rig.manager.store = store
    rig.model.add(call("deploy", env="eu", call_id="c1"))
    turn = await rig.say("telegram:7", "deploy to eu")
    result = await turn.wait(10)
    assert result is not None
    assert result.stop_reason == "parked"
    assert turn.outcome is Outcome.PARKED
    assert rig.ran == []
    assert ["turn", "approval_request", "approval_audit"] in store.batches
    thread = rig.manager.thread("telegram:7")
    assert thread is not None
    assert thread.state == "pending"
    (request,) = thread.session.approvals.pending()
    assert request.tool == "deploy"
    assert request.args == {"env": "eu"}
    assert len(request.args_sha256) == 64
    turn_entry = next(e for e in thread.session.entries() if isinstance(e, TurnEntry))
    assert [c.id for c in turn_entry.pending] == ["c1"]


async def test_approve_resumes_the_turn_and_runs_the_call_once(rig: Rig) -> None:
    assert rig.service is not None
    rig.model.add(call("deploy", env="eu", call_id="c1"), dispatch(("caller:user", "done")))
    turn = await rig.say("telegram:7", "deploy to eu")
    await turn.wait(10)
    (waiting,) = await rig.service.waiting()
    settled = await rig.service.decide(waiting.request.id, approve=True, decider=OWNER)
    assert settled.decision.outcome == "approve"
    assert await rig.inbox("telegram:7").wait(1) == ["done"]
    assert rig.ran == [{"env": "eu", "key": "telegram:7"}]
    assert results(rig, "telegram:7")[0] == "deployed to eu"
    assert await rig.service.waiting() == []
    assert rig.manager is not None
    thread = rig.manager.thread("telegram:7")
    assert thread is not None
    await thread.session.wait_idle()
    assert thread.state == "idle"


async def test_deny_shows_the_model_denied_and_the_reason(rig: Rig) -> None:
    assert rig.service is not None
    rig.model.add(call("deploy", env="eu", call_id="c1"), dispatch(("caller:user", "ok, not")))
    await (await rig.say("telegram:7", "deploy")).wait(10)
    (waiting,) = await rig.service.waiting()
    await rig.service.decide(
        waiting.request.id, approve=False, decider=OWNER, reason="not on a Friday"
    )
    await rig.inbox("telegram:7").wait(1)
    thread = rig.manager.thread("telegram:7") if rig.manager is not None else None
    assert thread is not None
    await thread.session.wait_idle()  # the reply is recorded before it leaves: the turn ends after
    assert rig.ran == []
    assert [r for r in results(rig, "telegram:7") if not r.startswith("{")] == [
        "DENIED: not on a Friday"
    ]
    shown = rig.model.requests[-1].messages[-1]
    assert shown.role == "tool"
    assert isinstance(shown.content[0], ToolResultPart)
    assert shown.content[0].content == "DENIED: not on a Friday"


async def test_the_audit_trail_says_who_decided_what_when_and_from_which_channel(
    rig: Rig,
) -> None:
    assert rig.service is not None
    assert rig.manager is not None
    rig.model.add(call("deploy", env="eu", call_id="c1"), dispatch(("caller:user", "done")))
    await (await rig.say("telegram:7", "deploy")).wait(10)
    (waiting,) = await rig.service.waiting()
    await rig.service.decide(waiting.request.id, approve=True, decider=OWNER)
    await rig.inbox("telegram:7").wait(1)
    thread = rig.manager.thread("telegram:7")
    assert thread is not None
    await thread.session.wait_idle()
    trail = thread.session.approvals.audit()
    assert [e.TYPE for e in trail] == [
        "approval_request",
        "approval_audit",
        "approval_decision",
        "approval_audit",
        "approval_audit",
    ]
    request, park, decision, started, ended = trail
    assert isinstance(request, ApprovalRequestEntry)
    assert isinstance(park, ApprovalAuditEntry)
    assert park.step == "park"
    assert isinstance(decision, ApprovalDecisionEntry)
    assert (decision.who, decision.via, decision.outcome) == (
        "telegram:7 (Ada)",
        "telegram",
        "approve",
    )
    assert decision.request_id == request.id
    assert decision.created >= request.created
    assert isinstance(started, ApprovalAuditEntry)
    assert started.decisions == (decision.id,)
    assert isinstance(ended, ApprovalAuditEntry)
    assert ended.outcome == "completed"


async def test_an_approved_call_is_not_run_again_by_a_second_decision(rig: Rig) -> None:
    assert rig.service is not None
    rig.model.add(call("deploy", env="eu", call_id="c1"), dispatch(("caller:user", "done")))
    await (await rig.say("telegram:7", "deploy")).wait(10)
    (waiting,) = await rig.service.waiting()
    await rig.service.decide(waiting.request.id, approve=True, decider=OWNER)
    await rig.inbox("telegram:7").wait(1)
    with pytest.raises(NotPendingError, match=r"already approved by telegram:7 \(Ada\)"):
        await rig.service.decide(waiting.request.id, approve=True, decider=OWNER, key="telegram:7")
    assert len(rig.ran) == 1


async def test_two_calls_in_one_step_park_together_and_resume_once_both_are_decided(
    rig: Rig,
) -> None:
    assert rig.service is not None
    rig.model.add(
        calls(("deploy", {"env": "eu"}), ("deploy", {"env": "us"}), call_ids=("c_eu", "c_us")),
        dispatch(("caller:user", "one region is live")),
    )
    await (await rig.say("telegram:7", "deploy everywhere")).wait(10)
    eu, us = sorted(await rig.service.waiting(), key=lambda w: w.request.call_id)
    assert (eu.request.call_id, us.request.call_id) == ("c_eu", "c_us")
    settled = await rig.service.decide(eu.request.id, approve=True, decider=OWNER)
    assert settled.resume is None  # the other call still waits
    assert rig.ran == []
    await rig.service.decide(us.request.id, approve=False, decider=OWNER, reason="not yet")
    assert await rig.inbox("telegram:7").wait(1) == ["one region is live"]
    assert rig.ran == [{"env": "eu", "key": "telegram:7"}]
    assert results(rig, "telegram:7")[:2] == ["deployed to eu", "DENIED: not yet"]


async def test_a_step_with_a_call_that_ran_and_one_that_parked_resumes_as_one_tool_message(
    rig: Rig,
) -> None:
    assert rig.service is not None
    rig.model.add(
        calls(("check_session", {"session_key": "cli"}), ("deploy", {"env": "eu"})),
        dispatch(("caller:user", "done")),
    )
    await (await rig.say("telegram:7", "check, then deploy")).wait(10)
    (waiting,) = await rig.service.waiting()
    await rig.service.decide(waiting.request.id, approve=True, decider=OWNER)
    await rig.inbox("telegram:7").wait(1)
    shown = rig.model.requests[-1].messages
    assert [m.role for m in shown[-3:]] == ["user", "assistant", "tool"]
    assert [p.name for p in shown[-1].content if isinstance(p, ToolResultPart)] == [
        "check_session",
        "deploy",
    ]


async def test_while_the_resume_runs_the_call_is_not_pending_and_a_second_decision_is_refused(
    rig: Rig,
) -> None:
    assert rig.service is not None
    assert rig.manager is not None
    rig.hold = asyncio.Event()
    rig.model.add(call("deploy", env="eu"), dispatch(("caller:user", "done")))
    await (await rig.say("telegram:7", "deploy")).wait(10)
    (waiting,) = await rig.service.waiting()
    settled = await rig.service.decide(waiting.request.id, approve=True, decider=OWNER)
    assert settled.resume is not None
    await rig.deploying.wait()
    thread = rig.manager.thread("telegram:7")
    assert thread is not None
    assert thread.state == "running"
    assert await rig.service.waiting() == []
    with pytest.raises(NotPendingError, match="already approved"):
        await rig.service.decide(waiting.request.id, approve=True, decider=OWNER, key="telegram:7")
    rig.hold.set()
    await settled.resume.wait(10)
    assert await rig.inbox("telegram:7").wait(1) == ["done"]
    assert len(rig.ran) == 1
