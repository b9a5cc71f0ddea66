"""The web chat's frames: what a page sends, read and checked here, and how frames go out.

    {"type": "message", "id": "m-…", "text": "…",
     "files": [{"name": "plan.pdf", "type": "application/pdf", "data": "<base64>"}],
     "resend": false}

``id`` is chosen by the page, one per message, and kept when the page sends
the message again after a reconnect (``resend``), so the gateway can tell a
resend from a new message (docs/decisions/web-05). A bare ``{"text": "…"}``
(no id) is still taken, without acknowledgement, as the first version of the
page sent it. A press of an approval's button is ``{"press": "<its data>"}``
and arrives as the command it stands for (:mod:`channels.approvals`). Every
refusal is one plain line naming what was wrong.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from channels.approvals import press_command
from channels.errors import InboundError

MAX_TEXT = 32_000
MAX_FILES = 10
_MESSAGE_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_MEDIA_TYPE = re.compile(r"[a-z0-9][a-z0-9!#$&^_.+-]{0,63}/[a-z0-9][a-z0-9!#$&^_.+-]{0,63}")
_UNSAFE_NAME = re.compile(r"[\x00-\x1f\x7f/\\]")


@dataclass(frozen=True, slots=True, kw_only=True)
class Upload:
    """A file sent with a message: its name, media type and bytes."""

    name: str
    media_type: str
    data: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class Incoming:
    """One message from the page; ``id`` is empty for a frame that named none."""

    id: str
    text: str
    files: tuple[Upload, ...] = ()
    resend: bool = False
    press: str = ""


class FrameError(InboundError):
    """A frame the gateway cannot take; ``message_id`` names its message when it gave one."""

    def __init__(self, message: str, message_id: str = "") -> None:
        super().__init__(message)
        self.message_id = message_id


def read_frame(data: str, *, max_file_bytes: int) -> Incoming:
    """The message in one text frame; raises :class:`FrameError` with the line to show.

    ``max_file_bytes`` is what one message's files may weigh together (0: no files).
    """
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise FrameError('a web chat message must be JSON like {"text": "hi"}') from None
    if not isinstance(obj, dict):
        raise FrameError('a web chat message must be JSON like {"text": "hi"}')
    press = obj.get("press")
    if isinstance(press, str):
        command = press_command(press)
        if command is None:
            raise FrameError("that button does nothing any more")
        return Incoming(id="", text=command, press=press)
    message_id = obj.get("id", "")
    if not isinstance(message_id, str) or (message_id and not _MESSAGE_ID.fullmatch(message_id)):
        raise FrameError("the message id must be 1 to 64 letters, digits, '-' or '_'")
    text = obj.get("text", "")
    if not isinstance(text, str):
        raise FrameError("the message's 'text' must be a string", message_id)
    files = _uploads(obj.get("files"), max_file_bytes, message_id)
    if not text.strip() and not files:
        raise FrameError("the message has no 'text'", message_id)
    if len(text) > MAX_TEXT:
        raise FrameError(
            f"the message is {len(text)} characters; the limit is {MAX_TEXT}", message_id
        )
    return Incoming(id=message_id, text=text, files=files, resend=obj.get("resend") is True)


def _uploads(given: Any, cap: int, message_id: str) -> tuple[Upload, ...]:
    if given is None or given == []:
        return ()
    if cap <= 0:
        raise FrameError("this web chat takes no files", message_id)
    if not isinstance(given, list) or len(given) > MAX_FILES:
        raise FrameError(f"'files' must be a list of at most {MAX_FILES} files", message_id)
    uploads: list[Upload] = []
    total = 0
    for index, item in enumerate(given):
        if not isinstance(item, dict) or not isinstance(item.get("data"), str):
            raise FrameError(f"file {index + 1} has no base64 'data'", message_id)
        name = _name(item.get("name"), index)
        try:
            data = base64.b64decode(item["data"], validate=True)
        except (binascii.Error, ValueError):
            raise FrameError(f"{name}: its 'data' is not base64", message_id) from None
        total += len(data)
        if total > cap:
            raise FrameError(
                f"{name} is too large: a message may carry {_mib(cap)} of files", message_id
            )
        media_type = item.get("type")
        if not isinstance(media_type, str) or not _MEDIA_TYPE.fullmatch(media_type.lower()):
            media_type = "application/octet-stream"
        uploads.append(Upload(name=name, media_type=media_type.lower(), data=data))
    return tuple(uploads)


def _name(given: Any, index: int) -> str:
    """A file name fit to show and store: no path, no control characters, at most 200."""
    name = _UNSAFE_NAME.sub("_", given.strip()) if isinstance(given, str) else ""
    return name[:200] or f"file {index + 1}"


def _mib(count: int) -> str:
    return f"{count / 2**20:.3g} MiB"


async def send_frame(ws: web.WebSocketResponse, frame: Mapping[str, Any]) -> None:
    """Send one frame to a tab as JSON text (orjson: UTF-8 as is, no ``\\u`` escapes).

    Every frame a tab gets goes through here: aiohttp's ``send_json`` encodes
    with the stdlib's ``json``, several times slower on every reply.
    """
    await ws.send_str(orjson.dumps(frame).decode())
