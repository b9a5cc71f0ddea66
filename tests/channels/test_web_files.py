"""The web chat's files: kept per chat by content, named by reference, offered to models."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from channels.web.files import ChatFiles, page_url, served_type
from channels.web.frames import Upload
from threads.media import Media
from threads.messages import FilePart, Message, TextPart

PICTURE = Upload(name="cat.png", media_type="image/png", data=b"\x89PNG not really")


async def test_a_file_is_kept_once_per_content_private_and_named_by_reference(
    tmp_path: Path,
) -> None:
    files = ChatFiles(tmp_path / "web")
    part = await files.keep("c1", PICTURE)
    again = await files.keep("c1", PICTURE)
    assert part == again
    assert part.url.startswith("web://web/c1/")
    assert part.url.endswith(".png")
    assert (part.name, part.media_type, part.size) == ("cat.png", "image/png", len(PICTURE.data))
    (kept,) = (tmp_path / "web" / "c1").iterdir()
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert stat.S_IMODE(kept.parent.stat().st_mode) == 0o700
    assert await files.fetch(part.url) == PICTURE.data
    assert page_url(part) == f"/files/{kept.name}"
    assert served_type(kept.name) == "image/png"


async def test_a_chat_reads_only_its_own_files_and_no_path_escapes(tmp_path: Path) -> None:
    files = ChatFiles(tmp_path / "web")
    name = (await files.keep("c1", PICTURE)).url.rsplit("/", 1)[1]
    assert await files.read("c1", name) == PICTURE.data
    assert await files.read("c2", name) is None
    for chat, file in [("..", name), ("c1", "../c1/" + name), ("c1", name.upper()), ("", name)]:
        assert await files.read(chat, file) is None
    for url in ("web://web/c1/../x", f"web://web/..%2f/{name}", f"tool-media://local/{name}"):
        with pytest.raises(ValueError, match="is not a file of the web chat"):
            await files.fetch(url)


async def test_anything_but_a_picture_is_served_as_bytes(tmp_path: Path) -> None:
    files = ChatFiles(tmp_path / "web")
    page = await files.keep("c1", Upload(name="x.html", media_type="text/html", data=b"<script>"))
    svg = await files.keep("c1", Upload(name="x.svg", media_type="image/svg+xml", data=b"<svg/>"))
    for part in (page, svg):
        assert served_type(part.url.rsplit("/", 1)[1]) == "application/octet-stream"


async def test_models_see_the_chats_pictures_once_there_is_one(tmp_path: Path) -> None:
    media = Media()
    files = ChatFiles(tmp_path / "web")
    files.serve_to(media)
    assert not media.fetchable(FilePart(url="web://web/c1/x.png", media_type="image/png"))
    part = await files.keep("c1", PICTURE)
    assert media.fetchable(part)
    message = Message(role="user", content=(TextPart(text="look"), part))
    (prepared,) = await media.prepare([message])
    assert prepared.content[1].url.startswith("data:image/png;base64,")  # type: ignore[union-attr]


def test_after_a_restart_kept_files_are_offered_at_once(tmp_path: Path) -> None:
    (tmp_path / "web" / "c1").mkdir(parents=True)
    media = Media()
    ChatFiles(tmp_path / "web").serve_to(media)
    assert media.fetchable(FilePart(url="web://web/c1/x.png", media_type="image/png"))
