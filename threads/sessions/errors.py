"""Errors of the session tools.

Every error raised here derives from :class:`SessionToolError`, itself a
:class:`threads.errors.ThreadsError`::

    SessionToolError
    ├── UnknownSessionError (LookupError)   a key or session id that names no session
    ├── ReservedSessionKeyError (ValueError) ``global`` / ``unknown``, never sessions
    ├── NotVisibleError (PermissionError)   a sandboxed caller asked for a session it did not spawn
    ├── ArchivedSessionError                a sub-agent session archived after its delegation
    └── RefusedError (ValueError)           a call the rules refuse (spawn, hops, self-send)

A message names the thing and says how to fix the call; the tools hand it to
the model as the tool error.
"""

from __future__ import annotations

from threads.errors import ThreadsError


class SessionToolError(ThreadsError):
    """Root of the session tools' errors."""


class UnknownSessionError(SessionToolError, LookupError):
    """A session key or session id that names no stored session."""

    def __init__(self, ref: str, hint: str = "") -> None:
        self.ref = ref
        what = "session id" if ref.startswith("s_") else "session key"
        message = f"{what} {ref!r} names no session"
        super().__init__(
            message + (f"; {hint}" if hint else "; call sessions_list to see the sessions")
        )


class ReservedSessionKeyError(SessionToolError, ValueError):
    """``global`` and ``unknown`` are reserved words, never session keys."""

    def __init__(self, key: str, hint: str) -> None:
        self.key = key
        super().__init__(f"{key!r} is a reserved session key: {hint}")


class NotVisibleError(SessionToolError, PermissionError):
    """A session outside what the requester's session tools may see (see ``access``)."""

    def __init__(self, key: str, requester: str, scope: str) -> None:
        self.key = key
        if scope == "spawned":
            why = (
                "this sandboxed session's session tools see only the sessions it spawned with "
                "sessions_spawn (agent_defaults.sandbox.session_tools_visibility = 'spawned')"
            )
        else:
            why = (
                "a chat session's tools see only its own session and the sessions it started "
                "(an operator may grant more: session.owners, or the agent's "
                "session_tools_visibility = 'all')"
            )
        super().__init__(f"session {key} is not visible from {requester}: {why}")


class ArchivedSessionError(SessionToolError):
    """A sub-agent session whose delegation settled longer ago than ``archive_after_minutes``."""

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(
            f"session {key} is an archived sub-agent session: it cannot be woken any more; "
            "read it with sessions_history, or spawn a new sub-agent with sessions_spawn"
        )


class RefusedError(SessionToolError, ValueError):
    """A call the session-tool rules refuse; the message says which rule and what to do."""
