"""The heap's set-up for a serving process: start-up objects out of every collection."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from gateway.heap import THRESHOLDS, settle_heap


class Node:
    """A plain object that can be part of a reference cycle."""

    def __init__(self) -> None:
        self.other: object = None


@pytest.fixture
def restored_collector() -> Iterator[None]:
    """The test process's collector as it was: nothing stays frozen, thresholds back."""
    thresholds = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)


@pytest.mark.usefixtures("restored_collector")
def test_start_up_objects_are_left_out_of_every_later_collection() -> None:
    kept = Node()
    settle_heap()
    assert gc.get_freeze_count() > 0
    assert not any(o is kept for o in gc.get_objects())
    later = Node()
    assert any(o is later for o in gc.get_objects())


@pytest.mark.usefixtures("restored_collector")
def test_garbage_cycles_are_collected_before_the_freeze() -> None:
    cycle = Node()
    cycle.other = cycle
    gone = weakref.ref(cycle)
    del cycle
    settle_heap()
    assert gone() is None


@pytest.mark.usefixtures("restored_collector")
def test_young_collections_wait_for_ten_thousand_allocations() -> None:
    settle_heap()
    assert gc.get_threshold() == THRESHOLDS
    assert THRESHOLDS[0] == 10_000
