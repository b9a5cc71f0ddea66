"""Images tools return, kept on disk and named by reference in the transcript.

A tool's image (an MCP server's screenshot, a chart) is written once under
``data_dir/media/tools`` (0600, named by its content hash) and recorded as a
:class:`~threads.messages.FilePart` with a ``tool-media://local/<file>`` URL:
the transcript holds the reference, never the bytes. The gateway registers
:meth:`ImageStore.fetch` with :class:`~threads.media.Media`, which turns the
reference into a ``data:`` URL for a model that accepts images.
"""

from __future__ import annotations

import asyncio
import hashlib
import mimetypes
import os
from pathlib import Path

from threads.messages import FilePart
from threads.store.private import make_private_dir, read_private, write_private

ORIGIN = "tool-media://local"


class ImageStore:
    """Images by content hash in ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    async def keep(self, data: bytes, media_type: str, *, name: str) -> FilePart:
        """Store ``data`` (once per content) and return the file part naming it."""
        extension = mimetypes.guess_extension(media_type) or ".bin"
        file = hashlib.sha256(data).hexdigest()[:32] + extension
        await asyncio.to_thread(self._write, file, data)
        return FilePart(url=f"{ORIGIN}/{file}", media_type=media_type, name=name, size=len(data))

    def _write(self, file: str, data: bytes) -> None:
        make_private_dir(self.directory)
        path = self.directory / file
        if not path.exists():
            write_private(path, data)

    async def fetch(self, url: str) -> bytes:
        """The bytes of an image this store named (raises for any other URL)."""
        file = url.removeprefix(f"{ORIGIN}/")
        if file == url or "/" in file or file.startswith(".") or not file:
            raise ValueError(f"{url!r} is not an image this gateway kept")
        return await asyncio.to_thread(read_private, os.fspath(self.directory / file))
