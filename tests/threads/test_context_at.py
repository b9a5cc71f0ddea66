"""The context of a long path is read from its latest summary on, and is the context of the path."""

from __future__ import annotations

import dataclasses

from threads.context import context_builder
from threads.ids import new_entry_id
from threads.messages import Message, ToolCallPart, ToolResultPart
from threads.store.codec import encode_entry
from threads.store.entries import (
    BranchSummaryEntry,
    CompactionEntry,
    CustomMessageEntry,
    Entry,
    LeafEntry,
    MessageEntry,
    TurnEntry,
)
from threads.tree import EntryTree


def linked(entries: list[Entry], parent: str = "") -> list[Entry]:
    out: list[Entry] = []
    for entry in entries:
        out.append(dataclasses.replace(entry, parent=parent))
        parent = entry.id
    return out


def message(text: str) -> MessageEntry:
    return MessageEntry(id=new_entry_id(), message=Message.user(text))


def call(call_id: str) -> MessageEntry:
    return MessageEntry(
        id=new_entry_id(),
        message=Message(role="assistant", content=(ToolCallPart(id=call_id, name="read"),)),
    )


def result(call_id: str, text: str) -> MessageEntry:
    return MessageEntry(
        id=new_entry_id(),
        message=Message(
            role="tool", content=(ToolResultPart(call_id=call_id, name="read", content=text),)
        ),
    )


def compacted_history() -> list[Entry]:
    """Turns with tool calls, a pin, two summaries, a trim after the latest, a branch summary."""
    early = [message("first"), call("c1"), result("c1", "early result"), message("pinned me")]
    pinned_id = early[-1].id
    middle = [message("second"), call("c2"), result("c2", "a long result"), message("third")]
    first_summary = CompactionEntry(id=new_entry_id(), first_kept=middle[0].id, summary="one")
    later = [
        message("fourth"),
        call("c3"),
        result("c3", "kept result"),
        TurnEntry(id=new_entry_id(), run_id="s_x-t4"),
    ]
    summary = CompactionEntry(
        id=new_entry_id(), first_kept=later[0].id, summary="two", pinned=(pinned_id,)
    )
    trim = CompactionEntry(
        id=new_entry_id(),
        first_kept=later[0].id,
        trim={"stubs": [{"call_id": "c3", "content": "(trimmed)"}]},
    )
    tail = [
        BranchSummaryEntry(id=new_entry_id(), summary="a branch", from_entry=later[0].id),
        CustomMessageEntry(id=new_entry_id(), kind="note", message=Message.user("custom")),
        call("c4"),
    ]
    return linked([*early, *middle, first_summary, *later, summary, trim, *tail])


def tree_of(entries: list[Entry], lines: list[bytes] | None = None) -> EntryTree:
    tree = EntryTree("s_x")
    tree.load(entries)
    if lines is not None:
        tree.keep_lines(lines)
    return tree


def test_the_context_read_from_the_latest_summary_is_the_paths_context() -> None:
    entries = compacted_history()
    tree = tree_of(entries, [encode_entry(e) for e in entries])
    expected = context_builder(entries).messages()
    assert tree.context() == expected
    texts = [m.text() for m in expected]
    assert texts[:2] == ["<summary>\ntwo\n</summary>", "pinned me"]
    assert "(trimmed)" in [
        p.content for m in expected for p in m.content if isinstance(p, ToolResultPart)
    ]


def test_the_context_reads_no_line_before_the_latest_summarys_first_kept_entry() -> None:
    entries = compacted_history()
    lines = [encode_entry(e) for e in entries]
    summary = next(e for e in entries if isinstance(e, CompactionEntry) and e.summary == "two")
    kept = next(i for i, e in enumerate(entries) if e.id == summary.first_kept)
    pinned = next(i for i, e in enumerate(entries) if e.id in summary.pinned)
    # Lines no decoder reads: any read of them would fail the test.
    unreadable = [line if i >= kept or i == pinned else b"not json" for i, line in enumerate(lines)]
    tree = tree_of(entries, unreadable)
    assert tree.context() == context_builder(entries).messages()


def test_a_path_that_left_a_branch_is_read_along_its_own_line() -> None:
    entries = compacted_history()
    summary = next(e for e in entries if isinstance(e, CompactionEntry) and e.summary == "two")
    back = LeafEntry(id=new_entry_id(), parent=entries[-1].id, entry=summary.first_kept)
    after = linked([message("on the branch")], summary.first_kept)
    whole = [*entries, back, *after]
    tree = tree_of(whole, [encode_entry(e) for e in whole])
    assert tree.context() == context_builder(tree.path()).messages()
    assert tree.context()[-1].text() == "on the branch"
