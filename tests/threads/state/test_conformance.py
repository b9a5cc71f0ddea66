"""The state-store promises (threads/state/base.py), on memory, SQLite and Redis."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.threads.state.conftest import StateBackend
from threads.state import InvalidStateKeyError, StateStore

PAST = datetime(2001, 1, 1, tzinfo=UTC)


def future() -> datetime:
    return datetime.now(UTC) + timedelta(days=1)


async def test_a_value_put_is_read_back_as_plain_json(state: StateStore) -> None:
    value = {"name": "Ada", "ids": [1, 2.5, True, None], "nested": {"k": "ü"}}
    await state.put("pairing.paired", "telegram:1", value)
    assert await state.get("pairing.paired", "telegram:1") == value


async def test_put_replaces_the_whole_value(state: StateStore) -> None:
    await state.put("ns", "k", {"a": 1, "b": 2})
    await state.put("ns", "k", {"a": 3})
    assert await state.get("ns", "k") == {"a": 3}


async def test_an_absent_key_reads_as_none(state: StateStore) -> None:
    assert await state.get("ns", "missing") is None


async def test_namespaces_keep_equal_keys_apart(state: StateStore) -> None:
    await state.put("one", "k", 1)
    await state.put("two", "k", 2)
    assert (await state.get("one", "k"), await state.get("two", "k")) == (1, 2)
    assert await state.scan("one") == [("k", 1)]


async def test_delete_says_whether_a_value_was_there(state: StateStore) -> None:
    await state.put("ns", "k", "v")
    assert await state.delete("ns", "k") is True
    assert await state.delete("ns", "k") is False
    assert await state.get("ns", "k") is None
    assert await state.scan("ns") == []


async def test_scan_lists_the_keys_under_a_prefix_in_key_order(state: StateStore) -> None:
    for key in ("telegram:b", "discord:a", "telegram:a", "telegram2:a", "telegram:c"):
        await state.put("ns", key, key.upper())
    assert await state.scan("ns", "telegram:") == [
        ("telegram:a", "TELEGRAM:A"),
        ("telegram:b", "TELEGRAM:B"),
        ("telegram:c", "TELEGRAM:C"),
    ]
    assert [key for key, _ in await state.scan("ns")] == [
        "discord:a",
        "telegram2:a",
        "telegram:a",
        "telegram:b",
        "telegram:c",
    ]
    assert await state.scan("ns", "slack:") == []


async def test_keys_and_prefixes_may_be_any_unicode(state: StateStore) -> None:
    for key in ("ü:2", "u:3", "ü:1", "日本:1"):
        await state.put("ns", key, key)
    assert [key for key, _ in await state.scan("ns", "ü:")] == ["ü:1", "ü:2"]
    assert await state.get("ns", "日本:1") == "日本:1"


async def test_a_value_past_its_expiry_reads_as_absent_everywhere(state: StateStore) -> None:
    await state.put("ns", "old", "gone", expires=PAST)
    assert await state.get("ns", "old") is None
    assert await state.scan("ns") == []
    assert await state.delete("ns", "old") is False


async def test_a_value_before_its_expiry_is_live(state: StateStore) -> None:
    await state.put("ns", "k", "here", expires=future())
    assert await state.get("ns", "k") == "here"
    assert await state.scan("ns") == [("k", "here")]


async def test_put_replaces_the_expiry_with_the_value(state: StateStore) -> None:
    await state.put("ns", "k", "live", expires=future())
    await state.put("ns", "k", "dead", expires=PAST)
    assert await state.get("ns", "k") is None
    await state.put("ns", "k", "forever")
    assert await state.get("ns", "k") == "forever"


async def test_sweep_removes_expired_values_and_counts_them(state: StateStore) -> None:
    await state.put("ns", "a", 1, expires=PAST)
    await state.put("ns", "b", 2, expires=future())
    await state.put("other", "c", 3)
    assert await state.sweep() == 1
    assert await state.sweep() == 0
    assert await state.scan("ns") == [("b", 2)]
    assert await state.scan("other") == [("c", 3)]


async def test_values_read_back_never_alias_each_other(state: StateStore) -> None:
    await state.put("ns", "k", {"list": [1]})
    first = await state.get("ns", "k")
    assert isinstance(first, dict)
    first["list"] = "changed"
    assert await state.get("ns", "k") == {"list": [1]}


@pytest.mark.parametrize(
    ("namespace", "key", "value", "expires"),
    [
        ("Bad:NS", "k", 1, None),
        ("", "k", 1, None),
        ("ns", "", 1, None),
        ("ns", "a\x00b", 1, None),
        ("ns", "k" * 513, 1, None),
        ("ns", "k", object(), None),
        ("ns", "k", 1, datetime(2030, 1, 1)),
    ],
    ids=["namespace", "empty-ns", "empty-key", "nul", "long-key", "not-json", "naive-expiry"],
)
async def test_a_bad_namespace_key_value_or_expiry_is_refused_and_writes_nothing(
    state: StateStore, namespace: str, key: str, value: Any, expires: datetime | None
) -> None:
    with pytest.raises(InvalidStateKeyError):
        await state.put(namespace, key, value, expires=expires)
    assert await state.scan("ns") == []


async def test_a_second_store_on_the_same_url_sees_every_write(backend: StateBackend) -> None:
    if not backend.shared:
        pytest.skip("memory stores share nothing")
    one, two = await backend.open(), await backend.open()
    await one.put("ns", "k", {"v": 1})
    assert await two.get("ns", "k") == {"v": 1}
    assert await two.delete("ns", "k")
    assert await one.get("ns", "k") is None


async def test_values_survive_closing_and_reopening_the_store(backend: StateBackend) -> None:
    if not backend.shared:
        pytest.skip("memory keeps nothing across stores")
    first = await backend.open()
    await first.put("pairing.paired", "telegram:1", {"user": "1"})
    await backend.close_all()
    again = await backend.open()
    assert await again.scan("pairing.paired") == [("telegram:1", {"user": "1"})]
