"""Files people send in the web chat, kept on disk per chat and named by reference.

A file is written once under ``<data_dir>/media/web/<chat>/`` (0600, named by
its content hash, synced before the message that carries it is accepted) and
recorded in the transcript as a :class:`~threads.messages.FilePart` with a
``web://web/<chat>/<file>`` URL: the transcript holds the reference, never the
bytes. :meth:`ChatFiles.serve_to` registers :meth:`ChatFiles.fetch` with
:class:`~threads.media.Media`, so a model that accepts images sees the
picture — once there is a file to see: until then the model's messages are
not searched for pictures on every call. The page shows a file from
``/files/<file>``, which answers only the chat that sent it
(docs/decisions/web-07).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import mimetypes
import os
import re
from pathlib import Path

from channels.web.frames import Upload
from threads.media import Media
from threads.messages import FilePart
from threads.store.private import make_private_dir, read_private, write_private

ORIGIN = "web://web"
#: Pictures the page may show in its own origin; anything else is only downloaded.
SHOWN = {".png": "image/png", ".jpg": "image/jpeg", ".gif": "image/gif", ".webp": "image/webp"}
_FILE = re.compile(r"[0-9a-f]{32}\.[a-z0-9]{1,10}")
_CHAT = re.compile(r"[A-Za-z0-9_-]{1,64}")


class ChatFiles:
    """Each chat's files by content hash, under ``directory/<chat>``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._media: Media | None = None
        self._served = False

    def serve_to(self, media: Media) -> None:
        """Let models see these files through ``media``: now if any is kept, else from the first."""
        self._media = media
        with contextlib.suppress(OSError), os.scandir(self.directory) as entries:
            if next(entries, None) is not None:
                self._serve()

    def _serve(self) -> None:
        if self._media is not None and not self._served:
            self._media.register(ORIGIN, self.fetch)
            self._served = True

    async def keep(self, chat: str, upload: Upload) -> FilePart:
        """Store ``upload`` durably (once per content) and return the file part naming it."""
        extension = _extension(upload.media_type)
        file = hashlib.sha256(upload.data).hexdigest()[:32] + extension
        await asyncio.to_thread(self._write, chat, file, upload.data)
        self._serve()
        return FilePart(
            url=f"{ORIGIN}/{chat}/{file}",
            media_type=upload.media_type,
            name=upload.name,
            size=len(upload.data),
        )

    def _write(self, chat: str, file: str, data: bytes) -> None:
        folder = self.directory / chat
        make_private_dir(folder)
        path = folder / file
        if not path.exists():
            write_private(path, data, sync=True)

    async def fetch(self, url: str) -> bytes:
        """The bytes of a file this store named (raises ``ValueError`` for any other URL)."""
        chat, _, file = url.removeprefix(f"{ORIGIN}/").partition("/")
        path = self.path(chat, file)
        if path is None or not url.startswith(f"{ORIGIN}/"):
            raise ValueError(f"{url!r} is not a file of the web chat")
        return await asyncio.to_thread(read_private, os.fspath(path))

    def path(self, chat: str, file: str) -> Path | None:
        """Where ``chat``'s ``file`` lives; None for a name this store never makes."""
        if not _CHAT.fullmatch(chat) or not _FILE.fullmatch(file):
            return None
        return self.directory / chat / file

    async def read(self, chat: str, file: str) -> bytes | None:
        """``chat``'s ``file``, or None when it has no such file."""
        path = self.path(chat, file)
        if path is None:
            return None
        try:
            return await asyncio.to_thread(read_private, os.fspath(path))
        except FileNotFoundError:
            return None


def page_url(part: FilePart) -> str:
    """Where the chat's page finds a file it sent (empty for a file of elsewhere)."""
    if not part.url.startswith(f"{ORIGIN}/"):
        return ""
    return "/files/" + part.url.rsplit("/", 1)[1]


def served_type(file: str) -> str:
    """The type a file is served as: a picture as itself, anything else as plain bytes."""
    return SHOWN.get(os.path.splitext(file)[1], "application/octet-stream")


def _extension(media_type: str) -> str:
    for extension, shown in SHOWN.items():
        if shown == media_type:
            return extension
    guessed = mimetypes.guess_extension(media_type) or ".bin"
    return guessed if _FILE.fullmatch("0" * 32 + guessed) else ".bin"
