"""Grants: standing approvals a person minted with "Always", kept in the state store.

A grant approves, without asking, the future calls of one tool in one
conversation (session key) whose arguments satisfy every predicate — the
exact arguments of the call that was approved, for an "Always" press. It
lives in the gateway's state store, not in one session file, so it outlives
``/new``, every process of a scaled-out gateway sees it, and the CLI and
the dashboard list and revoke it without opening sessions. The session keeps
the trail: the decision that minted it (``always``), a ``grant`` entry with
its id, and a ``grant`` audit step each time it decides a call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from threads.approvals.errors import GrantNotFoundError
from threads.approvals.predicates import ArgTest, all_match
from threads.ids import new_entry_id
from threads.state.base import Json, StateStore

NAMESPACE = "approvals.grants"
_SEP = "/"  # never in a session key, so a key's prefix names its grants alone


@dataclass(frozen=True, slots=True, kw_only=True)
class Grant:
    """One standing approval: where it holds, what it allows, who minted it and how."""

    id: str
    key: str
    tool: str
    label: str
    args: tuple[ArgTest, ...]
    who: str
    via: str
    created: datetime
    request_id: str = ""
    session_id: str = ""

    def matches(self, tool: str, args: Mapping[str, Any]) -> bool:
        return tool == self.tool and all_match(self.args, args)

    def describe(self) -> str:
        tests = "; ".join(t.describe() for t in self.args) or "any arguments"
        return f"{self.label} when {tests}"

    def wire(self) -> dict[str, Json]:
        return {
            "id": self.id,
            "key": self.key,
            "tool": self.tool,
            "label": self.label,
            "args": [t.wire() for t in self.args],
            "who": self.who,
            "via": self.via,
            "created": self.created.isoformat(),
            "request_id": self.request_id,
            "session_id": self.session_id,
        }

    @classmethod
    def from_wire(cls, wire: Mapping[str, Any]) -> Grant:
        return cls(
            id=str(wire["id"]),
            key=str(wire["key"]),
            tool=str(wire["tool"]),
            label=str(wire.get("label") or wire["tool"]),
            args=tuple(ArgTest.from_wire(a) for a in wire.get("args", ())),
            who=str(wire.get("who", "")),
            via=str(wire.get("via", "")),
            created=datetime.fromisoformat(str(wire["created"])),
            request_id=str(wire.get("request_id", "")),
            session_id=str(wire.get("session_id", "")),
        )


class GrantBook:
    """The grants of every conversation, over a state store."""

    def __init__(self, state: StateStore) -> None:
        self.state = state

    async def mint(
        self,
        *,
        key: str,
        tool: str,
        label: str,
        args: Sequence[ArgTest],
        who: str,
        via: str,
        created: datetime,
        request_id: str = "",
        session_id: str = "",
    ) -> Grant:
        grant = Grant(
            id=new_entry_id(),
            key=key,
            tool=tool,
            label=label,
            args=tuple(args),
            who=who,
            via=via,
            created=created,
            request_id=request_id,
            session_id=session_id,
        )
        await self.state.put(NAMESPACE, f"{key}{_SEP}{grant.id}", grant.wire())
        return grant

    async def of_key(self, key: str) -> list[Grant]:
        """The grants of one conversation, oldest first."""
        return _grants(await self.state.scan(NAMESPACE, f"{key}{_SEP}"))

    async def all(self) -> list[Grant]:
        """Every grant, by conversation then age."""
        return _grants(await self.state.scan(NAMESPACE))

    async def match(self, key: str, tool: str, args: Mapping[str, Any]) -> Grant | None:
        """The newest grant of ``key`` that allows this call, if any."""
        for grant in reversed(await self.of_key(key)):
            if grant.matches(tool, args):
                return grant
        return None

    async def revoke(self, grant_id: str) -> Grant:
        """End a grant; :class:`GrantNotFoundError` when no live grant has the id."""
        for grant in await self.all():
            if grant.id == grant_id:
                await self.state.delete(NAMESPACE, f"{grant.key}{_SEP}{grant.id}")
                return grant
        raise GrantNotFoundError(grant_id)


def _grants(rows: list[tuple[str, Json]]) -> list[Grant]:
    grants = [Grant.from_wire(value) for _, value in rows if isinstance(value, dict)]
    return sorted(grants, key=lambda g: (g.key, g.id))
