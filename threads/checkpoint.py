"""Opening a long session from its checkpoint: decode only what came after it.

Decision perf-19. An open reads every entry once to learn what a live
session needs of them: their ids and kinds, the leaf's path, the run-id
counter, wake origins, unmarked sends, unsettled input and unfinished runs.
For a session that compacted as it grew, the context is a small tail of
that history, yet the open is per entry. So an open that decoded
:data:`CHECKPOINT_AFTER` entries or more of a session that holds a
compaction leaves a checkpoint: that state, as plain values (the lines
still packed as the tree holds them, the ids as numbers), through the
store's :class:`~threads.store.base.Checkpointer`, which ties it to the
session's bytes. The next open restores the tree from it and decodes only
the lines after it; the context is built from the path's latest summary
on (:func:`threads.tree.context_at`).

Nothing about a session's meaning moves: the checkpoint holds what an open
of every line derives, the store uses it only while the bytes it came from
are unchanged, and an open whose later lines need something the checkpoint
does not keep (an approval, a run finished before it re-run after it, a
receipt for a prompt before it) reads every line instead.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import sys
from array import array
from collections.abc import Sequence

import orjson

from threads.entry_log import LogParts
from threads.id_index import IndexDump, RunParts
from threads.session import Session, SessionOptions
from threads.store.base import Checkpointer, Mark, Resumed, SessionStore
from threads.store.entries import (
    CompactionEntry,
    Entry,
    MessageEntry,
    ReceiptEntry,
    TurnEntry,
)
from threads.store.packed import BLOCK, DICTIONARY_ID
from threads.tree import EntryTree, TreeParts, unfinished_runs, unsettled_receipts
from threads.turns import Agent

log = logging.getLogger(__name__)

CHECKPOINT_AFTER = 2048
"""Entries an open decodes past the latest checkpoint before it leaves a new one."""

STATE = 4
"""The format of the state kept in a checkpoint; another is read as none (2: the id index's
runs by family, decision perf-28, and the path four bytes a position; 3: blocks packed
against a dictionary, named in the head, decision perf-38; 4: the id index's runs as blocks
of differences, decision perf-46)."""

_APPROVAL = "approval"
"""Kinds whose open-time reading (unfinished resumes) walks the whole history: not kept."""


async def open_session(
    store: SessionStore,
    session_id: str,
    agent: Agent,
    *,
    options: SessionOptions | None = None,
) -> Session:
    """Load a session (as :meth:`Session.open`), from its checkpoint where the store keeps one.

    A tree restored from a checkpoint is built on a worker thread, as the store
    decodes there (the tree is the open's own until the session is made of
    it); a tree of every entry is built on the event loop, as it always was: on
    a worker thread its per-entry scaffolding lands in that thread's heap,
    which kept 6–12 % more resident memory per live session.
    """
    if not isinstance(store, Checkpointer):
        resumed = Resumed(loaded=await store.load(session_id))
    else:
        resumed = await store.load_resumed(session_id, due=CHECKPOINT_AFTER)
    built = None
    if resumed.before:
        built = await asyncio.get_running_loop().run_in_executor(None, build, resumed)
        if built is None:
            assert isinstance(store, Checkpointer)
            resumed = await store.load_resumed(session_id, due=CHECKPOINT_AFTER, whole=True)
    if built is None:
        built = build(resumed)
        assert built is not None
    session = Session.from_tree(store, resumed.loaded, built.tree, agent, options=options)
    if resumed.mark is not None and built.carried is not None:
        assert isinstance(store, Checkpointer)
        await save(store, built.tree, resumed.mark, built.carried)
    return session


@dataclasses.dataclass(frozen=True, slots=True)
class Built:
    """A tree an open built, and the entries a checkpoint of it would carry (when one is due)."""

    tree: EntryTree
    carried: list[Entry] | None


def build(resumed: Resumed) -> Built | None:
    """The tree of a load, restored from its checkpoint first when it was read from one;
    None when that checkpoint cannot be used (:func:`restored_tree`)."""
    loaded = resumed.loaded
    tree = restored_tree(resumed) if resumed.before else EntryTree(loaded.header.id)
    if tree is None:
        return None
    skipped = loaded.report.skipped if loaded.report else ()
    tree.load(loaded.entries, salvaged=bool(skipped), first_line=len(tree.entries) + 2)
    carried = None
    if resumed.mark is not None and worth_keeping(tree):
        # What the inbox reads, found while the entries are values (their lines are kept next).
        view = tree.open_view()
        # As the inbox: no receipt ever written, none unsettled (no walk to find so).
        unsettled = unsettled_receipts(view) if tree.entries.has_kind(ReceiptEntry.TYPE) else []
        carried = [*unsettled, *unfinished_runs(view)]
    return Built(tree=tree, carried=carried)


def worth_keeping(tree: EntryTree) -> bool:
    """A checkpoint pays where the context is a tail of the history: once it compacted.
    A session with approvals is opened whole (its resumes are read from every entry)."""
    kinds = set(tree.entries.kinds())
    return CompactionEntry.TYPE in kinds and not any(k.startswith(_APPROVAL) for k in kinds)


async def save(store: Checkpointer, tree: EntryTree, mark: Mark, carried: list[Entry]) -> None:
    """Keep the tree's state as the session's checkpoint at ``mark``; a failure is logged.

    Encoded on a worker thread: the session is the open's own until it returns.
    """
    loop = asyncio.get_running_loop()
    made = await loop.run_in_executor(None, checkpoint_of, tree, mark, carried)
    if made is None:
        return
    state, held = made
    try:
        await store.save_checkpoint(tree.session, mark, state, held)
    except OSError as exc:
        log.warning("session %s: its checkpoint was not written: %s", tree.session, exc)


def checkpoint_of(
    tree: EntryTree, mark: Mark, carried: list[Entry]
) -> tuple[bytes, list[bytes]] | None:
    """The state and held receipts' lines of a checkpoint of ``tree`` at ``mark``; None when
    the tree does not hold its state as plain values (:meth:`EntryTree.dump`)."""
    parts = tree.dump()
    if parts is None or len(tree.entries) != mark.entries:
        return None
    entries = tree.entries
    places = [(entries.position(e.id), e) for e in carried]
    refs = sorted(
        (at, e.run_id if isinstance(e, MessageEntry) else "") for at, e in places if at is not None
    )
    held = [entries.line(at) for at, e in places if at is not None and isinstance(e, ReceiptEntry)]
    return encode_state(parts, refs), held


def restored_tree(resumed: Resumed) -> EntryTree | None:
    """The tree of the entries a resumed load left out, or None when its state cannot be
    used (another format, or later lines that need more than it keeps)."""
    session = resumed.loaded.header.id
    try:
        parts, refs = decode_state(resumed.state, resumed.before)
        tree = EntryTree.restored(session, parts, carried=[])
    except (ValueError, TypeError, KeyError, IndexError, orjson.JSONDecodeError) as exc:
        log.warning("session %s: its checkpoint's state cannot be read (%s)", session, exc)
        return None
    read = tree.entries.reader()
    carried = []
    for at, run_id in refs:
        entry = read(at)
        if isinstance(entry, MessageEntry) and entry.run_id != run_id:
            entry = dataclasses.replace(entry, run_id=run_id)
        carried.append(entry)
    tree.carried = carried
    if not follows(tree, resumed.loaded.entries):
        return None
    return tree


def follows(tree: EntryTree, later: Sequence[Entry]) -> bool:
    """Whether ``later`` entries read with the carried ones mean what they mean read with
    every entry before them: no approval kind, no turn that re-runs a run not started
    after the checkpoint nor carried, no accepted receipt for a prompt before it."""
    started = {e.run_id for e in tree.carried if isinstance(e, MessageEntry)}
    for entry in later:
        if entry.TYPE.startswith(_APPROVAL):
            return False
        if isinstance(entry, MessageEntry) and entry.run_id:
            started.add(entry.run_id)
        elif isinstance(entry, TurnEntry) and entry.rerun:
            if entry.run_id not in started:
                return False
            started.add(entry.rerun)
        elif (
            isinstance(entry, ReceiptEntry)
            and entry.status == "accepted"
            and entry.turn
            and tree.entries.position(entry.turn) is not None
        ):
            return False
    return True


# -- the state's bytes: a JSON line, then the arrays and the packed lines

_ORDER = {"order": sys.byteorder, "I": array("I").itemsize}


def encode_state(parts: TreeParts, carried: list[tuple[int, str]]) -> bytes:
    """``parts`` and the carried entries' (position, run id) as the checkpoint's state."""
    kinds = parts.log.kinds
    table = sorted(set(kinds))
    code = {kind: n for n, kind in enumerate(table)}
    index = parts.log.index
    head = {
        "v": STATE,
        "arrays": _ORDER,
        "dictionary": DICTIONARY_ID,
        "entries": len(kinds),
        "leaf": parts.leaf,
        "turn": parts.highest_turn,
        "origins": parts.origins,
        "unmarked": parts.unmarked,
        "carried": carried,
        "kinds": table,
        "recent": index.recent,
        "others": index.others,
        "runs": [[family, len(run.counts), len(run.data)] for family, run in index.runs],
        "path": len(parts.path),
        "blocks": [len(block) for block in parts.log.blocks],
        "tail": len(parts.log.tail),
    }
    sections = [bytes(map(code.__getitem__, kinds)), parts.path.tobytes()]
    for _, run in index.runs:
        sections += [run.highs.tobytes(), run.lows.tobytes(), run.firsts.tobytes()]
        sections += [run.counts.tobytes(), run.codes, run.data]
    sections += [*parts.log.blocks, b"\n".join(parts.log.tail)]
    return orjson.dumps(head) + b"\n" + b"".join(sections)


def decode_state(state: bytes, entries: int) -> tuple[TreeParts, list[tuple[int, str]]]:
    """What :func:`encode_state` wrote; ValueError when it is not that, for ``entries``."""
    end = state.index(b"\n")
    head = orjson.loads(state[:end])
    if (
        head["v"] != STATE
        or head["arrays"] != _ORDER
        or head["dictionary"] != DICTIONARY_ID
        or head["entries"] != entries
    ):
        raise ValueError("not a state of this build for these entries")
    view = memoryview(state)
    at = end + 1

    def take(size: int) -> memoryview:
        nonlocal at
        if at + size > len(state):
            raise ValueError("the state is shorter than its head says")
        at += size
        return view[at - size : at]

    table: list[str] = head["kinds"]
    kinds = list(map(table.__getitem__, take(entries)))
    path = _array("I", take(_ORDER["I"] * head["path"]))
    runs = []
    for family, count, size in head["runs"]:
        run = RunParts(
            highs=_array("Q", take(8 * count)),
            lows=_array("Q", take(8 * count)),
            firsts=_array("I", take(_ORDER["I"] * count)),
            counts=_array("B", take(count)),
            codes=bytes(take(3 * count)),
            data=bytes(take(size)),
        )
        runs.append((str(family), run))
    blocks = [bytes(take(size)) for size in head["blocks"]]
    rest = bytes(view[at:])
    tail = rest.split(b"\n") if head["tail"] else []
    if len(tail) != head["tail"] or len(blocks) * BLOCK + len(tail) != entries:
        raise ValueError("the state's lines do not match its entries")
    # Pairs as JSON gave them: a dict is made of them whole (the file's CRC vouches for them).
    index = IndexDump(recent=head["recent"], others=head["others"], runs=runs)
    parts = TreeParts(
        log=LogParts(blocks=blocks, tail=tail, kinds=kinds, index=index),
        leaf=str(head["leaf"]),
        path=path,
        highest_turn=int(head["turn"]),
        origins=[(str(o), str(r)) for o, r in head["origins"]],
        unmarked=[int(p) for p in head["unmarked"]],
    )
    return parts, [(int(p), str(r)) for p, r in head["carried"]]


def _array(code: str, data: memoryview) -> array[int]:
    out = array(code)
    out.frombytes(data)
    return out
