"""The conversation a page is shown, read from a session's entries."""

from __future__ import annotations

from channels.web.history import chat_history, message_ids
from threads.messages import FilePart, Message, TextPart, ToolCallPart, ToolResultPart
from threads.store.entries import (
    OUTBOUND_BLOCKED,
    OUTBOUND_DELIVERED,
    OUTBOUND_PENDING,
    Entry,
    MessageEntry,
    OutboundEntry,
)

WEB = {"kind": "channel", "channel": "web", "chat": "c1"}


def prompt(body: str, *, run: str, message_id: str = "", sender: str = "user") -> MessageEntry:
    text = f"---\nsource: web\nsender: {sender}\n---\n{body}"
    wake = {"meta": {"message_id": message_id}} if message_id else {}
    return MessageEntry(id=f"p-{run}", message=Message.user(text), run_id=run, wake=wake)


def dispatch(n: int, *sends: tuple[str, str]) -> MessageEntry:
    args = {"sends": [{"to": to, "body": body} for to, body in sends]}
    call = ToolCallPart(id=f"d{n}", name="dispatch", args=args)
    return MessageEntry(id=f"a{n}", message=Message(role="assistant", content=(call,)))


def result(n: int, *, error: bool = False) -> MessageEntry:
    part = ToolResultPart(call_id=f"d{n}", name="dispatch", content="{}", is_error=error)
    return MessageEntry(id=f"r{n}", message=Message(role="tool", content=(part,)))


def record(ident: str, text: str, *, run: str, to: dict[str, str] = WEB) -> OutboundEntry:
    return OutboundEntry(id=ident, status=OUTBOUND_PENDING, run_id=run, to=to, text=text)


def mark(ident: str, status: str) -> OutboundEntry:
    return OutboundEntry(id=f"m-{ident}", status=status, record=ident)


def shown(path: list[Entry]) -> list[tuple[str, str]]:
    items, _ = chat_history(path, path, limit=50, render=lambda text: f"<p>{text}</p>")
    return [(i["role"], i.get("text", "")) for i in items]


def test_the_ledgers_records_are_the_answers_each_under_its_id() -> None:
    path: list[Entry] = [
        prompt("hi", run="t1", message_id="m-1"),
        dispatch(1, ("caller:user", "hello")),
        record("t1-s1-1", "hello", run="t1"),
        mark("t1-s1-1", OUTBOUND_DELIVERED),
        result(1),
    ]
    items, more = chat_history(path, path, limit=50, render=lambda text: f"<p>{text}</p>")
    assert items == [
        {"role": "user", "text": "hi", "files": [], "id": "m-1"},
        {"role": "bot", "text": "hello", "html": "<p>hello</p>", "id": "t1-s1-1"},
    ]
    assert not more


def test_a_blocked_send_and_one_to_elsewhere_are_not_shown() -> None:
    telegram = {"kind": "channel", "channel": "telegram", "chat": "9"}
    path: list[Entry] = [
        prompt("hi", run="t1"),
        dispatch(1, ("caller:user", "kept"), ("caller:user", "blocked")),
        record("t1-s1-1", "kept", run="t1"),
        record("t1-s1-2", "blocked", run="t1"),
        record("t1-s1-3", "to a session", run="t1", to={"kind": "session", "key": "cli"}),
        record("t1-s1-4", "to telegram", run="t1", to=telegram),
        mark("t1-s1-2", OUTBOUND_BLOCKED),
    ]
    assert shown(path) == [("user", "hi"), ("bot", "kept")]


def test_a_turn_from_before_the_ledger_shows_its_dispatch_sends_and_final_text() -> None:
    path: list[Entry] = [
        prompt("one", run="t1"),
        dispatch(1, ("caller:user", "first"), ("caller:session", "not for the page")),
        result(1),
        prompt("two", run="t2"),
        dispatch(2, ("user", "refused send")),
        result(2, error=True),
        MessageEntry(id="a3", message=Message.assistant("a final text")),
    ]
    assert shown(path) == [
        ("user", "one"),
        ("bot", "first"),
        ("user", "two"),
        ("bot", "a final text"),
    ]


def test_wakes_from_elsewhere_are_not_the_persons_messages() -> None:
    path: list[Entry] = [
        prompt("a cron task", run="t1", sender="system"),
        MessageEntry(id="x", message=Message.user("no header at all")),
        prompt("mine", run="t2"),
    ]
    assert shown(path) == [("user", "mine")]


def test_tool_calls_in_a_row_are_one_folded_item() -> None:
    calls = (
        ToolCallPart(id="c1", name="web_fetch", args={"url": "https://example.com"}),
        ToolCallPart(id="c2", name="read_file", args={"path": "a.txt"}),
    )
    results = (
        ToolResultPart(call_id="c1", name="web_fetch", content="200 OK"),
        ToolResultPart(call_id="c2", name="read_file", content="no such file", is_error=True),
    )
    path: list[Entry] = [
        prompt("look", run="t1"),
        MessageEntry(id="a1", message=Message(role="assistant", content=calls)),
        MessageEntry(id="r1", message=Message(role="tool", content=results)),
    ]
    items, _ = chat_history(path, path, limit=50, render=str)
    assert items[1] == {
        "role": "tools",
        "calls": [
            {
                "name": "web_fetch",
                "summary": "web_fetch(url=https://example.com) → 200 OK",
                "error": False,
            },
            {
                "name": "read_file",
                "summary": "read_file(path=a.txt) → error: no such file",
                "error": True,
            },
        ],
    }


def test_a_persons_files_are_listed_with_where_the_page_finds_them() -> None:
    picture = FilePart(url="web://web/c1/" + "a" * 32 + ".png", media_type="image/png", size=9)
    elsewhere = FilePart(url="telegram://telegram/f1", media_type="image/jpeg", name="x.jpg")
    text = TextPart(text="---\nsender: user\n---\nsee")
    entry = MessageEntry(
        id="p", run_id="t1", message=Message(role="user", content=(text, picture, elsewhere))
    )
    items, _ = chat_history([entry], [entry], limit=50, render=str)
    assert items[0]["files"] == [
        {"name": "file", "type": "image/png", "size": 9, "url": f"/files/{'a' * 32}.png"},
        {"name": "x.jpg", "type": "image/jpeg", "size": 0, "url": ""},
    ]


def test_the_page_ids_of_accepted_messages_are_found_in_the_wakes() -> None:
    path: list[Entry] = [prompt("a", run="t1", message_id="m-1"), prompt("b", run="t2")]
    assert message_ids(path) == {"m-1"}
