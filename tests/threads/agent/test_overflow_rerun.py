"""An overflow re-run is recorded as one: the attempt's turn entry names the run that followed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from tests.threads.agent.conftest import Runtime, make_runtime
from tests.threads.agent.test_compaction import SUMMARY, chat, session_of, small_window_config
from threads.ids import new_entry_id
from threads.llm.base import ModelRequest, ModelResponse
from threads.llm.errors import ContextOverflowError
from threads.messages import Message, Usage
from threads.store.entries import MessageEntry, TurnEntry
from threads.testing.scripted import ScriptedModel, dispatch, say
from threads.tree import EntryTree, unfinished_runs


@pytest.fixture
async def small(model: ScriptedModel) -> AsyncIterator[Runtime]:
    runtime = await make_runtime(model, small_window_config())  # type: ignore[arg-type]
    yield runtime
    await runtime.manager.close()


async def test_the_overflowed_attempt_and_its_rerun_each_leave_a_turn_entry(
    small: Runtime,
) -> None:
    await chat(small, "alpha " * 30, "A")
    await chat(small, "beta " * 30, "B")

    def overflow(request: ModelRequest) -> ModelResponse:
        raise ContextOverflowError("maximum context length exceeded")

    answer = replace(
        dispatch(("caller:user", "after compaction")), usage=Usage(input_tokens=40, output_tokens=4)
    )
    small.model.add(overflow, say(SUMMARY), answer)
    turn = await small.say("telegram:1", "gamma")
    attempt_id = turn.run_id
    await small.result(turn)
    session = session_of(small)
    *_, attempt, rerun = [e for e in session.entries() if isinstance(e, TurnEntry)]
    assert (attempt.run_id, attempt.stop_reason) == (attempt_id, "error")
    assert attempt.err.startswith("ContextOverflowError: ")
    assert attempt.rerun == rerun.run_id == turn.run_id  # the handle reports the re-run's id
    assert rerun.run_id != attempt_id
    assert (rerun.stop_reason, rerun.usage) == ("dispatch", Usage(input_tokens=40, output_tokens=4))
    assert small.inbox("telegram:1").messages[-1] == "after compaction"


def test_a_rerun_cut_by_a_crash_is_an_unfinished_run_under_its_own_id() -> None:
    tree = EntryTree("s_x")
    prompt = MessageEntry(id=new_entry_id(), message=Message.user("go"), run_id="s_x-t3")
    attempt = TurnEntry(
        id=new_entry_id(), parent=prompt.id, run_id="s_x-t3", stop_reason="error", rerun="s_x-t4"
    )
    tree.load([prompt, attempt])
    (unfinished,) = unfinished_runs(tree.entries)
    assert (unfinished.id, unfinished.run_id) == (prompt.id, "s_x-t4")
    assert tree.highest_turn() == 4  # a reopened session never mints the re-run's id again
    finished = TurnEntry(id=new_entry_id(), parent=attempt.id, run_id="s_x-t4")
    tree.add(finished)
    assert unfinished_runs(tree.entries) == []
