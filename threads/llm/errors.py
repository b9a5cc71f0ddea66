"""Errors of the model clients.

    ModelError (ThreadsError)
    ├── ContextOverflowError   the request does not fit the model's window
    ├── ModelHTTPError         the provider answered with an error status
    │   └── RateLimitError     429 after every retry
    ├── ModelConnectionError   the provider could not be reached
    └── ModelResponseError     an answer that does not parse
"""

from __future__ import annotations

from threads.errors import ThreadsError


class ModelError(ThreadsError):
    """A model call failed."""


class ContextOverflowError(ModelError):
    """The request is larger than the model's context window; compaction can help."""


class ModelHTTPError(ModelError):
    """The provider answered with an error status."""

    def __init__(self, provider: str, status: int, body: str) -> None:
        self.provider = provider
        self.status = status
        self.body = body
        shown = body if len(body) <= 300 else body[:297] + "..."
        super().__init__(f"{provider} answered HTTP {status}: {shown}")


class RateLimitError(ModelHTTPError):
    """429 Too Many Requests, still after every retry."""


class ModelConnectionError(ModelError):
    """The provider could not be reached."""


class ModelResponseError(ModelError):
    """The provider's answer could not be understood."""
