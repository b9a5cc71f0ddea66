"""Always, grants and their revocation; expiry; who may decide; input while a call waits."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.threads.approvals.conftest import Rig, approval_config
from threads.approvals.errors import NotAllowedError, NotPendingError
from threads.approvals.service import Decider
from threads.errors import BusyError
from threads.messages import ToolResultPart
from threads.testing.scripted import call, dispatch
from threads.turns import Outcome, Policy
from threads.wake import UserCaller, Wake, WakeSource

OWNER = Decider(channel="telegram", user_id="7", name="Ada")


def tool_results(rig: Rig, key: str) -> list[str]:
    assert rig.manager is not None
    thread = rig.manager.thread(key)
    assert thread is not None
    return [
        p.content
        for m in thread.session.context()
        for p in m.content
        if isinstance(p, ToolResultPart)
    ]


async def park(rig: Rig, key: str = "telegram:7", env: str = "eu") -> str:
    """A turn that parks on deploy(env); the pending request's id."""
    assert rig.service is not None
    rig.model.add(call("deploy", env=env))
    turn = await rig.say(key, f"deploy to {env}")
    await turn.wait(10)
    assert turn.outcome is Outcome.PARKED
    (waiting,) = [w for w in await rig.service.waiting() if w.key == key]
    return waiting.request.id


async def settle(rig: Rig, key: str = "telegram:7") -> None:
    assert rig.manager is not None
    thread = rig.manager.thread(key)
    assert thread is not None
    await thread.session.wait_idle()


async def test_always_mints_a_grant_for_the_exact_call_and_the_next_one_runs_unasked(
    rig: Rig,
) -> None:
    assert rig.service is not None
    request_id = await park(rig)
    rig.model.add(dispatch(("caller:user", "first done")))
    settled = await rig.service.decide(request_id, approve=True, decider=OWNER, always=True)
    assert settled.grant is not None
    await settle(rig)
    (grant,) = await rig.service.grants_of("telegram:7")
    assert grant.tool == "deploy"
    assert grant.describe() == 'deploy when (arguments) = {"env":"eu"}'
    assert grant.who == "telegram:7 (Ada)"

    rig.model.add(call("deploy", env="eu"), dispatch(("caller:user", "second done")))
    turn = await rig.say("telegram:7", "again")
    result = await turn.wait(10)
    assert result is not None
    assert result.stop_reason == "dispatch"
    assert rig.ran == [{"env": "eu", "key": "telegram:7"}] * 2

    # Other arguments, or another conversation, still ask.
    await park(rig, env="us")
    await park(rig, key="telegram:8", env="eu")
    assert len(rig.ran) == 2


async def test_a_revoked_grant_asks_again(rig: Rig) -> None:
    assert rig.service is not None
    request_id = await park(rig)
    rig.model.add(dispatch(("caller:user", "done")))
    settled = await rig.service.decide(request_id, approve=True, decider=OWNER, always=True)
    assert settled.grant is not None
    await settle(rig)
    revoked = await rig.service.revoke(settled.grant.id)
    assert revoked.id == settled.grant.id
    assert await rig.service.grants_of() == []
    await park(rig)
    assert len(rig.ran) == 1
    assert rig.manager is not None
    thread = rig.manager.thread("telegram:7")
    assert thread is not None
    assert [e.TYPE for e in thread.session.approvals.audit()].count("grant_revoked") == 1


async def test_an_undecided_request_is_denied_at_its_expiry_and_the_model_is_told(
    rig: Rig,
) -> None:
    assert rig.service is not None
    await park(rig)
    rig.model.add(dispatch(("caller:user", "it expired")))
    rig.clock.advance(rig.config.approvals.expiry_seconds)
    assert await rig.service.waiting() != []  # at its expiry, not yet past it
    rig.clock.advance(1)
    await rig.inbox("telegram:7").wait(1)
    await settle(rig)
    assert rig.ran == []
    assert tool_results(rig, "telegram:7")[0] == (
        "DENIED: no one decided in time (the approval request expired)"
    )
    assert await rig.service.waiting() == []


async def test_a_decision_for_an_expired_request_says_it_expired(rig: Rig) -> None:
    assert rig.service is not None
    request_id = await park(rig)
    rig.model.add(dispatch(("caller:user", "expired")))
    await rig.service.close()  # no timer: the decision itself finds the lapse
    rig.clock.advance(rig.config.approvals.expiry_seconds + 1)
    with pytest.raises(NotPendingError, match="it expired and was denied"):
        await rig.service.decide(request_id, approve=True, decider=OWNER, key="telegram:7")
    await settle(rig)
    assert rig.ran == []


async def test_only_the_person_who_asked_an_owner_or_an_approver_decides(rig: Rig) -> None:
    assert rig.service is not None
    request_id = await park(rig)
    stranger = Decider(channel="telegram", user_id="99", name="Eve")
    with pytest.raises(NotAllowedError, match="telegram:99 \\(Eve\\) may not decide"):
        await rig.service.decide(request_id, approve=True, decider=stranger)
    assert rig.ran == []
    rig.model.add(dispatch(("caller:user", "done")))
    await rig.service.decide(request_id, approve=True, decider=Decider(channel="cli"))
    await settle(rig)
    assert len(rig.ran) == 1


async def test_a_configured_approver_decides_any_request(tmp_path: Path) -> None:
    rig = Rig(
        store_url=f"jsonl://{tmp_path / 's'}",
        config=approval_config(approvers=["telegram:42"]),
    )
    await rig.start()
    try:
        assert rig.service is not None
        request_id = await park(rig)
        rig.model.add(dispatch(("caller:user", "done")))
        approver = Decider(channel="telegram", user_id="42", name="Boss")
        await rig.service.decide(request_id, approve=True, decider=approver)
        await settle(rig)
        assert len(rig.ran) == 1
    finally:
        await rig.close()


async def test_a_message_while_a_call_waits_queues_behind_the_boundary(rig: Rig) -> None:
    assert rig.service is not None
    assert rig.manager is not None
    request_id = await park(rig)
    thread = rig.manager.thread("telegram:7")
    assert thread is not None
    _accepted, queued = await thread.wake(_wake(rig, "and then say hi"), policy=Policy.STEER)
    assert not queued.done()
    assert thread.state == "pending"
    assert len(rig.model.requests) == 1  # nothing ran for it
    rig.model.add(dispatch(("caller:user", "deployed")), dispatch(("caller:user", "hi")))
    await rig.service.decide(request_id, approve=True, decider=OWNER)
    assert await rig.inbox("telegram:7").wait(2) == ["deployed", "hi"]
    await queued.wait(10)
    # The resume came first: the queued message's model call saw the call answered.
    seen = rig.model.requests[-1].messages
    assert any(
        isinstance(p, ToolResultPart) and p.content == "deployed to eu"
        for m in seen
        for p in m.content
    )


async def test_under_reject_a_waiting_call_reads_as_busy(rig: Rig) -> None:
    assert rig.manager is not None
    await park(rig)
    thread = rig.manager.thread("telegram:7")
    assert thread is not None
    with pytest.raises(BusyError, match="an approval is pending"):
        await thread.wake(_wake(rig, "now"), policy=Policy.REJECT)


async def test_an_interrupting_message_denies_the_waiting_call_and_runs_next(rig: Rig) -> None:
    assert rig.manager is not None
    assert rig.service is not None
    await park(rig)
    thread = rig.manager.thread("telegram:7")
    assert thread is not None
    rig.model.add(dispatch(("caller:user", "ok, something else")))
    _accepted, turn = await thread.wake(_wake(rig, "no, stop that"), policy=Policy.INTERRUPT)
    await turn.wait(10)
    assert rig.ran == []
    assert await rig.service.waiting() == []
    assert tool_results(rig, "telegram:7")[0] == "DENIED: interrupted by a newer message"


def _wake(rig: Rig, text: str) -> Wake:
    return Wake(
        source=WakeSource.TELEGRAM,
        body=text,
        caller=UserCaller(channel="telegram", user_id="7", name="Ada"),
        sink=rig.inbox("telegram:7"),
    )


async def test_check_session_and_health_say_the_thread_waits_for_an_approval(rig: Rig) -> None:
    assert rig.manager is not None
    assert rig.service is not None
    request_id = await park(rig)
    info = await rig.manager.check_session("telegram:7")
    assert info["thread_state"] == "pending"
    (waiting,) = info["thread_awaiting_approval"]
    assert (waiting["id"], waiting["tool"]) == (request_id, "deploy")
    health = await rig.manager.health()
    assert health["threads"]["pending"] == 1
    (thread,) = health["all_threads"]
    assert thread["awaiting_approval"][0]["id"] == request_id
    report = await rig.service.health()
    assert report["pending"] == 1
    assert report["requests"][0]["id"] == request_id


async def test_a_button_of_an_earlier_occurrence_of_a_call_names_that_ones_fate(
    rig: Rig,
) -> None:
    assert rig.service is not None
    rig.model.add(call("deploy", env="eu", call_id="c1"))
    await (await rig.say("telegram:7", "deploy")).wait(10)
    (first,) = await rig.service.waiting()
    rig.model.add(dispatch(("caller:user", "ok")))
    await rig.service.decide(first.request.id, approve=False, decider=OWNER, reason="later")
    await settle(rig)
    rig.model.add(call("deploy", env="eu", call_id="c1"))  # providers reuse call ids
    await (await rig.say("telegram:7", "now deploy")).wait(10)
    (second,) = await rig.service.waiting()
    assert second.request.id != first.request.id
    with pytest.raises(NotPendingError, match="it was already denied"):
        await rig.service.decide(first.request.id, approve=True, decider=OWNER, key="telegram:7")
    assert rig.ran == []
