"""A run's context shares the session's list instead of copying it (decision perf-34)."""

from __future__ import annotations

import random
import tracemalloc

import pytest

from threads.context import INTERRUPTED, ContextBuilder, RunContext
from threads.messages import Message, ToolCallPart, ToolResultPart


def user(n: int) -> Message:
    return Message.user(f"message {n}")


def calls(*ids: str) -> Message:
    return Message(
        role="assistant", content=tuple(ToolCallPart(id=i, name="read", args={}) for i in ids)
    )


def result(call_id: str, text: str = "done") -> Message:
    return Message(
        role="tool", content=(ToolResultPart(call_id=call_id, name="read", content=text),)
    )


def test_a_run_context_behaves_as_the_list_it_stands_for() -> None:
    rng = random.Random(34)
    for _ in range(200):
        base = [user(i) for i in range(rng.randrange(0, 8))]
        shared = rng.randrange(0, len(base) + 1)
        own = [user(100 + i) for i in range(rng.randrange(0, 4))]
        context = RunContext(base, shared, list(own))
        reference = base[:shared] + own
        base.append(user(999))  # the session grows past what the run shares
        for step in range(12):
            op = rng.choice(["append", "extend", "pop", "pop_at", "set", "del", "insert"])
            new, more = user(1_000 + step), user(2_000 + step)
            if op == "append":
                context.append(new)
                reference.append(new)
            elif op == "extend":
                context.extend([new, more])
                reference.extend([new, more])
            elif reference and op == "pop":
                assert context.pop() == reference.pop()
            elif reference and op == "pop_at":
                at = rng.randrange(-len(reference), len(reference))
                assert context.pop(at) == reference.pop(at)
            elif reference and op == "set":
                at = rng.randrange(len(reference))
                context[at] = reference[at] = new
            elif reference and op == "del":
                at = rng.randrange(len(reference))
                del context[at]
                del reference[at]
            elif op == "insert":
                at = rng.randrange(len(reference) + 1)
                context.insert(at, new)
                reference.insert(at, new)
            assert len(context) == len(reference)
            assert list(context) == reference
            assert list(reversed(context)) == reference[::-1]
            assert context == reference
            for start in range(-len(reference) - 1, len(reference) + 2):
                assert context[start:] == reference[start:]
                assert context[:start] == reference[:start]
                assert context[start::2] == reference[start::2]
            for at in range(-len(reference), len(reference)):
                assert context[at] is reference[at]
            with pytest.raises(IndexError):
                context[len(reference)]
            with pytest.raises(IndexError):
                context[-len(reference) - 1]


def test_taking_a_runs_context_copies_none_of_the_sessions() -> None:
    builder = ContextBuilder()
    for n in range(2_000):
        builder.add(user(n))
    tracemalloc.start()
    try:
        context = builder.run_context()
        taken, _peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert taken < 1_024  # a copy of 2 000 references is 16 000 bytes
    assert list(context) == builder.messages()


def test_what_the_session_adds_later_is_not_in_a_running_context() -> None:
    builder = ContextBuilder()
    builder.add(user(0))
    context = builder.run_context()
    context.append(Message.assistant("the run's own"))
    builder.add(user(1))
    builder.add(Message.assistant("the session's"))

    assert list(context) == [user(0), Message.assistant("the run's own")]
    assert builder.messages() == [user(0), user(1), Message.assistant("the session's")]


def test_a_tool_result_merged_into_a_shared_message_leaves_the_run_its_own() -> None:
    builder = ContextBuilder()
    builder.add(user(0))
    builder.add(calls("a", "b"))
    builder.add(result("a"))
    context = builder.run_context(close_open=False)
    before = context[-1]

    builder.add(result("b"))  # merged into the tool message the run shares

    assert context[-1] is before
    assert len(context) == 3
    merged = builder.messages()[-1]
    assert [p.call_id for p in merged.tool_results()] == ["a", "b"]


def test_open_calls_are_closed_in_the_run_and_not_in_the_session() -> None:
    builder = ContextBuilder()
    builder.add(user(0))
    builder.add(calls("a", "b"))
    builder.add(result("a"))
    context = builder.run_context()

    closed = context[-1].tool_results()
    assert [(p.call_id, p.content) for p in closed] == [("a", "done"), ("b", INTERRUPTED)]
    assert list(context) == builder.messages()
    assert builder.messages(close_open=False)[-1].tool_results()[-1].call_id == "a"

    builder.add(result("b", "late"))  # the place the run replaced is not shared: no copy needed
    assert [(p.call_id, p.content) for p in context[-1].tool_results()][-1] == ("b", INTERRUPTED)
    assert builder.messages()[-1].tool_results()[-1].content == "late"
