"""Wakes: frozen values, their wire form, and the YAML header the model sees."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from threads.keys import SessionKey
from threads.sinks import DropSink
from threads.wake import (
    SessionCaller,
    SystemCaller,
    UserCaller,
    Wake,
    WakeSource,
    render_prompt,
    wake_from_wire,
    wake_to_wire,
)

WHEN = datetime(2026, 11, 29, 18, 30, 5, tzinfo=UTC)


def test_a_wake_is_frozen() -> None:
    wake = Wake(source=WakeSource.CLI, body="hi", caller=UserCaller(channel="cli", user_id="u"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        wake.body = "changed"  # type: ignore[misc]


def test_wake_sources_cover_the_channels_and_the_system() -> None:
    assert {s.value for s in WakeSource} == {
        "telegram", "discord", "web", "cli", "api", "session", "child_completed",
        "cron", "heartbeat", "progress", "compression", "resume",
    }  # fmt: skip


def test_a_user_wake_header_says_user_and_how_to_reply() -> None:
    wake = Wake(
        source=WakeSource.TELEGRAM,
        body="Where is my order?",
        caller=UserCaller(channel="telegram", user_id="7", name="Ann"),
        created=WHEN,
    )
    text = render_prompt(wake, thread="telegram:7", session_id="s_1", tz=ZoneInfo("Europe/Berlin"))
    header, body = text.split("\n---\n")
    assert body == "Where is my order?"
    assert "source: telegram" in header
    assert "thread: telegram:7" in header or 'thread: "telegram:7"' in header
    assert "time: 2026-11-29 19:30:05 Sunday Europe/Berlin" in header
    assert "sender: user" in header
    assert "caller_session_key" not in header
    assert "injected" not in header


def test_a_cross_session_wake_carries_the_caller_session_key() -> None:
    wake = Wake(
        source=WakeSource.SESSION,
        body="report ready",
        caller=SessionCaller(session_key=SessionKey("cli:threads:r")),
        created=WHEN,
    )
    text = render_prompt(wake, thread="cli", session_id="s_1")
    assert 'caller_session_key: "cli:threads:r"' in text


def test_a_drop_sink_wake_says_its_output_is_dropped() -> None:
    wake = Wake(
        source=WakeSource.CRON,
        body="check in",
        caller=SystemCaller(name="cron"),
        sink=DropSink(reason="cron"),
        created=WHEN,
    )
    text = render_prompt(wake, thread="cli", session_id="s_1")
    assert "sender: system" in text
    assert "Caller is cron - output to caller is dropped" in text


@pytest.mark.parametrize(
    "caller",
    [
        UserCaller(channel="telegram", user_id="7", name="Ann"),
        SessionCaller(session_key=SessionKey("cli:threads:r")),
        SystemCaller(name="cron"),
    ],
)
def test_a_wake_header_is_ascii_so_an_ascii_prompt_is_held_at_a_byte_a_character(
    caller: UserCaller | SessionCaller | SystemCaller,
) -> None:
    # Python keeps a str at the width of its widest character: one em dash
    # doubles the memory of every prompt a live session holds.
    wake = Wake(source=WakeSource.CRON, body="check in", caller=caller, created=WHEN)
    assert render_prompt(wake, thread="cli", session_id="s_1").isascii()
    dropped = dataclasses.replace(wake, sink=DropSink(reason="cron"))
    assert render_prompt(dropped, thread="cli", session_id="s_1").isascii()


def test_an_injected_wake_is_marked() -> None:
    wake = Wake(source=WakeSource.CLI, body="also", caller=UserCaller(channel="cli", user_id="u"))
    assert "injected: true" in render_prompt(wake, thread="cli", session_id="s", injected=True)


def test_a_wake_round_trips_through_its_wire_form() -> None:
    wake = Wake(
        source=WakeSource.SESSION,
        body="x",
        caller=SessionCaller(session_key=SessionKey("cli")),
        sink=DropSink(reason="cron"),
        agent="search",
        meta={"k": "v"},
        created=WHEN,
    )
    back = wake_from_wire(wake_to_wire(wake), "x", lambda wire: DropSink(reason=wire["reason"]))
    assert back == wake


def test_a_wakes_meta_cannot_change_under_it() -> None:
    meta = {"k": "v"}
    wake = Wake(
        source=WakeSource.CLI, body="x", caller=UserCaller(channel="cli", user_id="u"), meta=meta
    )
    meta["k"] = "changed"
    assert wake.meta["k"] == "v"
    with pytest.raises(TypeError):
        wake.meta["k"] = "w"  # type: ignore[index]
