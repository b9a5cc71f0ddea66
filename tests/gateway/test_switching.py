"""How soon a serving process hands the GIL between its threads."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from gateway.switching import SWITCH_INTERVAL, settle_switching


@pytest.fixture
def restored_interval() -> Iterator[None]:
    """The test process's switch interval as it was."""
    interval = sys.getswitchinterval()
    try:
        yield
    finally:
        sys.setswitchinterval(interval)


@pytest.mark.usefixtures("restored_interval")
def test_a_waiting_thread_takes_the_gil_after_half_a_millisecond() -> None:
    assert sys.getswitchinterval() > SWITCH_INTERVAL
    settle_switching()
    assert sys.getswitchinterval() == pytest.approx(SWITCH_INTERVAL)
    assert SWITCH_INTERVAL == 0.0005
