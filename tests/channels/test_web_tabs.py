"""What a web chat keeps for chats with no open tab stays bounded."""

from __future__ import annotations

from channels.web.tabs import BACKLOG, Tabs


def test_a_chats_backlog_keeps_its_last_frames_once_each() -> None:
    tabs = Tabs()
    for n in range(BACKLOG + 5):
        tabs.keep("c1", {"type": "assistant", "id": f"o{n}", "text": f"reply {n}"})
    tabs.keep("c1", {"type": "assistant", "id": f"o{BACKLOG + 4}", "text": "again"})
    kept = tabs.waiting("c1")
    assert [frame["id"] for frame in kept] == [f"o{n}" for n in range(5, BACKLOG + 5)]
    assert tabs.waiting("c1") == []


def test_past_its_bound_the_chat_whose_last_frame_is_oldest_lets_go_of_its_backlog() -> None:
    tabs = Tabs(backlog_chats=3)
    for chat in ("a", "b", "c"):
        tabs.keep(chat, {"type": "notice", "text": f"for {chat}"})
    tabs.keep("a", {"type": "notice", "text": "for a, later"})  # "b" is now the oldest
    tabs.keep("d", {"type": "notice", "text": "for d"})
    assert tabs.waiting("b") == []
    assert [len(tabs.waiting(chat)) for chat in ("a", "c", "d")] == [2, 1, 1]
