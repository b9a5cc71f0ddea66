"""Feedback while a turn runs: typing refreshed, the answer streamed into one throttled draft."""

from __future__ import annotations

import asyncio

from channels.feedback import Feedback
from threads.turns import Outcome, Policy, RunStart, TextDelta, Turn


class Shown:
    """A presence that records what it was asked to show."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.changed = asyncio.Event()

    async def typing(self, chat_id: str) -> None:
        self.calls.append(("typing", chat_id))
        self.changed.set()

    async def draft(self, chat_id: str, text: str) -> None:
        self.calls.append(("draft", text))
        self.changed.set()

    async def end_draft(self, chat_id: str) -> None:
        self.calls.append(("end", chat_id))
        self.changed.set()

    def count(self, kind: str) -> int:
        return sum(1 for k, _ in self.calls if k == kind)

    async def wait(self, kind: str, count: int) -> None:
        async with asyncio.timeout(10):
            while self.count(kind) < count:
                self.changed.clear()
                await self.changed.wait()


def turn(name: str = "t", *, started: bool = True) -> Turn:
    """A turn handle; ``started``: its run has begun."""
    handle = Turn(name, f"run-{name}", Policy.QUEUE)
    if started:
        handle.emit(RunStart(run_id=handle.run_id))
    return handle


async def test_typing_is_refreshed_for_as_long_as_the_turn_runs_then_stops() -> None:
    shown = Shown()
    feedback = Feedback(shown, typing_every=0.01, typing_after=0)
    running = turn()
    feedback.follow("chat", running)
    await shown.wait("typing", 3)
    running.finish(Outcome.ANSWERED)
    await shown.wait("end", 1)
    await asyncio.wait_for(_gone(feedback, "chat"), 10)  # the follower, and its timer, are gone
    await feedback.close()


async def test_streamed_text_is_shown_as_a_draft_at_most_once_per_interval() -> None:
    shown = Shown()
    feedback = Feedback(shown, typing_every=3600, typing_after=0, edit_every=3600)
    running = turn()
    feedback.follow("chat", running)
    running.emit(TextDelta(text="Hel"))
    await shown.wait("draft", 1)
    running.emit(TextDelta(text="lo"))
    running.finish(Outcome.ANSWERED)
    await shown.wait("end", 1)
    assert [text for kind, text in shown.calls if kind == "draft"] == ["Hel"]
    await feedback.close()


async def test_turns_waiting_behind_the_followed_one_are_shown_after_it() -> None:
    shown = Shown()
    feedback = Feedback(shown, typing_every=3600, typing_after=0, edit_every=0)
    first, steered, follow_up = turn("a"), turn("b"), turn("c")
    feedback.follow("chat", first)
    feedback.follow("chat", steered)
    await shown.wait("typing", 1)
    steered.next = follow_up
    steered.finish(Outcome.DEFERRED)
    first.finish(Outcome.ANSWERED)
    await shown.wait("end", 1)
    follow_up.emit(TextDelta(text="next answer"))
    await shown.wait("draft", 1)
    follow_up.finish(Outcome.ANSWERED)
    await shown.wait("end", 2)
    assert ("draft", "next answer") in shown.calls
    await feedback.close()


async def test_a_presence_that_fails_never_fails_the_follower() -> None:
    class Broken(Shown):
        async def typing(self, chat_id: str) -> None:
            await super().typing(chat_id)
            raise ConnectionError("the platform is down")

    shown = Broken()
    feedback = Feedback(shown, typing_every=0.01, typing_after=0)
    running = turn()
    feedback.follow("chat", running)
    await shown.wait("typing", 2)
    running.finish(Outcome.ANSWERED)
    await shown.wait("end", 1)
    await feedback.close()


async def _gone(feedback: Feedback, chat: str) -> None:
    while feedback.following(chat):
        await asyncio.sleep(0)


async def test_a_turn_waiting_for_its_slot_shows_nothing_until_its_run_begins() -> None:
    shown = Shown()
    feedback = Feedback(shown, typing_every=0.01, typing_after=0, edit_every=0)
    queued = turn(started=False)
    feedback.follow("chat", queued)
    queued.emit(TextDelta(text="early"))  # the follower has seen an event, not the start
    queued.emit(RunStart(run_id=queued.run_id))
    await shown.wait("typing", 1)
    await shown.wait("draft", 1)
    queued.finish(Outcome.ANSWERED)
    await shown.wait("end", 1)
    await feedback.close()


async def test_a_quick_answer_is_shown_as_the_answer_alone_with_no_draft_before_it() -> None:
    shown = Shown()
    watching = asyncio.Event()

    def clock() -> float:  # stands still: the turn never runs ``typing_after``
        watching.set()
        return 100.0

    feedback = Feedback(shown, typing_after=0.5, edit_every=0, clock=clock)
    running = turn()
    running.emit(TextDelta(text="Hello"))
    feedback.follow("chat", running)
    await watching.wait()  # the follower is watching the turn, its events replayed to it
    running.finish(Outcome.ANSWERED)
    await shown.wait("end", 1)
    assert shown.calls == [("end", "chat")]
    await feedback.close()
