"""Errors of the fake platform servers.

FakePlatformError
├── ApiError            a Bot API call the fake answers with an error (status, description)
└── FakeUsageError      a test asked the fake for something it does not have (ValueError)

Waiting helpers raise the builtin ``TimeoutError``, naming what they waited for
and what they saw instead.
"""

from __future__ import annotations

from typing import Any


class FakePlatformError(Exception):
    """Root of the fake servers' errors."""


class ApiError(FakePlatformError):
    """An error answer of the Bot API: ``{"ok": false, "error_code", "description", ...}``.

    Raised inside a method of the fake and turned into the HTTP answer;
    ``retry_after`` becomes ``parameters.retry_after`` as Telegram sends it.
    """

    def __init__(self, status: int, description: str, *, retry_after: int | None = None) -> None:
        self.status = status
        self.description = description
        self.retry_after = retry_after
        super().__init__(f"{status} {description}")

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "ok": False,
            "error_code": self.status,
            "description": self.description,
        }
        if self.retry_after is not None:
            body["parameters"] = {"retry_after": self.retry_after}
        return body


def bad_request(description: str) -> ApiError:
    """A 400 answer; Telegram prefixes the description with ``Bad Request: ``."""
    return ApiError(400, f"Bad Request: {description}")


class FakeUsageError(FakePlatformError, ValueError):
    """A test named a chat, message, topic or file the fake does not know."""
