"""The parameters of one Bot API call, decoded the way Telegram's server reads them.

A call may come as a query string, a url-encoded form, a JSON body or
multipart form data (what python-telegram-bot sends when a file is
uploaded). In the forms every value is a string: numbers and booleans as
text, nested objects (``reply_parameters``, ``reply_markup``, ``commands``)
as JSON strings. A JSON body carries the same values typed. ``Params``
accepts both, so a method reads ``params.integer("chat_id")`` either way.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from channels.testing.errors import bad_request


@dataclass(frozen=True, slots=True, kw_only=True)
class UploadedFile:
    """A file part of a multipart call."""

    data: bytes
    filename: str | None
    content_type: str | None


class Params:
    """Typed access to a call's parameters; a missing or malformed one is a 400 answer."""

    def __init__(self, values: Mapping[str, Any], files: Mapping[str, UploadedFile]) -> None:
        self.values = dict(values)
        self.files = dict(files)

    @classmethod
    async def read(cls, request: web.Request) -> Params:
        values: dict[str, Any] = dict(request.query)
        files: dict[str, UploadedFile] = {}
        if request.content_type == "application/json":
            try:
                body = await request.json()
            except ValueError as exc:
                raise bad_request("can't parse JSON encoded request parameters") from exc
            if not isinstance(body, dict):
                raise bad_request("JSON encoded request parameters must be an object")
            values.update(body)
        elif request.content_type in ("application/x-www-form-urlencoded", "multipart/form-data"):
            form = await request.post()
            for name, value in form.items():
                if isinstance(value, web.FileField):
                    files[name] = UploadedFile(
                        data=value.file.read(),
                        filename=value.filename,
                        content_type=value.content_type,
                    )
                else:
                    values[name] = value
        return cls(values, files)

    def has(self, name: str) -> bool:
        return self.values.get(name) not in (None, "")

    def string(self, name: str, *, required: bool = False) -> str | None:
        value = self.values.get(name)
        if value is None or value == "":
            if required:
                raise bad_request(f'parameter "{name}" is required')
            return None
        return value if isinstance(value, str) else json.dumps(value)

    def integer(self, name: str, *, required: bool = False) -> int | None:
        value = self.values.get(name)
        if value is None or value == "":
            if required:
                raise bad_request(f'parameter "{name}" is required')
            return None
        if isinstance(value, bool):
            return int(value)
        try:
            return int(value)
        except (TypeError, ValueError):
            raise bad_request(f'parameter "{name}" must be a number') from None

    def number(self, name: str, default: float) -> float:
        value = self.values.get(name)
        if value is None or value == "":
            return default
        try:
            return float(value)
        except (TypeError, ValueError):
            raise bad_request(f'parameter "{name}" must be a number') from None

    def flag(self, name: str) -> bool:
        value = self.values.get(name)
        if isinstance(value, str):
            return value.lower() in ("true", "1")
        return bool(value)

    def nested(self, name: str) -> Any:
        """A nested object: given typed in a JSON body, or as a JSON string in a form."""
        value = self.values.get(name)
        if not isinstance(value, str):
            return value
        if value == "":
            return None
        try:
            return json.loads(value)
        except ValueError:
            raise bad_request(f"can't parse {name} JSON object") from None

    def file(self, name: str) -> UploadedFile | str | None:
        """An uploaded file part, or the ``file_id`` / URL given instead of one."""
        if name in self.files:
            return self.files[name]
        value = self.string(name)
        if value is not None and value.startswith("attach://"):
            attached = self.files.get(value.removeprefix("attach://"))
            if attached is None:
                raise bad_request(f"file {value} not found in the request")
            return attached
        return value

    def logged(self) -> dict[str, Any]:
        """What the call record keeps: every value as sent, file parts by name and size."""
        kept = dict(self.values)
        for name, upload in self.files.items():
            kept[name] = f"<file {upload.filename or name}: {len(upload.data)} bytes>"
        return kept
