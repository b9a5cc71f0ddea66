"""Files users sent are fetched from their platform only when a model is to see them."""

from __future__ import annotations

import base64
import zlib

import pytest

from threads.context import ContextBuilder
from threads.media import Media
from threads.message_list import BLOCK
from threads.messages import FilePart, Message, TextPart

PHOTO = FilePart(url="fake://chan/photo-1", media_type="image/jpeg", name="photo.jpg", size=3)


def with_file(part: FilePart) -> Message:
    return Message(role="user", content=(TextPart(text="look"), part))


async def test_an_image_of_a_registered_scheme_becomes_a_data_url_fetched_once() -> None:
    fetched: list[str] = []

    async def fetch(url: str) -> bytes:
        fetched.append(url)
        return b"jpg"

    media = Media()
    media.register("fake://chan", fetch)
    history = [Message.user("hi"), with_file(PHOTO)]
    for _ in range(2):
        prepared = await media.prepare(history)
        (_, part) = prepared[1].content
        assert isinstance(part, FilePart)
        assert part.url == "data:image/jpeg;base64," + base64.b64encode(b"jpg").decode()
    assert fetched == ["fake://chan/photo-1"]
    assert history[1].content[1] is PHOTO  # the transcript keeps the reference


async def test_files_over_the_cap_other_files_and_failed_fetches_stay_references() -> None:
    async def fetch(url: str) -> bytes:
        if url.endswith("broken"):
            raise OSError("gone")
        return b"x" * 10

    media = Media(max_bytes=5)
    media.register("fake://chan", fetch)
    history = [
        with_file(FilePart(url="fake://chan/big", media_type="image/png", size=0)),
        with_file(FilePart(url="fake://chan/doc", media_type="application/pdf", size=3)),
        with_file(FilePart(url="fake://chan/broken", media_type="image/png", size=3)),
        with_file(FilePart(url="fake://chan/huge", media_type="image/png", size=50)),
    ]
    assert await media.prepare(history) is history


async def test_a_long_run_context_shows_an_old_image_without_unpacking_its_texts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def fetch(url: str) -> bytes:
        return b"jpg"

    media = Media()
    media.register("fake://chan", fetch)
    builder = ContextBuilder()
    builder.add(Message.user("first"))
    builder.add(with_file(PHOTO))
    for turn in range(4 * BLOCK):
        builder.add(Message.assistant(f"answer {turn}"))
        builder.add(Message.user(f"question {turn}"))
    run = builder.run_context()
    run.append(Message.assistant("the run's own"))
    unpacked: list[bytes] = []
    decompress = zlib.decompress
    monkeypatch.setattr(zlib, "decompress", lambda data: unpacked.append(data) or decompress(data))

    prepared = await media.prepare(run)

    assert unpacked == []
    assert len(prepared) == len(run)
    (_, part) = prepared[1].content
    assert isinstance(part, FilePart)
    assert part.url.startswith("data:image/jpeg;base64,")
    assert prepared[0] is run[0]
    assert prepared[-1] is run[-1]
    assert prepared[-3:] == run[-3:]
    assert list(prepared)[2:] == list(run)[2:]
