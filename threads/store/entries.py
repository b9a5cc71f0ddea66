"""The session entries: the header and the sealed set of entry kinds.

The entry kinds are a sealed set, one ``type`` discriminator each. Every entry
carries ``id``, ``parent`` (absent on a root) and ``created`` (RFC 3339 UTC).
Kinds added after format 1 are written with ``"v": N``, the minimum reader
version: a reader that meets a kind it does not know, or a ``v`` above what it
reads of that kind, raises :class:`NewerFormatError` instead of skipping it.
Every other unknown key is additive and ignored.

Each kind is a frozen dataclass; its fields are named as on the wire, and a
field equal to its default is left off the line (``omitempty``). The lines
themselves are written and read by :mod:`threads.store.codec`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any, ClassVar, TypeAlias, TypeVar

from threads.messages import Message, ToolCallPart, Usage

FORMAT_VERSION = 1

# Receipt statuses (format 3).
RECEIPT_QUEUED = "queued"
RECEIPT_ACCEPTED = "accepted"
RECEIPT_DELIVERED = "delivered"
RECEIPT_DEFERRED = "deferred"
RECEIPT_DROPPED = "dropped"

# Pool receipt statuses (format 4): accepted → running ⇄ parked → one settlement.
POOL_ACCEPTED = "accepted"
POOL_RUNNING = "running"
POOL_PARKED = "parked"
POOL_DONE = "done"
POOL_FAILED = "failed"
POOL_CANCELED = "canceled"
POOL_CAPPED = "capped"
POOL_SETTLED = frozenset({POOL_DONE, POOL_FAILED, POOL_CANCELED, POOL_CAPPED})

# Outbound statuses (format 6): a pending record, then at most one mark linked to it.
OUTBOUND_PENDING = "pending"
OUTBOUND_DELIVERED = "delivered"
OUTBOUND_BLOCKED = "blocked"
OUTBOUND_FAILED = "failed"
OUTBOUND_UNCERTAIN = "uncertain"

JSON: TypeAlias = Any


def utcnow() -> datetime:
    return datetime.now(UTC)


ACCEPTED_SUFFIX = "-r"


def accepted_id(prompt_id: str) -> str:
    """The id of the ``accepted`` receipt that holds the input of prompt ``prompt_id``.

    Deriving one id from the other lets neither line name the other: the
    receipt's says its prompt, the prompt's its receipt (decision perf-12).
    """
    return prompt_id + ACCEPTED_SUFFIX


INJECTED_SUFFIX = "-i"


def injected_id(receipt_id: str) -> str:
    """The id of the message a steer delivers, from its ``queued`` receipt's (decision perf-12)."""
    return receipt_id + INJECTED_SUFFIX


def prompt_of(receipt_id: str) -> str:
    """The prompt id an ``accepted`` receipt's id says (see :func:`accepted_id`); "" if none."""
    return receipt_id[: -len(ACCEPTED_SUFFIX)] if receipt_id.endswith(ACCEPTED_SUFFIX) else ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Entry:
    """Fields every entry carries. Concrete kinds subclass it; it is never written itself."""

    TYPE: ClassVar[str] = ""
    VERSION: ClassVar[int] = 0  # the "v" written; 0 writes none
    READS: ClassVar[int] = 1  # the highest "v" this build reads of the kind

    id: str
    created: datetime = field(default_factory=utcnow)
    parent: str = ""

    def wire_version(self) -> int:
        return self.VERSION


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageEntry(Entry):
    """One message of the transcript; always in the model's context.

    ``run_id`` is set on a turn's prompt entry (``<session>-t<n>``). ``wake`` is
    this gateway's addition on prompt entries: the wake's routing (source,
    caller, sink, agent), so a restart knows where the turn's reply goes.

    ``receipt`` names the ``accepted`` receipt a queued input was taken with,
    when this is its prompt: the receipt already holds the message and the
    wake, so the line leaves both out; readers restore them from the receipt
    (:class:`threads.store.referrals.Referrals`). When the receipt's id is the
    prompt's (:func:`accepted_id`) and the prompt runs as its receipt's run,
    the line leaves out the receipt and the run id too and is written with
    ``"v": 3``; any other such line names its receipt with ``"v": 2``.

    A steer's message, delivered into a running turn, is the message of its
    ``queued`` receipt marked ``injected: true`` (:func:`threads.wake.injected_message`).
    When its id is the receipt's (:func:`injected_id`) its line is written
    with ``"v": 4`` and holds only its place in the tree. In memory every
    such entry holds its message whole, as written.
    """

    TYPE: ClassVar[str] = "message"
    READS: ClassVar[int] = 4

    message: Message
    run_id: str = ""
    wake: Mapping[str, JSON] = field(default_factory=dict)
    receipt: str = ""

    def wire_version(self) -> int:
        if not self.receipt:
            return 0
        if self.id == injected_id(self.receipt) and not self.run_id and not self.wake:
            return 4
        return 3 if self.run_id and self.receipt == accepted_id(self.id) else 2


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnEntry(Entry):
    """The per-turn ledger: outcome, usage, steps; never content, never in context."""

    TYPE: ClassVar[str] = "turn"

    run_id: str
    stop_reason: str = ""
    usage: Usage = field(default_factory=Usage)
    steps: int = 0
    err: str = ""
    pending: tuple[ToolCallPart, ...] = ()
    canceled: bool = False
    policy: str = ""
    rerun: str = ""
    last_input: int = 0
    late_steps: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactionEntry(Entry):
    """A summary of everything before ``first_kept``; nothing is deleted.

    An entry holding a trim record is written with ``"v": 5``.
    """

    TYPE: ClassVar[str] = "compaction"
    READS: ClassVar[int] = 5

    first_kept: str
    summary: str = ""
    tokens_before: int = 0
    reason: str = ""
    summarizer_usage: Usage = field(default_factory=Usage)
    summarizer_model: Mapping[str, str] = field(default_factory=dict)
    files_read: tuple[str, ...] = ()
    files_modified: tuple[str, ...] = ()
    pinned: tuple[str, ...] = ()
    range_hash: str = ""
    trim: Mapping[str, JSON] = field(default_factory=dict)

    def wire_version(self) -> int:
        return 5 if self.trim else 0


@dataclass(frozen=True, slots=True, kw_only=True)
class BranchSummaryEntry(Entry):
    """What an abandoned branch held, shown in place of it."""

    TYPE: ClassVar[str] = "branch_summary"

    summary: str
    from_entry: str


@dataclass(frozen=True, slots=True, kw_only=True)
class LeafEntry(Entry):
    """Moves the leaf to an earlier entry (branch navigation); "" is the root."""

    TYPE: ClassVar[str] = "leaf"

    entry: str


@dataclass(frozen=True, slots=True, kw_only=True)
class LabelEntry(Entry):
    """Names an entry: a bookmark; never in context."""

    TYPE: ClassVar[str] = "label"

    entry: str
    name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class InfoEntry(Entry):
    """Edits the title and metadata by appending: the last title wins, metas merge."""

    TYPE: ClassVar[str] = "info"

    title: str = ""
    meta: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class CustomEntry(Entry):
    """Application state: a kind and opaque JSON data; never in context."""

    TYPE: ClassVar[str] = "custom"

    kind: str
    data: JSON = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CustomMessageEntry(Entry):
    """An application message that is always in the model's context."""

    TYPE: ClassVar[str] = "custom_message"

    kind: str
    message: Message


@dataclass(frozen=True, slots=True, kw_only=True)
class ReceiptEntry(Entry):
    """Input accepted while the session was busy, and later what became of it.

    A steer is ``queued`` then one of ``delivered`` / ``deferred`` / ``dropped``
    (linked by ``receipt``); a queued send is one ``accepted`` entry, settled by
    its prompt entry landing (id ``turn``) or a ``dropped`` entry.

    An ``accepted`` receipt whose id is its prompt's (:func:`accepted_id`) is
    written with ``"v": 4``, which says ``accepted``, and without ``turn``,
    which its id says, nor a ``policy`` of ``queue``, the policy such a line
    leaves unsaid.
    """

    TYPE: ClassVar[str] = "receipt"
    VERSION: ClassVar[int] = 3
    READS: ClassVar[int] = 4

    status: str
    receipt: str = ""
    msg: Message | None = None
    run_id: str = ""
    turn: str = ""
    unanswered: bool = False
    policy: str = ""
    wake: Mapping[str, JSON] = field(default_factory=dict)

    def wire_version(self) -> int:
        accepted = self.status == RECEIPT_ACCEPTED
        return 4 if accepted and self.turn and self.id == accepted_id(self.turn) else 3


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolReceiptEntry(Entry):
    """The journey of one delegation to a child session."""

    TYPE: ClassVar[str] = "pool_receipt"
    VERSION: ClassVar[int] = 4
    READS: ClassVar[int] = 4

    status: str
    receipt: str = ""
    child: str = ""
    call: str = ""
    prompt: str = ""
    stop: str = ""
    usage: Usage = field(default_factory=Usage)


@dataclass(frozen=True, slots=True, kw_only=True)
class OutboundEntry(Entry):
    """The outbound ledger: one send, recorded before it leaves, then marked once.

    The record (status ``pending``) is written before the send is handed to a
    channel or another session; its id is the send's stable id, built from the
    session, the turn, the step and the send's index. A later entry linked by
    ``record`` marks what became of it: ``delivered``, ``blocked`` (a policy
    refused it; ``error`` says why), ``failed`` (``error``), or ``uncertain``
    (a restart found it unconfirmed and its receiver cannot drop a repeat).
    ``to`` is the sink's wire form; a hand-off to another session also names
    its ``target`` key and the ``wake`` it becomes there (the body is
    ``text``). Never in the model's context.
    """

    TYPE: ClassVar[str] = "outbound"
    VERSION: ClassVar[int] = 6
    READS: ClassVar[int] = 6

    status: str
    record: str = ""
    run_id: str = ""
    kind: str = ""
    to: Mapping[str, str] = field(default_factory=dict)
    target: str = ""
    wake: Mapping[str, JSON] = field(default_factory=dict)
    text: str = ""
    meta: Mapping[str, str] = field(default_factory=dict)
    expects_reply: bool = True
    delivered_to: str = ""
    error: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalRequestEntry(Entry):
    """A parked tool call made durable, with the SHA-256 of its arguments."""

    TYPE: ClassVar[str] = "approval_request"
    VERSION: ClassVar[int] = 2
    READS: ClassVar[int] = 2

    call_id: str
    tool: str
    args_sha256: str
    run_id: str
    args: JSON = None
    reason: str = ""
    expiry: datetime | None = None
    child: str = ""
    wrapper: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalDecisionEntry(Entry):
    """One decision over a parked call: approve, deny, resolve or resolve_error."""

    TYPE: ClassVar[str] = "approval_decision"
    VERSION: ClassVar[int] = 2
    READS: ClassVar[int] = 2

    call_id: str
    outcome: str
    reason: str = ""
    content: str = ""
    who: str = ""
    via: str = ""
    run_id: str = ""
    nonce: str = ""
    key_id: str = ""
    request_id: str = ""
    always: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalAuditEntry(Entry):
    """One step the decision chain took over a call."""

    TYPE: ClassVar[str] = "approval_audit"
    VERSION: ClassVar[int] = 2
    READS: ClassVar[int] = 2

    step: str
    call_id: str = ""
    outcome: str = ""
    detail: str = ""
    run_id: str = ""
    grant_id: str = ""
    grant_shared: bool = False
    key_id: str = ""
    decisions: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class GrantEntry(Entry):
    """A standing approval (or, with ``deny``, refusal) of matching future calls."""

    TYPE: ClassVar[str] = "grant"
    VERSION: ClassVar[int] = 2
    READS: ClassVar[int] = 2

    tool: str
    args: tuple[Mapping[str, JSON], ...] = ()
    deny: bool = False
    reason: str = ""
    expiry: datetime | None = None
    max_uses: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class GrantRevokedEntry(Entry):
    """Ends a grant; the grant entry stays."""

    TYPE: ClassVar[str] = "grant_revoked"
    VERSION: ClassVar[int] = 2
    READS: ClassVar[int] = 2

    grant_id: str


ENTRY_KINDS: dict[str, type[Entry]] = {
    cls.TYPE: cls
    for cls in (
        MessageEntry,
        TurnEntry,
        CompactionEntry,
        BranchSummaryEntry,
        LeafEntry,
        LabelEntry,
        InfoEntry,
        CustomEntry,
        CustomMessageEntry,
        ReceiptEntry,
        PoolReceiptEntry,
        OutboundEntry,
        ApprovalRequestEntry,
        ApprovalDecisionEntry,
        ApprovalAuditEntry,
        GrantEntry,
        GrantRevokedEntry,
    )
}


_FIELD_NAMES: dict[type[Entry], tuple[str, ...]] = {
    cls: tuple(f.name for f in fields(cls)) for cls in ENTRY_KINDS.values()
}

E = TypeVar("E", bound=Entry)
_new = object.__new__
_set = object.__setattr__


def relinked(entry: E, parent: str) -> E:
    """``entry`` with its ``parent`` set: ``dataclasses.replace`` at half the cost.

    Every append links its entries onto the leaf, so this runs a few times a
    turn; entries have no ``__post_init__`` and no ``init=False`` field that
    ``replace`` would have to honour.
    """
    copy = _new(type(entry))
    for name in _FIELD_NAMES.get(type(entry)) or tuple(f.name for f in fields(entry)):
        _set(copy, name, getattr(entry, name))
    _set(copy, "parent", parent)
    return copy


@dataclass(frozen=True, slots=True, kw_only=True)
class ParentRef:
    """A fork's origin: the session it grew from and the entry its path ends at."""

    session: str
    entry: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Lineage:
    """A delegated child's origin: the parent session, the delegating call, entry and turn.

    ``parent_call_id`` names the tool call of a synchronous delegation (empty
    for an asynchronous one); ``parent_entry`` the parent's ``accepted`` pool
    receipt; ``parent_run`` the run id of the parent's turn that delegated.
    """

    parent_session: str
    parent_call_id: str = ""
    parent_entry: str = ""
    parent_run: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Header:
    """A session's first line: identity, creation time, fork origin, metadata.

    Immutable once stored; title and metadata edits are info entries.
    """

    id: str
    created: datetime = field(default_factory=utcnow)
    weft: int = FORMAT_VERSION
    parent: ParentRef | None = None
    lineage: Lineage | None = None
    meta: Mapping[str, str] = field(default_factory=dict)
