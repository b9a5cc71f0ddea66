"""Errors of approvals: a decision or a grant operation that cannot be done.

    ThreadsError
    └── ApprovalError
        ├── NotPendingError (LookupError)     the request is not waiting for a decision
        │                                     (decided, expired, another occurrence, unknown)
        ├── InvalidDecisionError (ValueError) a batch that cannot be recorded as written
        ├── NotAllowedError (PermissionError) the person may not decide this request
        └── GrantNotFoundError (LookupError)  no live grant with that id

Nothing is recorded when one of these is raised (an expiry denial found on
the way stands: it is what happened). ``NotPendingError`` carries what the
request's fate was, so a stale button can say it.
"""

from __future__ import annotations

from threads.errors import ThreadsError


class ApprovalError(ThreadsError):
    """An approval operation that cannot be done; nothing was recorded."""


class NotPendingError(ApprovalError, LookupError):
    """The request is not waiting for a decision; ``fate`` says what became of it."""

    def __init__(self, request_id: str, fate: str) -> None:
        self.request_id = request_id
        self.fate = fate
        super().__init__(f"approval request {request_id} is not pending: {fate}")


class InvalidDecisionError(ApprovalError, ValueError):
    """A decision batch that cannot be recorded: empty, an unknown outcome, a call twice."""


class NotAllowedError(ApprovalError, PermissionError):
    """The person is neither the session's owner nor an approver."""


class GrantNotFoundError(ApprovalError, LookupError):
    """No live grant has this id."""

    def __init__(self, grant_id: str) -> None:
        self.grant_id = grant_id
        super().__init__(f"no grant {grant_id}; `gateway approvals grants` lists the live ones")
