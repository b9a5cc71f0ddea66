"""The API's refusals, each an HTTP status and an error in OpenAI's shape.

    ChannelError
    └── ApiError      a request the API refuses, or a turn that did not answer

Every refusal reaches the client as ``{"error": {"message", "type", "param",
"code"}}`` with its status, as OpenAI's API answers, so any OpenAI client
raises its usual exception. ``retry`` sets ``x-should-retry``, which the
official SDKs obey: ``False`` where sending the same request again cannot help
(a stopped turn, a spent budget) and would only add it to the session again.
"""

from __future__ import annotations

from typing import Any

from channels.errors import ChannelError


class ApiError(ChannelError):
    """A refusal: ``status``, OpenAI's error ``type``, the ``param`` at fault and a ``code``."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
        retry: bool | None = None,
    ) -> None:
        self.status = status
        self.message = message
        self.type = type
        self.code = code
        self.param = param
        self.retry = retry
        super().__init__(message)

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }

    def headers(self) -> dict[str, str]:
        if self.retry is None:
            return {}
        return {"x-should-retry": "true" if self.retry else "false"}


def bad_request(message: str, *, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, param=param, code=code)
