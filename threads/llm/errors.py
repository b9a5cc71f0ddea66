"""Errors of the model clients.

    ModelError (ThreadsError)
    ├── ModelConfigError (ValueError)  a provider configured so it cannot be called
    ├── ContextOverflowError           the request does not fit the model's window
    ├── ModelHTTPError                 the provider answered with an error status
    │   └── RateLimitError             429 after every retry
    ├── ModelConnectionError           the provider could not be reached
    │   └── ModelTimeoutError (TimeoutError)  it did not answer in time
    └── ModelResponseError             an answer that does not parse

Messages name the provider (the name it has under ``[models.providers]``) and,
where known, the model. They never hold an API key: clients redact the key
from any provider text before it reaches an error.
"""

from __future__ import annotations

from threads.errors import ThreadsError


class ModelError(ThreadsError):
    """A model call failed."""


class ModelConfigError(ModelError, ValueError):
    """A provider whose configuration cannot work (e.g. an API key variable that is not set).

    ``setting`` is the dotted path of the option to change; ``detail`` says why.
    """

    def __init__(self, setting: str, detail: str) -> None:
        self.setting = setting
        self.detail = detail
        super().__init__(f"{setting} {detail}")


class ContextOverflowError(ModelError):
    """The request is larger than the model's context window; compaction can help.

    Never retried: the same request would fail the same way.
    """


class ModelHTTPError(ModelError):
    """The provider answered with an error status.

    ``retry_after`` is the wait in seconds the provider asked for (``retry-after``
    or ``retry-after-ms``), if it asked.
    """

    def __init__(
        self,
        provider: str,
        status: int,
        body: str,
        *,
        model: str = "",
        retry_after: float | None = None,
    ) -> None:
        self.provider = provider
        self.status = status
        self.body = body
        self.model = model
        self.retry_after = retry_after
        shown = body if len(body) <= 300 else body[:297] + "..."
        about = f" for model {model}" if model else ""
        super().__init__(f"{provider} answered HTTP {status}{about}: {shown}")


class RateLimitError(ModelHTTPError):
    """429 Too Many Requests, still after every retry."""


class ModelConnectionError(ModelError):
    """The provider could not be reached, or the connection broke mid-answer.

    ``partial`` is true when text had already been streamed to the caller's
    callback before the failure; such a call is not retried, because a retry
    would stream the same text twice.
    """

    def __init__(self, message: str, *, partial: bool = False) -> None:
        self.partial = partial
        super().__init__(message)


class ModelTimeoutError(ModelConnectionError, TimeoutError):
    """The provider did not answer (or stopped streaming) within the configured timeout."""


class ModelResponseError(ModelError):
    """The provider's answer could not be understood."""
