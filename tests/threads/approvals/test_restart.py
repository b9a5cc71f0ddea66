"""Approvals survive restarts; a decision is spent by the resume that applied it."""

from __future__ import annotations

from tests.threads.approvals.conftest import Rig
from tests.threads.approvals.test_decisions import OWNER, park, settle, tool_results
from threads.context import INTERRUPTED
from threads.ids import new_entry_id
from threads.store import open_store
from threads.store.entries import (
    ApprovalAuditEntry,
    ApprovalDecisionEntry,
    ApprovalRequestEntry,
    TurnEntry,
)
from threads.testing.scripted import call, dispatch


async def test_a_pending_request_is_the_same_after_a_restart_and_resumes_once(rig: Rig) -> None:
    request_id = await park(rig)
    await rig.restart()
    assert rig.service is not None
    (waiting,) = await rig.service.waiting()
    assert waiting.request.id == request_id
    assert rig.ran == []
    rig.model.add(dispatch(("caller:user", "deployed")))
    await rig.service.decide(request_id, approve=True, decider=OWNER)
    await rig.inbox("telegram:7").wait(1)
    await settle(rig)
    assert rig.ran == [{"env": "eu", "key": "telegram:7"}]
    await rig.restart()
    assert rig.service is not None
    assert await rig.service.waiting() == []
    assert len(rig.ran) == 1


async def test_a_decision_whose_resume_never_ran_resumes_at_the_next_start(rig: Rig) -> None:
    request_id = await park(rig)
    assert rig.manager is not None
    thread = rig.manager.thread("telegram:7")
    assert thread is not None
    session_id, leaf = thread.session.id, thread.session.leaf
    await rig.close()
    # The writer died between recording the decision and starting the resume.
    store = open_store(rig.store_url)
    request = next(
        e for e in (await store.load(session_id)).entries if isinstance(e, ApprovalRequestEntry)
    )
    assert request.id == request_id
    await store.append(
        session_id,
        [
            ApprovalDecisionEntry(
                id=new_entry_id(),
                parent=leaf,
                call_id=request.call_id,
                outcome="approve",
                who="telegram:7 (Ada)",
                via="telegram",
                run_id=request.run_id,
                request_id=request.id,
            )
        ],
    )
    await store.close()
    rig.model.add(dispatch(("caller:user", "deployed")))
    await rig.start()
    await rig.inbox("telegram:7").wait(1)
    await settle(rig)
    assert rig.ran == [{"env": "eu", "key": "telegram:7"}]


async def test_a_resume_cut_short_by_a_crash_is_not_run_again(rig: Rig) -> None:
    request_id = await park(rig)
    assert rig.manager is not None
    thread = rig.manager.thread("telegram:7")
    assert thread is not None
    session_id, leaf = thread.session.id, thread.session.leaf
    await rig.close()
    # The writer recorded the decision and started the resume, then died in the tool.
    store = open_store(rig.store_url)
    request = next(
        e for e in (await store.load(session_id)).entries if isinstance(e, ApprovalRequestEntry)
    )
    decision = ApprovalDecisionEntry(
        id=new_entry_id(),
        parent=leaf,
        call_id=request.call_id,
        outcome="approve",
        who="telegram:7 (Ada)",
        via="telegram",
        run_id=request.run_id,
        request_id=request_id,
    )
    started = ApprovalAuditEntry(
        id=new_entry_id(),
        parent=decision.id,
        step="resume",
        outcome="started",
        run_id=f"{session_id}-t2",
        decisions=(decision.id,),
    )
    await store.append(session_id, [decision, started])
    await store.close()
    rig.model.add(dispatch(("caller:user", "it was interrupted")))
    await rig.start()
    await rig.inbox("telegram:7").wait(1)
    await settle(rig)
    assert rig.ran == []
    assert tool_results(rig, "telegram:7")[0] == INTERRUPTED
    assert rig.service is not None
    assert await rig.service.waiting() == []
    thread = rig.manager.thread("telegram:7")
    assert thread is not None
    canceled = [e for e in thread.session.entries() if isinstance(e, TurnEntry) and e.canceled]
    assert [e.run_id for e in canceled] == [f"{session_id}-t2"]


async def test_a_branch_back_to_a_decided_boundary_asks_again_instead_of_running_again(
    rig: Rig,
) -> None:
    assert rig.service is not None
    assert rig.manager is not None
    request_id = await park(rig)
    thread = rig.manager.thread("telegram:7")
    assert thread is not None
    boundary = thread.session.approvals.boundary()
    assert boundary is not None
    parked_at = thread.session.leaf
    rig.model.add(dispatch(("caller:user", "deployed")))
    await rig.service.decide(request_id, approve=True, decider=OWNER)
    await settle(rig)
    assert len(rig.ran) == 1

    await thread.session.branch(parked_at)
    assert [r.id for r in thread.session.approvals.pending()] == [request_id]
    assert thread.state == "pending"
    await settle(rig)
    assert len(rig.ran) == 1  # the spent approval runs nothing on this line

    rig.model.add(dispatch(("caller:user", "deployed again")))
    await rig.service.decide(request_id, approve=True, decider=OWNER)
    await settle(rig)
    assert len(rig.ran) == 2


async def test_a_grant_and_its_trail_outlive_a_restart(rig: Rig) -> None:
    assert rig.service is not None
    request_id = await park(rig)
    rig.model.add(dispatch(("caller:user", "deployed")))
    settled = await rig.service.decide(request_id, approve=True, decider=OWNER, always=True)
    assert settled.grant is not None
    await settle(rig)
    await rig.restart()
    assert rig.manager is not None
    rig.model.add(call("deploy", env="eu"), dispatch(("caller:user", "again")))
    await (await rig.say("telegram:7", "again")).wait(10)
    assert len(rig.ran) == 2
    thread = rig.manager.thread("telegram:7")
    assert thread is not None
    kinds = [e.TYPE for e in thread.session.approvals.audit()]
    assert kinds.count("grant") == 1
    last = [e for e in thread.session.approvals.audit() if isinstance(e, ApprovalAuditEntry)][-1]
    assert (last.step, last.grant_id) == ("grant", settled.grant.id)
