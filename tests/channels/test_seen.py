"""A channel's memory of what it handled: bounded in count and in age."""

from __future__ import annotations

from channels.seen import Seen
from tests.clock import Seconds


def test_a_key_handled_again_within_the_window_is_a_duplicate() -> None:
    seen = Seen(size=8, ttl=60, clock=Seconds())
    assert not seen.again(("chat", 1))
    assert seen.again(("chat", 1))
    assert not seen.again(("chat", 2))


def test_keys_older_than_the_ttl_are_forgotten() -> None:
    clock = Seconds()
    seen = Seen(size=8, ttl=60, clock=clock)
    for n in range(5):
        seen.again(n)
    clock.now += 61
    assert not seen.again("new")
    assert len(seen) == 1, "only the key seen within the last minute is kept"


def test_no_more_than_size_keys_are_kept_the_oldest_go_first() -> None:
    seen = Seen(size=3, ttl=60, clock=Seconds())
    for n in range(5):
        seen.again(n)
    assert len(seen) == 3
    assert not seen.again(0), "the oldest was forgotten"
    assert seen.again(4)
