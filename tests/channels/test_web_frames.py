"""What the page sends, read and checked: every refusal is one line naming what was wrong."""

from __future__ import annotations

import base64

import orjson
import pytest

from channels.web.frames import MAX_FILES, MAX_TEXT, FrameError, read_frame

CAP = 1000


def frame(**fields: object) -> str:
    return orjson.dumps({"type": "message", **fields}).decode()


def encoded(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_a_message_with_its_id_text_and_files_is_read() -> None:
    incoming = read_frame(
        frame(
            id="m-1",
            text="look\nat this",
            files=[{"name": "a.png", "type": "image/PNG", "data": encoded(b"\x89PNG")}],
            resend=True,
        ),
        max_file_bytes=CAP,
    )
    assert incoming.id == "m-1"
    assert incoming.text == "look\nat this"
    assert incoming.resend
    (upload,) = incoming.files
    assert (upload.name, upload.media_type, upload.data) == ("a.png", "image/png", b"\x89PNG")


def test_a_bare_text_frame_is_read_without_an_id() -> None:
    incoming = read_frame('{"text": "hi"}', max_file_bytes=CAP)
    assert (incoming.id, incoming.text, incoming.files, incoming.resend) == ("", "hi", (), False)


def test_files_alone_make_a_message() -> None:
    incoming = read_frame(
        frame(id="m-2", files=[{"name": "n.txt", "data": encoded(b"notes")}]), max_file_bytes=CAP
    )
    assert incoming.text == ""
    assert incoming.files[0].media_type == "application/octet-stream"


@pytest.mark.parametrize(
    ("data", "says", "message_id"),
    [
        ("not json", "must be JSON", ""),
        ("[1, 2]", "must be JSON", ""),
        (frame(id="has spaces", text="x"), "message id must be", ""),
        (frame(id="m-3", text=7), "'text' must be a string", "m-3"),
        (frame(id="m-4", text="  "), "has no 'text'", "m-4"),
        (frame(id="m-5", text="x" * (MAX_TEXT + 1)), f"the limit is {MAX_TEXT}", "m-5"),
        (frame(id="m-6", files="a.png"), "at most", "m-6"),
        (frame(id="m-7", files=[{"name": "a"}] * (MAX_FILES + 1)), "at most", "m-7"),
        (frame(id="m-8", files=[{"name": "a.png"}]), "file 1 has no base64 'data'", "m-8"),
        (frame(id="m-9", files=[{"name": "a.png", "data": "@@@"}]), "a.png: its 'data'", "m-9"),
    ],
)
def test_a_frame_that_cannot_be_taken_says_why_in_one_line(
    data: str, says: str, message_id: str
) -> None:
    with pytest.raises(FrameError) as caught:
        read_frame(data, max_file_bytes=CAP)
    assert says in str(caught.value)
    assert "\n" not in str(caught.value)
    assert caught.value.message_id == message_id


def test_files_over_the_cap_together_are_refused_naming_the_file_and_the_cap() -> None:
    files = [
        {"name": "one.bin", "data": encoded(b"a" * 600)},
        {"name": "two.bin", "data": encoded(b"b" * 600)},
    ]
    with pytest.raises(FrameError, match=r"^two\.bin is too large: a message may carry .* MiB"):
        read_frame(frame(id="m-1", text="x", files=files), max_file_bytes=CAP)


def test_a_chat_without_files_refuses_them() -> None:
    files = [{"name": "a.txt", "data": encoded(b"a")}]
    with pytest.raises(FrameError, match="takes no files"):
        read_frame(frame(id="m-1", text="x", files=files), max_file_bytes=0)


def test_a_file_name_loses_its_path_and_control_characters() -> None:
    files = [
        {"name": "../../etc/passwd\x00", "data": encoded(b"x")},
        {"name": "", "data": encoded(b"y")},
    ]
    incoming = read_frame(frame(id="m-1", files=files), max_file_bytes=CAP)
    assert [u.name for u in incoming.files] == [".._.._etc_passwd_", "file 2"]
