"""A line's latest turn and what followed it are kept as entries land, and equal a walk's."""

from __future__ import annotations

import random

from threads.agent.compaction import estimate_tokens
from threads.ids import new_entry_id
from threads.messages import Message, stored_size
from threads.store.codec import encode_entry
from threads.store.entries import CompactionEntry, Entry, LeafEntry, MessageEntry, TurnEntry
from threads.tree import EntryTree, TurnTail, turn_tail_of


def as_pair(tail: TurnTail | None) -> tuple[int, list[Message]] | None:
    return None if tail is None else (tail.reported, list(tail.since))


def walked(tree: EntryTree) -> tuple[int, list[Message]] | None:
    return as_pair(turn_tail_of(tree.path_reversed()))


def grow(tree: EntryTree, rng: random.Random, steps: int) -> list[Entry]:
    """Random entries on the leaf, now and then a compaction or a move of the leaf back."""
    added: list[Entry] = []
    for step in range(steps):
        roll = rng.random()
        parent = tree.leaf
        entry: Entry
        if roll < 0.5:
            entry = MessageEntry(id=new_entry_id(), parent=parent, message=Message.user(f"m{step}"))
        elif roll < 0.75:
            entry = TurnEntry(id=new_entry_id(), parent=parent, run_id="s_x-t1", last_input=step)
        elif roll < 0.85 and added:
            entry = CompactionEntry(id=new_entry_id(), parent=parent, first_kept=added[-1].id)
        elif added:
            entry = LeafEntry(id=new_entry_id(), parent=parent, entry=rng.choice(added).id)
        else:
            continue
        tree.add(entry, encode_entry(entry))
        added.append(entry)
        assert as_pair(tree.turn_tail()) == walked(tree), step
        if (tail := tree.turn_tail()) is not None and rng.random() < 0.5:
            # Asked now and then, as a turn's model calls ask: each time what a whole
            # estimate of the messages since gives.
            assert tail.estimate() == tail.reported + estimate_tokens(tail.since), step
    return added


def test_the_kept_tail_is_the_walks_after_every_entry() -> None:
    for seed in range(20):
        grow(EntryTree("s_x"), random.Random(seed), 60)


def test_a_message_keeps_no_size_of_its_own() -> None:
    # A live session's context holds thousands of messages: the estimate's sums live in
    # the turn's tail, not as a number on each message.
    tree = EntryTree("s_x")
    first = MessageEntry(id=new_entry_id(), message=Message.user("x" * 400))
    turn = TurnEntry(id=new_entry_id(), parent=first.id, run_id="s_x-t1", last_input=7)
    reply = MessageEntry(id=new_entry_id(), parent=turn.id, message=Message.user("y" * 400))
    for entry in (first, turn, reply):
        tree.add(entry, encode_entry(entry))
    tail = tree.turn_tail()
    assert tail is not None
    assert tail.estimate() == 7 + stored_size(reply.message) // 4
    assert not hasattr(reply.message, "_size")


def test_a_loaded_tree_keeps_the_tail_its_entries_told() -> None:
    source = EntryTree("s_x")
    entries = grow(source, random.Random(7), 80)
    tree = EntryTree("s_x")
    tree.load(entries)
    assert as_pair(tree.turn_tail()) == walked(source)


def test_the_tail_is_kept_not_read_again() -> None:
    tree = EntryTree("s_x")
    first = MessageEntry(id=new_entry_id(), message=Message.user("hello"))
    turn = TurnEntry(id=new_entry_id(), parent=first.id, run_id="s_x-t1", last_input=42)
    for entry in (first, turn):
        tree.add(entry, encode_entry(entry))
    tail = tree.turn_tail()
    assert tail is not None
    assert (tail.reported, tail.since) == (42, [])
    reply = MessageEntry(id=new_entry_id(), parent=turn.id, message=Message.user("again"))
    tree.add(reply, encode_entry(reply))
    assert tree.turn_tail() is tail
    assert tail.since == [reply.message]


def test_no_turn_since_a_compaction_is_none() -> None:
    tree = EntryTree("s_x")
    first = MessageEntry(id=new_entry_id(), message=Message.user("hello"))
    turn = TurnEntry(id=new_entry_id(), parent=first.id, run_id="s_x-t1", last_input=42)
    summary = CompactionEntry(id=new_entry_id(), parent=turn.id, first_kept=first.id)
    for entry in (first, turn, summary):
        tree.add(entry)
    assert tree.turn_tail() is None
