"""A session's identity, and the run metadata every turn carries to its model client.

A session has two names. Its storage id (``s_…``) is a time-sortable key: it
says when the session was made and sorts with its neighbours, which is right
for files and wrong for a browser. Its public id (``weft.public_id`` in the
header) is an opaque random handle, minted at create, never inherited by a
fork, never changed: the one to show people or hand to a web page.

Every run carries ``weft.session.id`` and ``weft.turn`` (the run's number),
``weft.public_id``, and the fork origin or pool lineage when the header names
one. Keys under ``weft.`` belong to the header: an info entry never
overrides one, whatever a hand-edited file says (:func:`merged_meta`).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Mapping

from threads.store.entries import Entry, Header, InfoEntry

RESERVED = "weft."
PUBLIC_ID = "weft.public_id"
SESSION_ID = "weft.session.id"
TURN = "weft.turn"
FORK_SESSION = "weft.fork.session"
FORK_ENTRY = "weft.fork.entry"
LINEAGE_SESSION = "weft.lineage.session"
LINEAGE_CALL = "weft.lineage.call"


def new_public_id() -> str:
    """An opaque, unguessable handle: ``p_`` and 24 hex digits, unrelated to the storage id."""
    return f"p_{secrets.token_hex(12)}"


def is_reserved(key: str) -> bool:
    return key.startswith(RESERVED)


def merged_meta(header_meta: Mapping[str, str], entries: Iterable[Entry]) -> dict[str, str]:
    """The current metadata: the header's, overlaid by every info entry's in order.

    A reserved key keeps the header's value; one the header lacks keeps the
    first value an info entry gave it (only a file written by other hands can
    hold such an entry: ``set_info`` refuses them).
    """
    merged = dict(header_meta)
    for entry in entries:
        if not isinstance(entry, InfoEntry):
            continue
        for key, value in entry.meta.items():
            if is_reserved(key) and key in merged:
                continue
            merged[key] = value
    return merged


def run_metadata(header: Header, run_id: str) -> dict[str, str]:
    """What a run of the session tells its model client about where it comes from.

    Read from the header alone (the public id is set there, at create): the
    cost of a turn does not grow with the session's history.
    """
    out = {SESSION_ID: header.id, TURN: run_id.rpartition("-t")[2] or run_id}
    public = header.meta.get(PUBLIC_ID)
    if public:
        out[PUBLIC_ID] = public
    if header.parent is not None:
        out[FORK_SESSION] = header.parent.session
        if header.parent.entry:
            out[FORK_ENTRY] = header.parent.entry
    if header.lineage is not None:
        out[LINEAGE_SESSION] = header.lineage.parent_session
        if header.lineage.parent_call_id:
            out[LINEAGE_CALL] = header.lineage.parent_call_id
    return out
