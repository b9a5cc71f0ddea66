"""Identity: a public id per session, the run metadata every turn carries to its model client."""

from __future__ import annotations

import pytest

from tests.threads.conftest import (
    HandAgent,
    answer,
    gateway_config,
    make_runtime,
    plant,
    system_wake,
)
from threads.identity import PUBLIC_ID, run_metadata
from threads.ids import new_entry_id, new_session_id
from threads.llm.anthropic import AnthropicClient
from threads.llm.base import ModelRequest
from threads.llm.openai import OpenAIClient
from threads.messages import Message
from threads.session import Session
from threads.sessions.keys import resolve
from threads.store.entries import Header, InfoEntry, Lineage, ParentRef
from threads.store.memory import MemoryStore
from threads.testing.fake_anthropic import FakeAnthropicServer
from threads.testing.fake_openai import FakeOpenAIServer
from threads.testing.scripted import ScriptedModel, dispatch

METADATA = {"weft.session.id": "s_abc", "weft.turn": "3", "weft.public_id": "p_1234"}


async def test_every_session_gets_a_public_id_that_is_not_its_storage_id_and_a_fork_its_own() -> (
    None
):
    store = MemoryStore()
    session = await Session.create(store, HandAgent(answer("hi")))
    public = session.header.meta[PUBLIC_ID]
    assert public.startswith("p_")
    assert session.id not in public
    fork = await session.fork("")
    assert fork.header.meta[PUBLIC_ID] not in ("", public)  # a fork is another session
    assert (await store.load(session.id)).header.meta[PUBLIC_ID] == public
    await fork.close()
    await session.close()


async def test_a_hand_edited_info_entry_never_overrides_a_reserved_key() -> None:
    store = MemoryStore()
    header = Header(id=new_session_id(), meta={PUBLIC_ID: "p_original", "tenant": "acme"})
    await plant(
        store,
        header,
        [
            InfoEntry(
                id=new_entry_id(),
                meta={PUBLIC_ID: "p_forged", "tenant": "other", "weft.extra": "first"},
            ),
            InfoEntry(id=new_entry_id(), meta={"weft.extra": "second"}),
        ],
    )
    session = await Session.open(store, header.id, HandAgent())
    meta = session.meta()
    assert meta[PUBLIC_ID] == "p_original"
    assert meta["tenant"] == "other"  # ordinary keys are edited by info entries
    assert meta["weft.extra"] == "first"  # a reserved key the header lacks keeps its first value
    await session.close()


async def test_each_turn_tells_its_model_client_the_session_turn_and_public_id() -> None:
    model = ScriptedModel(dispatch(), dispatch())
    runtime = await make_runtime(MemoryStore(), model)
    try:
        for body in ("one", "two"):
            _accepted, turn = await runtime.manager.wake_turn("cron:nightly", system_wake(body))
            await turn.wait(10)
        thread = runtime.manager.thread("cron:nightly")
        assert thread is not None
        session = thread.session
        first, second = (r.metadata for r in model.requests)
        assert first == {
            "weft.session.id": session.id,
            "weft.turn": "1",
            "weft.public_id": session.header.meta[PUBLIC_ID],
        }
        assert second["weft.turn"] == "2"
    finally:
        await runtime.manager.close()


def test_the_run_metadata_names_a_forks_origin_and_a_childs_lineage() -> None:
    header = Header(
        id="s_child",
        parent=ParentRef(session="s_origin", entry="e_at"),
        lineage=Lineage(parent_session="s_parent", parent_call_id="call_7"),
    )
    assert run_metadata(header, "s_child-t12") == {
        "weft.session.id": "s_child",
        "weft.turn": "12",
        "weft.fork.session": "s_origin",
        "weft.fork.entry": "e_at",
        "weft.lineage.session": "s_parent",
        "weft.lineage.call": "call_7",
    }


@pytest.mark.parametrize("mode", ["headers", "body", "off"])
async def test_an_openai_client_sends_the_run_metadata_as_configured(mode: str) -> None:
    async with FakeOpenAIServer() as server:
        client = OpenAIClient(base_url=f"{server.url}/v1", run_metadata=mode)  # type: ignore[arg-type]
        try:
            await client.complete(
                ModelRequest(model="m", messages=[Message.user("hi")], metadata=METADATA)
            )
        finally:
            await client.close()
        (request,) = server.requests
    headers = {k: v for k, v in request.headers.items() if k.startswith("X-Weft-")}
    body = request.body
    assert isinstance(body, dict)
    if mode == "headers":
        assert headers == {
            "X-Weft-Session-Id": "s_abc",
            "X-Weft-Turn": "3",
            "X-Weft-Public-Id": "p_1234",
        }
        assert "metadata" not in body
    elif mode == "body":
        assert headers == {}
        assert body["metadata"] == METADATA
    else:
        assert headers == {}
        assert "metadata" not in body


async def test_an_anthropic_client_in_body_mode_sends_the_public_id_as_its_user_id() -> None:
    async with FakeAnthropicServer() as server:
        client = AnthropicClient(base_url=server.url, run_metadata="body")
        try:
            await client.complete(
                ModelRequest(model="m", messages=[Message.user("hi")], metadata=METADATA)
            )
        finally:
            await client.close()
        (request,) = server.requests
    assert isinstance(request.body, dict)
    assert request.body["metadata"] == {"user_id": "p_1234"}


async def test_a_public_id_names_its_session_wherever_a_key_is_accepted() -> None:
    store = MemoryStore()
    session = await Session.create(store, HandAgent(), meta={"key": "telegram:5"})
    await store.point("telegram:5", session.id)
    found = await resolve(session.header.meta[PUBLIC_ID], store, gateway_config())
    assert (found.key, found.session_id) == ("telegram:5", session.id)
    await session.close()
