"""Errors of the state store.

Every error raised here derives from :class:`StateStoreError`, itself a
:class:`threads.errors.ThreadsError`::

    StateStoreError                    a backend that cannot be opened or refused a call
    └── InvalidStateKeyError (ValueError)  a namespace, key, value or expiry that breaks a rule

A message names the store (its URL, password redacted) or the offending
namespace / key, and what to do.
"""

from __future__ import annotations

from config.redaction import redact_url
from threads.errors import ThreadsError


class StateStoreError(ThreadsError):
    """A state store backend could not be opened or refused a call."""

    def __init__(self, url: str, reason: str) -> None:
        self.url = redact_url(url)
        super().__init__(f"state store {self.url}: {reason}")


class InvalidStateKeyError(StateStoreError, ValueError):
    """A namespace, key, value or expiry the store refuses; nothing was written."""

    def __init__(self, reason: str) -> None:
        self.url = ""
        ThreadsError.__init__(self, reason)
