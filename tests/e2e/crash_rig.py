"""The crash matrix's rig: one scenario per fault point, run against a real ``gateway run``.

A :class:`Scenario` is what web chats send before the crash (numbered orders,
see :mod:`threads.testing.numbered`) and which answers each chat must receive
exactly once. :func:`run_scenario` writes a configuration on the given store,
starts ``gateway run`` armed at the scenario's fault point, sends the orders,
waits for the process to kill itself there, starts it again unarmed,
reconnects the same chats, lets the gateway finish everything it has to do
and stops it cleanly. The :class:`Outcome` lists every problem: an answer
missing (a lost input or hand-off), an answer doubled, the fault point never
reached, a restart that failed.
"""

from __future__ import annotations

import asyncio
import secrets
import signal
import tempfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from channels.testing.web_client import WebChat
from gateway.testing.process import GatewayRun, StartError, settle, store_url, write_config
from threads.context import INTERRUPTED
from threads.testing.fake_openai import FakeOpenAIServer
from threads.testing.numbered import BATCH, answers, numbered, order


@dataclass(frozen=True, slots=True)
class Send:
    """One order a chat sends before the crash; ``settled`` waits for its reply first."""

    chat: int
    id: str
    verb: str = "plain"
    ask_chat: int | None = None  # ``ask``: the chat whose session is asked
    settled: bool = False


@dataclass(frozen=True, slots=True)
class Scenario:
    """What the chats send, where the gateway dies, and what each chat must hear once."""

    name: str
    point: str
    sends: tuple[Send, ...]
    expected: tuple[tuple[str, ...], ...]  # per chat: the answers it must receive once

    @property
    def chats(self) -> int:
        return len(self.expected)


SCENARIOS = (
    Scenario(
        name="after_accept",
        point="after_accept",
        sends=(Send(0, "a1"),),
        expected=(("reply a1",),),
    ),
    Scenario(
        name="after_prompt_write",
        point="after_prompt_write",
        sends=(Send(0, "a1"),),
        expected=(("reply a1",),),
    ),
    Scenario(
        name="mid_tool_batch",
        point="mid_tool_batch",
        sends=(Send(0, "a1", "tools"),),
        expected=(("reply a1",),),
    ),
    Scenario(
        name="after_delivery_before_record-dispatch",
        point="after_delivery_before_record",
        sends=(Send(0, "a1"),),
        expected=(("reply a1",),),
    ),
    Scenario(
        name="after_delivery_before_record-text",
        point="after_delivery_before_record",
        sends=(Send(0, "a1", "text"),),
        expected=(("reply a1",),),
    ),
    Scenario(
        name="after_turn_end",
        point="after_turn_end",
        sends=(Send(0, "a1"),),
        expected=(("reply a1",),),
    ),
    Scenario(
        name="mid_child_hand_off",
        point="mid_child_hand_off",
        sends=(Send(0, "a1", "spawn"),),
        expected=(("reply a1",),),
    ),
    Scenario(
        name="mid_announce",
        point="mid_announce",
        sends=(Send(1, "b1", settled=True), Send(0, "a1", "ask", ask_chat=1)),
        expected=(("reply a1",), ("reply b1", "announce a1")),
    ),
)
BY_NAME = {scenario.name: scenario for scenario in SCENARIOS}


@dataclass(slots=True)
class Outcome:
    """What one scenario showed; ``problems`` is empty when everything survived."""

    scenario: str
    store: str
    problems: list[str] = field(default_factory=list)
    heard: list[Counter[str]] = field(default_factory=list)  # per chat: answers, and how often
    batch_results: list[tuple[str, str]] = field(default_factory=list)  # after the restart
    repeats: int = 0  # replies sent again under an id the page had shown (it drops them)
    logs: list[str] = field(default_factory=list)

    def report(self) -> str:
        """The problems, what each chat heard, and the gateway's last log lines."""
        return "\n".join(
            [
                f"{self.scenario} on {self.store}:",
                *(f"  - {p}" for p in self.problems),
                *(f"  chat {n} heard {dict(c)}" for n, c in enumerate(self.heard)),
                f"  {self.repeats} replies came again under an id already shown (dropped)",
                *self.logs,
            ]
        )


class Rig:
    """One store's matrix: the fake model every gateway shares, and where they keep data."""

    def __init__(self, store: str, *, redis_url: str = "") -> None:
        self.store = store
        self.redis_url = redis_url
        self.model = FakeOpenAIServer(default=numbered)
        self.prefixes: list[str] = []  # the Redis key prefixes the gateways used
        self.root = Path(tempfile.mkdtemp(prefix=f"crash-{store}-"))

    async def run(self, scenarios: Sequence[Scenario], *, at_once: int = 4) -> dict[str, Outcome]:
        """Every scenario, ``at_once`` of them at a time; by scenario name."""
        gate = asyncio.Semaphore(at_once)

        async def one(scenario: Scenario) -> Outcome:
            async with gate:
                return await self.run_one(scenario)

        async with self.model:
            outcomes = await asyncio.gather(*(one(s) for s in scenarios))
        return {outcome.scenario: outcome for outcome in outcomes}

    async def run_one(self, scenario: Scenario) -> Outcome:
        outcome = Outcome(scenario=scenario.name, store=self.store)
        root = self.root / scenario.name
        root.mkdir()
        tag = secrets.token_hex(3)  # one fake model serves every gateway: IDs stay apart
        url = store_url(self.store, root / "data", redis=self._redis(tag))
        config = write_config(root, store=url, model_url=self.model.base_url)
        async with aiohttp.ClientSession() as http:
            chats = [WebChat(http) for _ in range(scenario.chats)]
            try:
                await self._crash(scenario, config, chats, tag, outcome)
                if not outcome.problems:
                    await self._restart(scenario, config, chats, outcome)
            except StartError as exc:
                lines = str(exc).splitlines()
                outcome.problems.append(f"{lines[0]} {lines[-1].strip() if len(lines) > 1 else ''}")
            except (TimeoutError, ConnectionError, OSError) as exc:
                outcome.problems.append(f"{type(exc).__name__}: {exc}")
            finally:
                for chat in chats:
                    await chat.close()
        # Heard: as often as it came, or as often as the page shows it now, whichever is more.
        outcome.heard = [answers(chat.replies) | answers(chat.view) for chat in chats]
        outcome.repeats = sum(len(chat.repeats) for chat in chats)
        for n, (want, heard) in enumerate(zip(scenario.expected, outcome.heard, strict=True)):
            wanted = {_mark(answer, tag) for answer in want}
            for answer in sorted(wanted | set(heard)):
                if heard[answer] == 0:
                    outcome.problems.append(f"chat {n} never heard {answer!r}")
                elif heard[answer] > 1:
                    outcome.problems.append(f"chat {n} heard {answer!r} {heard[answer]} times")
                elif answer not in wanted:
                    outcome.problems.append(f"chat {n} heard {answer!r}, which nobody asked for")
        outcome.batch_results = self._batch_results(tag)
        return outcome

    def _redis(self, tag: str) -> str:
        if self.store != "redis":
            return ""
        self.prefixes.append(f"crash-{tag}:")
        return f"{self.redis_url}?cron_prefix={self.prefixes[-1]}cron:"

    async def _crash(
        self,
        scenario: Scenario,
        config: Path,
        chats: list[WebChat],
        tag: str,
        outcome: Outcome,
    ) -> None:
        """Start armed, send the orders, and see the process kill itself at the point."""
        run = GatewayRun(config, fault=scenario.point)
        try:
            await run.start()
            for chat in chats:
                await chat.connect(run.web_url)
            for send in scenario.sends:
                chat = chats[send.chat]
                arg = f"web:{chats[send.ask_chat].chat}" if send.ask_chat is not None else ""
                await chat.send(order(f"{tag}-{send.id}", send.verb, arg))
                if send.settled:
                    await chat.wait_for(
                        lambda c=chat, i=send.id: f"reply [m:{tag}-{i}]" in " ".join(c.replies),
                        what=f"the reply to {send.id}",
                    )
            code = await run.wait()
        finally:
            await run.kill()
            outcome.logs.append(f"  armed run log:\n{run.tail()}")
        if code != -signal.SIGKILL or f"fault point {scenario.point} reached" not in run.tail(400):
            outcome.problems.append(
                f"the gateway did not die at {scenario.point} (exit code {code})"
            )

    async def _restart(
        self, scenario: Scenario, config: Path, chats: list[WebChat], outcome: Outcome
    ) -> None:
        """Start again unarmed, reconnect the chats, let it finish, stop it cleanly."""
        run = GatewayRun(config, log=config.with_name("gateway-restart.log"))
        try:
            await run.start()
            for chat in chats:
                await chat.connect(run.web_url)
            await settle(run, chats)
            code = await run.stop()
            if code != 0:
                outcome.problems.append(f"the restarted gateway stopped with exit code {code}")
        finally:
            await run.kill()
            outcome.logs.append(f"  restart log:\n{run.tail()}")

    def _batch_results(self, tag: str) -> list[tuple[str, str]]:
        """The results of the tool batch the model saw last in this scenario's conversations."""
        seen: list[tuple[str, str]] = []
        for request in self.model.requests:
            if f"[m:{tag}-" not in str(request.messages):
                continue
            calls = {
                call["id"]: call["function"]["name"]
                for message in request.messages
                for call in message.get("tool_calls") or ()
                if call["function"]["name"] in BATCH
            }
            results = [
                (calls[m["tool_call_id"]], str(m.get("content", "")))
                for m in request.messages
                if m.get("role") == "tool" and m.get("tool_call_id") in calls
            ]
            if results:
                seen = results
        return seen


def _mark(answer: str, tag: str) -> str:
    """``"reply a1"`` as the chat hears it in a scenario tagged ``tag``: ``reply [m:<tag>-a1]``."""
    kind, id = answer.split()
    return f"{kind} [m:{tag}-{id}]"


def kept_and_interrupted(results: list[tuple[str, str]]) -> tuple[int, int]:
    """How many batch results are real, and how many say the call was interrupted."""
    interrupted = sum(1 for _, content in results if INTERRUPTED in content)
    return len(results) - interrupted, interrupted
