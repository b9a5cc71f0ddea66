"""Real ``gateway run`` processes on one Redis: wakes anywhere run once, in turn, and survive a kill.

Three gateways share a Redis key prefix, one fake Telegram bot (webhook
mode, through a balancer that hands each update to a random process) and
one fake model server. The model server sees every turn's context, so it
can tell whether one key's turns ever overlapped: the n-th turn of a key
must see exactly n user messages. Leases are short (``LEASE``) and every
wait polls with a deadline; nothing asserts on how long anything took.
"""

from __future__ import annotations

import asyncio
import re
import sys
from collections import Counter, defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import pytest

from channels.testing import FakeTelegram
from gateway.testing.cluster import SECRET, Balancer, Cluster
from tests.conftest import require_service
from tests.threads.store.conftest import REDIS_URL, delete_prefix, redis_prefix
from threads.keys import SessionKey
from threads.manager import RESUME_BODY
from threads.store import open_store
from threads.store.entries import MessageEntry, TurnEntry
from threads.testing.fake_openai import FakeOpenAIServer, RecordedRequest, Reply

LEASE = 3.0
DEADLINE = 120.0
_THREAD = re.compile(r'^thread: "?([^"\s]+)"?$', re.MULTILINE)


@dataclass
class Model:
    """The fake model's answers: ``re <body>``; what each key's turns saw, in order."""

    contexts: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    prompts: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    holds: dict[str, asyncio.Event] = field(default_factory=dict)
    held: asyncio.Event = field(default_factory=asyncio.Event)

    def __call__(self, request: RecordedRequest) -> Reply:
        text = request.last_user_text()
        found = _THREAD.search(text)
        key = found.group(1) if found else "?"
        body = text.rsplit("---\n", 1)[-1]
        users = sum(1 for m in request.messages if m.get("role") == "user")
        self.contexts[key].append(users)
        self.prompts[key].append(body)
        gate = self.holds.pop(body, None)
        if gate is not None:
            self.held.set()
            return Reply(text=f"re {body}", gate=gate)
        return Reply(text=f"re {body}")


@dataclass
class Stack:
    cluster: Cluster
    telegram: FakeTelegram
    model: Model
    balancer: Balancer
    prefix: str

    async def start(self, *names: str) -> None:
        for name in names:
            node = await self.cluster.start(name)
            self.balancer.backends[name] = node.url

    async def owner_of(self, key: str) -> str:
        """The node that holds ``key``'s lease, as any live node's health tells it."""
        for node in self.cluster.nodes.values():
            if node.process is None or node.process.returncode is not None:
                continue
            answer = await node.ask("health")
            if answer is None:
                continue
            for row in answer["health"]["cluster"]["nodes"]:
                if key in row["keys"]:
                    return str(row["node"])
        raise LookupError(f"no node owns {key}")


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    require_service("redis", "127.0.0.1", 6379)
    prefix = redis_prefix()
    model = Model()
    balancer = Balancer()
    await balancer.start()
    try:
        async with FakeTelegram() as fake, FakeOpenAIServer(default=model) as server:
            telegram = {
                "enabled": True,
                "token": fake.token,
                "base_url": fake.base_url,
                "base_file_url": fake.base_file_url,
                "mode": "webhook",
                "webhook_url": balancer.url,
                "webhook_secret": SECRET,
            }
            cluster = Cluster(
                tmp_path,
                store_url=f"{REDIS_URL}?cron_prefix={prefix}cron:",
                telegram=telegram,
                model_url=server.base_url,
                lease_seconds=LEASE,
                extra={
                    "threads": {"close_deadline_seconds": 1.0},
                    "threads.busy_policy": {"telegram": "queue"},
                },
            )
            try:
                yield Stack(cluster, fake, model, balancer, prefix)
            finally:
                await cluster.close()
                for name, node in cluster.nodes.items():  # shown when the test fails
                    print(f"==== {name}\n{node.output()[-6000:]}")
    finally:
        await balancer.close()
        await delete_prefix(prefix)


async def stored_turns(stack: Stack, key: str) -> tuple[list[TurnEntry], list[str]]:
    """A key's turn entries and its prompts' bodies, as Redis holds them."""
    store = open_store(stack.cluster.store_url)
    try:
        session = await store.resolve(SessionKey(key))
        assert session is not None, key
        entries = (await store.load(session)).entries
    finally:
        await store.close()
    turns = [e for e in entries if isinstance(e, TurnEntry)]
    prompts = [
        e.message.text().rsplit("---\n", 1)[-1]
        for e in entries
        if isinstance(e, MessageEntry) and e.run_id and e.message.role == "user"
    ]
    prompts = [p for p in prompts if p != RESUME_BODY]
    return turns, prompts


async def test_three_processes_run_every_wake_once_and_each_keys_turns_one_at_a_time(
    stack: Stack,
) -> None:
    await stack.start("n1", "n2", "n3")
    users = [stack.telegram.user(f"U{i}") for i in range(50)]
    rounds = 3
    for r in range(rounds):
        for i, user in enumerate(users):
            stack.telegram.send_dm(user, f"k{i}-m{r}")
    finals = [{f"re k{i}-m{r}" for r in range(rounds)} for i in range(len(users))]

    def answered() -> bool:
        # Count final answers only: a streamed draft ("re") is edited into its answer later.
        return all(
            sum(m.text in final for m in stack.telegram.sent(user)) >= rounds
            for user, final in zip(users, finals, strict=True)
        )

    await stack.telegram.wait_until(answered, timeout=DEADLINE, what="every message answered")
    assert len(stack.balancer.sent) == 3, "the balancer reached every process"
    for i, user in enumerate(users):
        key = f"telegram:{user.id}"
        replies = Counter(m.text for m in stack.telegram.sent(user))
        assert replies == Counter(f"re k{i}-m{r}" for r in range(rounds)), key
        # The n-th turn of the key saw n user messages: no two of its turns overlapped.
        assert stack.model.contexts[key] == list(range(1, rounds + 1)), key
        assert sorted(stack.model.prompts[key]) == [f"k{i}-m{r}" for r in range(rounds)]
        turns, prompts = await stored_turns(stack, key)
        assert [t.canceled for t in turns] == [False] * rounds, key
        assert sorted(prompts) == [f"k{i}-m{r}" for r in range(rounds)], key


async def test_a_killed_process_keys_are_taken_over_and_their_input_runs_once(
    stack: Stack,
) -> None:
    await stack.start("n1", "n2", "n3")
    ann = stack.telegram.user("Ann")
    key = f"telegram:{ann.id}"
    stack.model.holds["hold"] = asyncio.Event()  # never set: the turn is cut by the kill
    stack.telegram.send_dm(ann, "hold")
    async with asyncio.timeout(DEADLINE):
        await stack.model.held.wait()
    owner = await stack.owner_of(key)
    for n in range(3):  # accepted while the turn runs: queued, or forwarded to the owner
        stack.telegram.send_dm(ann, f"queued {n}")
    await stack.telegram.wait_until(
        lambda: not stack.telegram.pending_updates() or [],
        timeout=DEADLINE,
        what="every update taken by a gateway",
    )
    await stack.cluster.kill(owner)
    del stack.balancer.backends[owner]
    for n in range(2):  # sent after the kill: to the dead owner's inbox, or to the next owner
        stack.telegram.send_dm(ann, f"after {n}")
    expected = ["queued 0", "queued 1", "queued 2", "after 0", "after 1"]
    finals = {f"re {body}" for body in expected}

    def answered() -> bool:
        # Final answers only: a streamed draft is edited into its answer later.
        texts = [m.text for m in stack.telegram.sent(ann)]
        resumed = any(t.startswith(f"re {RESUME_BODY[:20]}") for t in texts)
        return resumed and finals <= set(texts)

    await stack.telegram.wait_until(
        answered,
        timeout=DEADLINE,
        what="the resumed turn and every message answered",
    )
    assert await stack.owner_of(key) != owner
    turns, prompts = await stored_turns(stack, key)
    assert turns[0].canceled, "the turn the kill cut short is recorded as canceled"
    assert sum(t.canceled for t in turns) == 1
    assert Counter(prompts) == Counter(["hold", *expected]), "each accepted message ran once"
    replies = Counter(m.text for m in stack.telegram.sent(ann))
    assert all(count == 1 for count in replies.values()), f"a reply was doubled: {replies}"
    assert "re hold" not in replies
    seen = stack.model.prompts[key]
    assert {f"re {body}" for body in expected} <= set(replies), f"the model saw {seen}"


async def gateway_cli(*args: str) -> tuple[int, str, str]:
    """Run the ``gateway`` CLI; its exit code, stdout and stderr."""
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    async with asyncio.timeout(DEADLINE):
        out, err = await child.communicate()
    return child.returncode or 0, out.decode(), err.decode()


async def test_gateway_nodes_lists_every_node_its_leases_and_the_keys_it_owns(
    stack: Stack,
) -> None:
    await stack.start("n1", "n2")
    ann = stack.telegram.user("Ann")
    stack.telegram.send_dm(ann, "hi")
    await stack.telegram.wait_for_sent(ann, 1, timeout=DEADLINE)
    owner = await stack.owner_of(f"telegram:{ann.id}")
    config = str(stack.cluster.nodes["n1"].config_path)
    code, out, err = await gateway_cli("nodes", "--config", config)
    assert code == 0, err
    assert re.search(r"n1\s+alive", out)
    assert re.search(r"n2\s+alive", out)
    assert f"telegram:{ann.id}" in out
    code, out, err = await gateway_cli("nodes", "--json", "--config", config)
    view = orjson.loads(out)
    rows = {row["node"]: row for row in view["nodes"]}
    assert rows[owner]["keys"] == [f"telegram:{ann.id}"]
    leaders = [lead for row in rows.values() for lead in row["leads"]]
    assert sorted(lead.split(":")[0] for lead in leaders) == ["cron", "heartbeats", "telegram"]
    code, out, err = await gateway_cli("health", "--config", config)
    assert code == 0, err
    assert out.startswith("node: n1 (boot 1)")
    assert "cluster (leases last 3.0 s):" in out


async def test_a_drained_node_hands_its_keys_and_its_leads_over_before_it_stops(
    stack: Stack,
) -> None:
    await stack.start("n1", "n2")
    ann = stack.telegram.user("Ann")
    key = f"telegram:{ann.id}"
    stack.model.holds["hold"] = asyncio.Event()
    stack.telegram.send_dm(ann, "hold")
    async with asyncio.timeout(DEADLINE):
        await stack.model.held.wait()
    owner = await stack.owner_of(key)
    other = "n2" if owner == "n1" else "n1"
    stack.telegram.send_dm(ann, "waiting")
    await stack.telegram.wait_until(
        lambda: not stack.telegram.pending_updates() or [], timeout=DEADLINE, what="taken"
    )
    code, out, err = await gateway_cli(
        "drain", "--config", str(stack.cluster.nodes[owner].config_path)
    )
    assert code == 0, err
    assert f"node {owner} is draining" in out
    assert f"node {owner} stopped" in out
    del stack.balancer.backends[owner]
    await stack.telegram.wait_until(
        lambda: any(m.text == "re waiting" for m in stack.telegram.sent(ann)) or [],
        timeout=DEADLINE,
        what="the waiting message answered by the other node",
    )
    assert await stack.owner_of(key) == other
    code, out, err = await gateway_cli(
        "nodes", "--json", "--config", str(stack.cluster.nodes[other].config_path)
    )
    rows = {row["node"]: row for row in orjson.loads(out)["nodes"]}
    assert sorted(lead.split(":")[0] for lead in rows[other]["leads"]) == [
        "cron",
        "heartbeats",
        "telegram",
    ]
    _turns, prompts = await stored_turns(stack, key)
    assert prompts.count("waiting") == 1
