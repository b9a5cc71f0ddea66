"""A live session finds every entry by id, exactly, while most ids are held as numbers."""

from __future__ import annotations

import dataclasses
import random
import tracemalloc

import pytest

from threads import ids as ids_module
from threads.id_index import KEEP, SETTLE_AT, IdIndex, id_in, id_of, number_of, numbered
from threads.ids import new_entry_id, new_session_id
from threads.outbound import send_id
from threads.store.entries import accepted_id


def test_a_minted_id_and_its_number_are_one_to_one_and_nothing_else_is_numbered() -> None:
    minted = [new_entry_id() for _ in range(100)]
    assert [id_of(n) for n in map(number_of, minted) if n is not None] == minted
    assert number_of(minted[0].lower()) is None
    others = [
        "e_1",
        "s_01M967WM3B2QEV6TKJA10XENDP-t1-s1-1",
        "e_8" + "0" * 25,  # past 128 bits
        "e_" + "I" * 26,  # not a Crockford digit
        "e_+" + "0" * 24 + "1",  # what int() would take but a ULID is not
        "e_ " + "0" * 24 + "A",
        "e_" + "0" * 23 + "_01",
        "e_\u0663" + "0" * 25,  # a digit to int(), not ASCII
    ]
    assert [number_of(other) for other in others] == [None] * len(others)


def test_every_id_is_found_at_its_place_after_settles_and_strangers_are_not() -> None:
    index = IdIndex()
    ids = []
    for at in range(2_000):
        entry_id = new_entry_id() if at % 5 else f"s_x-t{at}-s1-1"  # an outbound record's shape
        ids.append(entry_id)
        index.add(entry_id, at)
        index.settle_if_grown(at)
    assert len(index.recent) < SETTLE_AT
    assert set(index.recent.values()) >= set(range(2_000 - KEEP, 2_000))
    assert [index.get(entry_id) for entry_id in ids] == list(range(2_000))
    assert list(index.ids()) == ids
    assert len(index) == 2_000
    for stranger in (new_entry_id(), ids[1].lower(), "s_x-t1-s1-2", ids[1][:-1]):
        assert index.get(stranger) is None


def test_ids_minted_in_order_grow_one_run_and_others_are_merged_exactly() -> None:
    minted = sorted(new_entry_id() for _ in range(3_000))
    shuffled = [*minted[:1_000], *random.Random(1).sample(minted[1_000:], 2_000)]
    cases: list[tuple[list[str], int | None]] = [(minted, 1), (shuffled, None)]
    for ids, runs in cases:
        index = IdIndex()
        for at, entry_id in enumerate(ids):
            index.add(entry_id, at)
            index.settle_if_grown(at)
        assert [index.get(entry_id) for entry_id in ids] == list(range(len(ids)))
        if runs is not None:  # appended at its end, never merged again
            assert len(index._runs[""]) == runs


def held_per_id(ids: list[str]) -> float:
    """The bytes an index of ``ids``, added and settled as a session does, holds per id."""
    tracemalloc.start()
    try:
        index = IdIndex()
        for at, entry_id in enumerate(ids):
            index.add(entry_id, at)
            index.settle_if_grown(at)
        held, _peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return held / len(ids)


def a_sessions_ids(count: int, others: int = 150) -> list[str]:
    """Ids of one session's entries, each minted after ``others`` ids of other sessions."""
    ids = []
    for _ in range(count):
        for _ in range(others):
            new_entry_id()
        ids.append(new_entry_id())
    return ids


def test_settled_ids_cost_a_fraction_of_a_dict() -> None:
    # As numbers in arrays an id cost 20 bytes; as differences in blocks, under half that.
    assert held_per_id(a_sessions_ids(10_000)) < 10


def test_ids_of_several_processes_and_wide_gaps_are_found_exactly() -> None:
    minter = ids_module._ulid
    ids = a_sessions_ids(300, others=0)
    minter.reseed()  # a restart: the count starts far off, its differences past 64 bits
    ids += a_sessions_ids(300, others=0)
    session = new_session_id()
    ids += [send_id(f"{session}-t{turn}", 2**32 - 1, turn) for turn in (1, 2, 2**63, 2**64 - 1)]
    ids += [send_id(f"{session}-t7", step, 0) for step in (0, 2**31, 2**32 - 1)]
    random.Random(2).shuffle(ids)
    index = IdIndex()
    for at, entry_id in enumerate(ids):
        index.add(entry_id, at)
        index.settle_if_grown(at)
    index.settle(len(ids))
    assert [index.get(entry_id) for entry_id in ids] == list(range(len(ids)))
    assert list(index.ids()) == ids
    restored = IdIndex.restored(index.dump())
    assert [restored.get(entry_id) for entry_id in ids] == list(range(len(ids)))
    for stranger in (new_entry_id(), send_id(f"{session}-t7", 1, 0), id_of(0), id_of(2**128 - 1)):
        assert index.get(stranger) is None
        assert restored.get(stranger) is None


def test_receipts_and_sends_are_numbered_in_families_of_their_own_one_to_one() -> None:
    session = new_session_id()
    shaped = [
        accepted_id(new_entry_id()),
        new_entry_id() + "-i",
        send_id(f"{session}-t1", 1, 0),
        send_id(f"{session}-t123456", 40, 7),
        send_id(f"{new_session_id()}-t2", 1, 1),  # a fork's copy of another session's send
        "s_x-t0-s0-0",
    ]
    found = [numbered(entry_id) for entry_id in shaped]
    assert [f[0] if f else None for f in found] == [
        "-r",
        "-i",
        f"{session}-t",
        f"{session}-t",
        shaped[4].rpartition("-t")[0] + "-t",
        "s_x-t",
    ]
    assert [id_in(*f) for f in found if f] == shaped
    strangers = [
        "e_1-r",
        new_entry_id() + "-x",
        f"{session}-t01-s1-1",  # a number not written the one way str writes it
        f"{session}-t1-s1-+1",
        f"{session}-t1-s1",
        f"{session}-t1-s1-1-2",
        f"{session}-t1-s1-\u0663",
        f"{session}-t{2**64}-s1-1",  # past what the number holds
        f"{session}-t1-s{2**32}-1",
        "-t1-s1-1",
        new_entry_id() + "-t1-s1-1x",
    ]
    assert [numbered(stranger) for stranger in strangers] == [None] * len(strangers)


def test_a_sessions_receipts_and_sends_settle_into_numbers_and_are_found() -> None:
    session = new_session_id()
    index, ids = IdIndex(), []
    for turn in range(1, 1_001):
        prompt = new_entry_id()
        for entry_id in (accepted_id(prompt), prompt, send_id(f"{session}-t{turn}", 1, 0)):
            index.add(entry_id, len(ids))
            ids.append(entry_id)
            index.settle_if_grown(len(ids) - 1)
    index.add("e_loose", len(ids))
    ids.append("e_loose")
    index.settle(len(ids))
    assert [index.get(entry_id) for entry_id in ids] == list(range(len(ids)))
    assert list(index.ids()) == ids
    assert len(index) == len(ids)
    dumped = index.dump()
    assert dumped.others == [("e_loose", len(ids) - 1)]
    assert {family for family, *_ in dumped.runs} == {"", "-r", f"{session}-t"}
    restored = IdIndex.restored(dumped)
    assert [restored.get(entry_id) for entry_id in ids] == list(range(len(ids)))
    for stranger in (accepted_id(new_entry_id()), send_id(f"{session}-t1", 1, 1)):
        assert index.get(stranger) is None


def test_settled_receipts_and_sends_cost_a_fraction_of_a_dict() -> None:
    session = new_session_id()
    ids = [
        accepted_id(new_entry_id()) if n % 2 else send_id(f"{session}-t{n}", 1, 0)
        for n in range(10_000)
    ]
    assert held_per_id(ids) < 16


def test_a_dumped_run_whose_differences_do_not_match_its_blocks_is_refused() -> None:
    ids = a_sessions_ids(500)
    index = IdIndex()
    for at, entry_id in enumerate(ids):
        index.add(entry_id, at)
        index.settle_if_grown(at)
    dumped = index.dump()
    family, run = dumped.runs[0]
    torn = dataclasses.replace(run, data=run.data[:-1])
    with pytest.raises(ValueError, match="blocks do not match"):
        IdIndex.restored(dataclasses.replace(dumped, runs=[(family, torn)]))
