"""A live session finds every entry by id, exactly, while most ids are held as numbers."""

from __future__ import annotations

import tracemalloc

from threads.id_index import KEEP, SETTLE_AT, IdIndex, id_of, number_of
from threads.ids import new_entry_id


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


def test_settled_ids_cost_a_fraction_of_a_dict() -> None:
    ids = [new_entry_id() for _ in range(10_000)]
    tracemalloc.start()
    try:
        index = IdIndex()
        for at, entry_id in enumerate(ids):
            index.add(entry_id, at)
            index.settle_if_grown(at)
        held, _peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert held / len(ids) < 40
