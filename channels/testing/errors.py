"""Errors of the fake platform servers.

FakePlatformError
├── ApiError            a Bot API call the fake Telegram answers with an error (status, description)
├── DiscordApiError     a REST call the fake Discord answers with an error (status, code, message)
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


class DiscordApiError(FakePlatformError):
    """An error answer of Discord's REST API: ``{"message", "code"[, "errors"]}``.

    Raised inside a route of the fake Discord and turned into the HTTP answer,
    whose ``Content-Type`` is exactly ``application/json`` as discord.py
    requires before it reads the body.
    """

    def __init__(
        self, status: int, code: int, message: str, *, errors: dict[str, Any] | None = None
    ) -> None:
        self.status = status
        self.code = code
        self.message = message
        self.errors = errors
        super().__init__(f"{status} {message} (code {code})")

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"message": self.message, "code": self.code}
        if self.errors is not None:
            body["errors"] = self.errors
        return body


def invalid_form_body(field: str, code: str, message: str) -> DiscordApiError:
    """Discord's 400 for a field that fails validation (code 50035, ``errors`` naming the field)."""
    errors: dict[str, Any] = {"_errors": [{"code": code, "message": message}]}
    for part in reversed(field.split(".")):
        errors = {part: errors}
    return DiscordApiError(400, 50035, "Invalid Form Body", errors=errors)


class FakeUsageError(FakePlatformError, ValueError):
    """A test named a chat, channel, message, command or file the fake does not know."""
