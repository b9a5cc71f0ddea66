"""Budgets of model calls and tokens per session and per chain stop runaways and tell the owner."""

from __future__ import annotations

import logging
import random
import tracemalloc

import pytest

from config.models import BudgetConfig
from tests.clock import Seconds
from tests.threads.agent.conftest import KeyedScript, agent_config, make_runtime
from tests.threads.test_dispatch import settle
from threads.budget import _SWEEP_EVERY, MAX_METERS, Budget
from threads.errors import ChainStoppedError
from threads.messages import Usage
from threads.testing.scripted import ScriptedModel, call, dispatch, say
from threads.wake import SessionCaller, SystemCaller, Wake, WakeSource

USER = "telegram:1"


def test_spending_leaves_the_window_an_hour_later() -> None:
    clock = Seconds()
    budget = Budget(BudgetConfig(session_model_calls_per_hour=2), clock=clock)
    budget.charge("k", "c", 10)
    clock.now += 1800
    budget.charge("k", "c", 10)
    over = budget.check("k", "")
    assert over is not None
    assert over.setting == "threads.budget.session_model_calls_per_hour"
    clock.now += 1800  # the first call is now an hour old
    assert budget.check("k", "") is None
    assert budget.spent(key="k") == (1, 10)


def test_meters_are_bounded_and_the_one_charged_least_recently_goes_first() -> None:
    # Every user message starts a chain: an hour of them must not all stay in memory.
    budget = Budget(BudgetConfig(chain_model_calls_per_hour=10_000), clock=Seconds())
    budget.charge("k", "c_busy", 1)
    budget.charge("k", "c_first", 1)
    for i in range(MAX_METERS):
        budget.charge("k", f"c_{i}", 1)
        if i % 1000 == 0:
            budget.charge("k", "c_busy", 1)
    assert budget.spent(chain="c_first") == (0, 0)
    assert budget.spent(chain="c_busy") == (1 + MAX_METERS // 1000, 1 + MAX_METERS // 1000)
    assert budget.spent(chain=f"c_{MAX_METERS - 1}") == (1, 1)
    assert budget.spent(key="k")[0] == 2 + MAX_METERS + MAX_METERS // 1000


def test_a_meter_agrees_with_every_charge_of_the_last_hour() -> None:
    # Charges at random times, some in the same minute: a meter's buckets, packed, must
    # count exactly the calls and tokens whose minute is within the hour.
    rng = random.Random(7)
    clock = Seconds()
    budget = Budget(BudgetConfig(), clock=clock)
    charges: list[tuple[int, int]] = []
    for step in range(3_000):
        clock.now += rng.choice((0.0, 1.0, 59.0, 61.0, 600.0, 3_000.0))
        tokens = rng.randrange(1, 5_000)
        budget.charge("k", "c", tokens)
        minute = int(clock.now // 60)
        charges.append((minute, tokens))
        if step % 7 == 0:
            live = [t for m, t in charges if m > minute - 60]
            assert budget.spent(key="k") == (len(live), sum(live))
            assert budget.spent(chain="c") == (len(live), sum(live))


def test_meters_idle_for_an_hour_are_swept() -> None:
    clock = Seconds()
    budget = Budget(BudgetConfig(), clock=clock)
    budget.charge("k_idle", "c_idle", 5)
    clock.now += 3_600
    for i in range(_SWEEP_EVERY):
        budget.charge("k", f"c_{i}", 1)
    assert "c_idle" not in budget._chains._packed
    assert "k_idle" not in budget._sessions._packed
    assert budget.spent(key="k") == (_SWEEP_EVERY, _SWEEP_EVERY)


def test_a_full_set_of_chain_meters_costs_under_150_bytes_each() -> None:
    # An hour of user messages fills MAX_METERS chain meters: each must stay small.
    budget = Budget(BudgetConfig(), clock=Seconds())
    chains = [f"c_{i:026d}" for i in range(MAX_METERS)]
    tracemalloc.start()
    try:
        for chain in chains:
            budget.charge("k", chain, 2_512)
        held, _peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert budget.spent(chain=chains[-1]) == (1, 2_512)
    assert held / MAX_METERS < 150


def test_a_limit_of_zero_is_no_limit_and_tokens_count_too() -> None:
    budget = Budget(
        BudgetConfig(
            session_model_calls_per_hour=0,
            session_tokens_per_hour=0,
            chain_model_calls_per_hour=0,
            chain_tokens_per_hour=100,
        ),
        clock=Seconds(),
    )
    for _ in range(50):
        budget.charge("k", "c", 1)
    assert budget.check("k", "c") is None
    budget.charge("k", "c", 50)
    over = budget.check("k", "c")
    assert over is not None
    assert (over.scope, over.measure, over.used) == ("chain", "tokens", 100)


async def test_a_chain_past_its_model_calls_is_stopped_and_the_user_told() -> None:
    model = ScriptedModel(*(call("health") for _ in range(10)), dispatch())
    rt = await make_runtime(
        model, agent_config(threads={"budget": {"chain_model_calls_per_hour": 3}})
    )
    try:
        result = await rt.result(await rt.say(USER, "loop"))
        assert result.stop_reason == "budget"
        assert len(model.requests) == 3
        (notice,) = rt.inbox(USER).messages
        assert notice.startswith("(Stopped: the work one message set going reached its budget")
        assert "3 model calls per hour" in notice
    finally:
        await rt.manager.close()


async def test_a_session_past_its_budget_is_told_without_another_model_call() -> None:
    model = ScriptedModel(default=dispatch(("caller:user", "ok")))
    rt = await make_runtime(
        model, agent_config(threads={"budget": {"session_model_calls_per_hour": 2}})
    )
    try:
        for text in ("one", "two"):
            await rt.result(await rt.say(USER, text))
        result = await rt.result(await rt.say(USER, "three"))
        assert result.stop_reason == "budget"
        assert len(model.requests) == 2
        assert (
            rt.inbox(USER)
            .messages[-1]
            .startswith("(Stopped: this session reached its budget of 2 model calls per hour")
        )
    finally:
        await rt.manager.close()


async def test_a_system_sessions_overspend_is_logged_and_delivered_nowhere(
    caplog: pytest.LogCaptureFixture,
) -> None:
    model = ScriptedModel(default=lambda request: say("tick", usage=Usage(input_tokens=5)))
    rt = await make_runtime(model, agent_config(threads={"budget": {"session_tokens_per_hour": 5}}))
    try:
        fire = Wake(source=WakeSource.CRON, body="tick", caller=SystemCaller(name="cron"))
        await rt.manager.wake("cron:t", fire)
        await settle(rt)
        with caplog.at_level(logging.WARNING, logger="threads.stops"):
            _, turn = await rt.manager.wake_turn("cron:t", fire)
            result = await turn.wait(10)
        assert result is not None
        assert result.stop_reason == "budget"
        assert "cron:t: this session reached its budget of 5 tokens per hour" in caplog.text
        assert rt.inboxes == {}
    finally:
        await rt.manager.close()


async def test_a_spent_chain_refuses_what_it_would_still_wake() -> None:
    script = KeyedScript()
    child = f"{USER}:threads:dig"
    script.add(USER, dispatch({"to": "subagent", "params": {"task_id": "dig"}, "body": "dig"}))
    script.add(child, *(call("health") for _ in range(5)))
    rt = await make_runtime(
        ScriptedModel(default=script),
        agent_config(threads={"budget": {"chain_model_calls_per_hour": 3}}),
    )
    try:
        first = await rt.say(USER, "go")
        await rt.result(first)
        await settle(rt)
        # user 1 call, child 2 calls, then the chain is spent: the child ends, no completion.
        assert len(script.requests[USER]) == 1
        assert len(script.requests[child]) == 2
        thread = rt.manager.thread(USER)
        assert thread is not None
        chain = thread.session.entries()[0].wake["chain"]  # type: ignore[attr-defined]
        late = Wake(
            source=WakeSource.SESSION,
            body="late reply",
            caller=SessionCaller(session_key=child),  # type: ignore[arg-type]
            chain=chain,
            depth=2,
        )
        with pytest.raises(ChainStoppedError, match="the budget ran out"):
            await rt.manager.wake(USER, late)
        # The chat's user owns the child's chain: they are told.
        assert any("reached its budget" in m for m in rt.inbox(USER).messages)
    finally:
        await rt.manager.close()
