"""The wire format: golden lines pin every kind; every kind round-trips (hypothesis).

The golden files under ``golden/`` are the committed bytes this build writes
and must keep reading: one file per kind (and the header), one line each.
Regenerate them only for a deliberate format change, with
``python -m tests.threads.store.test_format``.
"""

from __future__ import annotations

import string
import sys
from dataclasses import fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from threads.errors import NewerFormatError
from threads.messages import (
    FilePart,
    Message,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    Usage,
    WireError,
)
from threads.store.codec import decode_entry, decode_header, encode_entry, encode_header
from threads.store.entries import (
    ENTRY_KINDS,
    ApprovalAuditEntry,
    ApprovalDecisionEntry,
    ApprovalRequestEntry,
    BranchSummaryEntry,
    CompactionEntry,
    CustomEntry,
    CustomMessageEntry,
    Entry,
    GrantEntry,
    GrantRevokedEntry,
    Header,
    InfoEntry,
    LabelEntry,
    LeafEntry,
    Lineage,
    MessageEntry,
    OutboundEntry,
    ParentRef,
    PoolReceiptEntry,
    ReceiptEntry,
    TurnEntry,
)
from threads.store.lines import decode_session, encode_batch

GOLDEN = Path(__file__).parent / "golden"
T = datetime(2025, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
CALL = ToolCallPart(id="call_1", name="read_file", args={"path": "README.md"})


def golden_entries() -> dict[str, Entry]:
    """One entry per kind, every field set away from its default where it has one."""
    usage = Usage(input_tokens=120, output_tokens=30, cached_tokens=100)
    message = Message(
        role="assistant",
        content=(
            ReasoningPart(text="look first", signature="sig"),
            TextPart(text="Reading it."),
            CALL,
            FilePart(url="file:///tmp/a.png", media_type="image/png", name="a.png"),
        ),
    )
    common: dict[str, Any] = {"created": T, "parent": "e_01JNA0000000000000000000P0"}
    return {
        "message": MessageEntry(
            id="e_01JNA0000000000000000000M1",
            message=message,
            run_id="s_1-t1",
            wake={"source": "telegram", "sink": {"chat": 1}},
            **common,
        ),
        "tool_result": MessageEntry(
            id="e_01JNA0000000000000000000M2",
            message=Message(
                role="tool",
                content=(
                    ToolResultPart(
                        call_id="call_1", name="read_file", content="# hi", is_error=True
                    ),
                ),
            ),
            **common,
        ),
        "turn": TurnEntry(
            id="e_01JNA0000000000000000000T1",
            run_id="s_1-t1",
            stop_reason="end_turn",
            usage=usage,
            steps=3,
            err="boom",
            pending=(CALL,),
            canceled=True,
            policy="queue",
            rerun="e_x",
            last_input=90,
            late_steps=1,
            **common,
        ),
        "compaction": CompactionEntry(
            id="e_01JNA0000000000000000000C1",
            first_kept="e_k",
            summary="they talked",
            tokens_before=5000,
            reason="threshold",
            summarizer_usage=usage,
            summarizer_model={"provider": "openai", "model": "gpt"},
            files_read=("a.py",),
            files_modified=("b.py",),
            pinned=("e_p",),
            range_hash="sha256:ab",
            trim={"kept": 3},
            **common,
        ),
        "branch_summary": BranchSummaryEntry(
            id="e_01JNA0000000000000000000B1", summary="left branch", from_entry="e_f", **common
        ),
        "leaf": LeafEntry(id="e_01JNA0000000000000000000L1", entry="e_t", **common),
        "label": LabelEntry(id="e_01JNA0000000000000000000L2", entry="e_t", name="good", **common),
        "info": InfoEntry(
            id="e_01JNA0000000000000000000I1", title="Trip", meta={"lang": "en"}, **common
        ),
        "custom": CustomEntry(
            id="e_01JNA0000000000000000000U1", kind="state", data={"n": [1, 2.5, None]}, **common
        ),
        "custom_message": CustomMessageEntry(
            id="e_01JNA0000000000000000000U2", kind="note", message=Message.user("fyi"), **common
        ),
        "receipt": ReceiptEntry(
            id="e_01JNA0000000000000000000R1",
            status="queued",
            receipt="e_r0",
            msg=Message.user("also this"),
            run_id="s_1-t2",
            turn="e_turn",
            unanswered=True,
            policy="steer",
            wake={"source": "cli"},
            **common,
        ),
        "pool_receipt": PoolReceiptEntry(
            id="e_01JNA0000000000000000000R2",
            status="done",
            receipt="e_r1",
            child="s_child",
            call="call_2",
            prompt="summarize",
            stop="end_turn",
            usage=usage,
            **common,
        ),
        "outbound": OutboundEntry(
            id="s_1-t1-s2-1",
            status="failed",
            record="s_1-t1-s1-1",
            run_id="s_1-t1",
            kind="dispatch:subagent",
            to={"kind": "wake", "target": "telegram:42:threads:find"},
            target="telegram:42:threads:find",
            wake={"source": "session", "caller": {"kind": "session", "session_key": "x"}},
            text="find it",
            meta={"child": "x"},
            expects_reply=False,
            delivered_to="session telegram:42:threads:find",
            error="LockedError: busy",
            **common,
        ),
        "approval_request": ApprovalRequestEntry(
            id="e_01JNA0000000000000000000A1",
            call_id="call_3",
            tool="shell",
            args_sha256="ab" * 32,
            run_id="s_1-t3",
            args={"cmd": "ls"},
            reason="shell needs approval",
            expiry=T,
            child="s_child",
            wrapper="call_2",
            **common,
        ),
        "approval_decision": ApprovalDecisionEntry(
            id="e_01JNA0000000000000000000A2",
            call_id="call_3",
            outcome="approve",
            reason="fine",
            content="ok",
            who="admin",
            via="user",
            run_id="s_1-t3",
            nonce="n1",
            key_id="k1",
            request_id="e_01JNA0000000000000000000A1",
            always=True,
            **common,
        ),
        "approval_audit": ApprovalAuditEntry(
            id="e_01JNA0000000000000000000A3",
            step="park",
            call_id="call_3",
            outcome="parked",
            detail="waiting",
            run_id="s_1-t3",
            grant_id="e_g",
            grant_shared=True,
            key_id="k1",
            decisions=("e_d1",),
            **common,
        ),
        "grant": GrantEntry(
            id="e_01JNA0000000000000000000G1",
            tool="shell",
            args=({"pointer": "/cmd", "prefix": "go test"},),
            deny=True,
            reason="tests only",
            expiry=T,
            max_uses=5,
            **common,
        ),
        "grant_revoked": GrantRevokedEntry(
            id="e_01JNA0000000000000000000G2", grant_id="e_01JNA0000000000000000000G1", **common
        ),
        "root_message": MessageEntry(
            id="e_01JNA0000000000000000000M0", created=T, message=Message.user("hello")
        ),
    }


def golden_header() -> Header:
    return Header(
        id="s_01JNA0000000000000000000S1",
        created=T,
        parent=ParentRef(session="s_origin", entry="e_cut"),
        lineage=Lineage(parent_session="s_parent", parent_call_id="call_9"),
        meta={"key": "telegram:42", "weft.public_id": "pub"},
    )


def write_goldens() -> None:
    GOLDEN.mkdir(exist_ok=True)
    (GOLDEN / "header.jsonl").write_bytes(encode_header(golden_header()))
    batch = [golden_entries()[name] for name in ("leaf", "label", "info")]
    (GOLDEN / "batch.jsonl").write_bytes(encode_batch(batch))
    for name, entry in golden_entries().items():
        (GOLDEN / f"{name}.jsonl").write_bytes(encode_entry(entry))


def test_every_kind_has_a_golden_line() -> None:
    kinds = {type(e).TYPE for e in golden_entries().values()}
    assert kinds == set(ENTRY_KINDS)


@pytest.mark.parametrize("name", sorted(golden_entries()))
def test_each_kind_writes_and_reads_its_golden_line(name: str) -> None:
    golden = (GOLDEN / f"{name}.jsonl").read_bytes()
    entry = golden_entries()[name]
    assert golden.count(b"\n") == 1
    assert encode_entry(entry) == golden
    assert decode_entry(golden) == entry


def test_the_header_writes_and_reads_its_golden_line() -> None:
    golden = (GOLDEN / "header.jsonl").read_bytes()
    assert encode_header(golden_header()) == golden
    assert decode_header(golden) == golden_header()
    assert orjson.loads(golden)["type"] == "session"
    assert orjson.loads(golden)["weft"] == 1


@pytest.mark.parametrize(
    ("name", "version"),
    [
        ("receipt", 3),
        ("pool_receipt", 4),
        ("approval_request", 2),
        ("grant_revoked", 2),
        ("compaction", 5),
        ("outbound", 6),
        ("message", None),
        ("turn", None),
    ],
)
def test_kinds_after_format_one_carry_their_reader_version(name: str, version: int | None) -> None:
    assert orjson.loads((GOLDEN / f"{name}.jsonl").read_bytes()).get("v") == version


def test_a_root_entry_has_no_parent_key_and_times_are_utc_rfc3339() -> None:
    line = orjson.loads((GOLDEN / "root_message.jsonl").read_bytes())
    assert "parent" not in line
    assert line["created"] == "2025-03-01T12:00:00.123456Z"


@settings(max_examples=300)
@given(st.datetimes(timezones=st.just(UTC)))
def test_a_utc_time_is_written_as_rfc3339_with_z_whole_seconds_without_a_fraction(
    created: datetime,
) -> None:
    entry = MessageEntry(id="e_1", created=created, message=Message.user("x"))
    written = orjson.loads(encode_entry(entry))["created"]
    assert written == created.isoformat().replace("+00:00", "Z")
    assert decode_entry(encode_entry(entry)).created == created


def test_a_whole_golden_session_decodes_in_order() -> None:
    data = (GOLDEN / "header.jsonl").read_bytes() + b"".join(
        (GOLDEN / f"{name}.jsonl").read_bytes() for name in sorted(golden_entries())
    )
    loaded = decode_session("s_01JNA0000000000000000000S1", data)
    assert loaded.report is None
    assert loaded.entries == [golden_entries()[name] for name in sorted(golden_entries())]


def test_decoded_messages_share_one_string_per_role() -> None:
    # A live session decodes its history's messages: a role is not a string of its own each.
    answer = Message(
        role="tool", content=(ToolResultPart(call_id="call_1", name="read_file", content="x"),)
    )
    messages = (
        Message.user("a"),
        Message.user("b"),
        answer,
        Message(role="tool", content=answer.content),
    )
    roles = []
    for n, message in enumerate(messages):
        entry = decode_entry(encode_entry(MessageEntry(id=f"e_{n}", created=T, message=message)))
        assert isinstance(entry, MessageEntry)
        roles.append(entry.message.role)
    assert roles == ["user", "user", "tool", "tool"]
    assert roles[0] is roles[1]
    assert roles[2] is roles[3]


def test_a_newer_version_of_a_known_kind_fails_loudly() -> None:
    line = orjson.loads((GOLDEN / "receipt.jsonl").read_bytes())
    with pytest.raises(NewerFormatError, match="v=5"):
        decode_entry(orjson.dumps({**line, "v": 5}))
    with pytest.raises(NewerFormatError, match="hologram"):
        decode_entry(orjson.dumps({**line, "type": "hologram"}))


def test_a_missing_required_field_names_the_kind_entry_and_field() -> None:
    line = orjson.loads((GOLDEN / "leaf.jsonl").read_bytes())
    del line["entry"]
    with pytest.raises(WireError, match="leaf entry e_01JNA0000000000000000000L1: 'entry'"):
        decode_entry(orjson.dumps(line))


# -- hypothesis: every kind round-trips

TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=20)
IDS = st.text(alphabet=string.ascii_letters + string.digits + "_-", min_size=1, max_size=30)
INTS = st.integers(min_value=-(2**53), max_value=2**53)
TIMES = st.datetimes(
    min_value=datetime(1970, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | INTS | st.floats(allow_nan=False, allow_infinity=False) | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)
JSON_OBJECTS = st.dictionaries(TEXT, JSON_VALUES, max_size=3)
PARTS = st.one_of(
    st.builds(TextPart, text=TEXT),
    st.builds(ToolCallPart, id=IDS, name=TEXT, args=JSON_OBJECTS),
    st.builds(ToolResultPart, call_id=IDS, name=TEXT, content=TEXT, is_error=st.booleans()),
    st.builds(ReasoningPart, text=TEXT, signature=TEXT),
    st.builds(FilePart, url=TEXT, media_type=TEXT, name=TEXT),
)
MESSAGES = st.builds(
    Message,
    role=st.sampled_from(["user", "assistant", "tool"]),
    content=st.lists(PARTS, max_size=4).map(tuple),
)
USAGES = st.builds(
    Usage,
    input_tokens=st.integers(0, 2**40),
    output_tokens=st.integers(0, 2**40),
    cached_tokens=st.integers(0, 2**40),
)
BY_TYPE: dict[str, st.SearchStrategy[Any]] = {
    "str": TEXT,
    "int": INTS,
    "bool": st.booleans(),
    "datetime": TIMES,
    "datetime | None": st.none() | TIMES,
    "tuple[str, ...]": st.lists(TEXT, max_size=3).map(tuple),
    "Mapping[str, str]": st.dictionaries(TEXT, TEXT, max_size=3),
    "Mapping[str, JSON]": JSON_OBJECTS,
    "JSON": JSON_VALUES,
    "Message": MESSAGES,
    "Message | None": st.none() | MESSAGES,
    "Usage": USAGES,
    "tuple[ToolCallPart, ...]": st.lists(
        st.builds(ToolCallPart, id=IDS, name=TEXT, args=JSON_OBJECTS), max_size=2
    ).map(tuple),
    "tuple[Mapping[str, JSON], ...]": st.lists(JSON_OBJECTS, max_size=2).map(tuple),
}


def kind_strategy(cls: type[Entry]) -> st.SearchStrategy[Entry]:
    kwargs = {f.name: BY_TYPE[str(f.type)] for f in fields(cls)}
    kwargs["id"] = IDS
    kwargs["parent"] = st.just("") | IDS
    if cls is MessageEntry:
        # A prompt naming its receipt reads whole only beside that receipt: see
        # test_prompt_receipts.py; a lone line round-trips without one.
        kwargs["receipt"] = st.just("")
    return st.builds(cls, **kwargs)


ANY_ENTRY = st.one_of(*(kind_strategy(cls) for cls in ENTRY_KINDS.values()))


@settings(max_examples=300, deadline=None)
@given(ANY_ENTRY)
def test_every_kind_round_trips_through_its_line(entry: Entry) -> None:
    line = encode_entry(entry)
    assert line.count(b"\n") == 1
    assert decode_entry(line) == entry


@settings(max_examples=60, deadline=None)
@given(st.lists(ANY_ENTRY, min_size=1, max_size=5))
def test_a_batch_round_trips_through_a_session(entries: list[Entry]) -> None:
    data = encode_header(Header(id="s_h", created=T)) + encode_batch(entries)
    loaded = decode_session("s_h", data)
    assert loaded.entries == entries
    assert loaded.report is None


if __name__ == "__main__":
    write_goldens()
    sys.stdout.write(f"wrote {len(golden_entries()) + 1} golden lines to {GOLDEN}\n")


def test_a_batch_of_several_entries_is_framed_by_more_on_all_but_its_last_line() -> None:
    entries = [golden_entries()[name] for name in ("leaf", "label", "info")]
    golden = (GOLDEN / "batch.jsonl").read_bytes()
    assert encode_batch(entries) == golden
    assert [orjson.loads(line).get("more") for line in golden.splitlines()] == [2, 1, None]
    data = (GOLDEN / "header.jsonl").read_bytes() + golden
    assert decode_session("s_01JNA0000000000000000000S1", data).entries == entries


def test_ids_are_prefixed_sortable_crockford_ulids() -> None:
    import re
    import time

    from threads.ids import new_entry_id, new_session_id, valid_id

    crockford = re.compile(r"[0-9ABCDEFGHJKMNPQRSTVWXYZ]{26}")
    first = new_session_id()
    second = new_session_id()
    deadline = time.monotonic() + 1
    while second[2:12] == first[2:12]:  # ids order by their millisecond: mint into the next
        assert time.monotonic() < deadline
        second = new_session_id()
    assert first.startswith("s_")
    assert crockford.fullmatch(first[2:])
    assert first < second
    entry_id = new_entry_id()
    assert entry_id.startswith("e_")
    assert crockford.fullmatch(entry_id[2:])
    for good in ("x", "s_01", "a-b_C9", "a" * 128):
        assert valid_id(good)
    for bad in ("", "../x", "a/b", "x.jsonl", ".", "a" * 129, "a b", "ü"):
        assert not valid_id(bad)
