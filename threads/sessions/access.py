"""What a session may see and reach: session-tool visibility and the sub-agent tool set.

Session tools are scoped by default (DESIGN §11). The sessions of owners and
operators — the terminal, the chats listed in ``session.owners``, cron jobs,
and the children of any of them — see every session. A chat session sees its
own session and the sessions it started (its subagents and forks, and the
``sessions_spawn`` children whose ``spawned_by`` names it), and its
``dispatch`` may wake only those. An agent's ``session_tools_visibility``
overrides this wherever it runs: ``"all"`` grants every session, ``"spawned"``
limits it to its ``sessions_spawn`` children. A sandboxed agent without the
setting takes ``agent_defaults.sandbox.session_tools_visibility`` (seed 002's
``spawned``, by default).

Sub-agents (``agent:<agentId>:subagent:<uuid>``) get their agent's tools minus
the session tools, or the selection ``tools.subagents.tools`` makes; never
``sessions_spawn``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from config.models import AgentConfig, GatewayConfig
from threads.agent.tools import Tool
from threads.keys import SessionKey
from threads.sessions import meta as m
from threads.sessions.errors import NotVisibleError
from threads.sessions.keys import is_subagent

SESSION_TOOL_NAMES = frozenset(
    {"sessions_list", "sessions_history", "sessions_send", "sessions_spawn"}
)
SPAWN = "sessions_spawn"
DELEGATE = "delegate_task"

Tools = dict[str, Tool[Any]]
Scope = Literal["all", "own", "spawned"]


def is_trusted(key: str, config: GatewayConfig) -> bool:
    """Whether ``key`` is an owner's or an operator's session (or a child of one).

    The terminal (``cli``), a chat listed in ``session.owners`` as
    ``<channel>:<user id>``, and cron jobs' sessions (``cron:<id>``, created
    only by operators) are trusted; web chats and other users' chats are not.
    """
    root = SessionKey(key).root
    if root == "cli" or root.channel == "cron":
        return True
    # A direct message's key names its user (telegram:<id>, discord:<id>), as owners do.
    return str(root) in config.session.owners


def scope(requester: str, agent: str, config: GatewayConfig) -> Scope:
    """What ``requester``'s session tools see when it runs ``agent``."""
    agent_config = config.agents.get(agent)
    setting = agent_config.session_tools_visibility if agent_config is not None else None
    if setting is None and agent_config is not None and agent_config.sandboxed:
        setting = config.agent_defaults.sandbox.session_tools_visibility
    if setting is not None:
        return setting
    return "all" if is_trusted(requester, config) else "own"


def started_by(requester: str, key: str, meta: Mapping[str, str]) -> bool:
    """Whether ``key`` is one of ``requester``'s children (subagent, fork or spawned)."""
    return key.startswith(f"{requester}:") or meta.get(m.SPAWNED_BY) == requester


def visible(
    requester: str, agent: str, config: GatewayConfig, key: str, meta: Mapping[str, str]
) -> bool:
    """Whether session ``key`` (with ``meta``) is visible to ``requester`` running ``agent``."""
    seen = scope(requester, agent, config)
    if seen == "all":
        return True
    if seen == "spawned":
        return meta.get(m.SPAWNED_BY) == requester
    return key == requester or started_by(requester, key, meta)


def require_visible(
    requester: str, agent: str, config: GatewayConfig, key: str, meta: Mapping[str, str]
) -> None:
    if not visible(requester, agent, config, key, meta):
        raise NotVisibleError(key, requester, scope(requester, agent, config))


class SubagentToolFilter:
    """The agent loop's ``tool_filter``: sub-agents lose the session tools, and always spawn.

    Selections are cached per (agent tool set): the loop calls this every turn.
    """

    def __init__(self, config: GatewayConfig) -> None:
        self.allowed = config.tools.subagents.tools
        self._cache: dict[int, tuple[Tools, Tools]] = {}

    def __call__(self, key: str, agent: AgentConfig, tools: Tools) -> Tools:
        if not is_subagent(key):
            return tools
        cached = self._cache.get(id(tools))
        if cached is not None and cached[0] is tools:
            return cached[1]
        chosen = self._select(tools)
        if len(self._cache) >= 256:
            # Selections are remade when tools come and go (MCP servers): keep the cache small.
            self._cache.clear()
        self._cache[id(tools)] = (tools, chosen)
        return chosen

    def _select(self, tools: Tools) -> Tools:
        if self.allowed is None:
            chosen = {n: t for n, t in tools.items() if n not in SESSION_TOOL_NAMES}
        else:
            chosen = {}
            for pattern in self.allowed:
                if pattern == "*":
                    chosen.update(tools)
                elif pattern.startswith("-"):
                    for name in [n for n, t in chosen.items() if t.matches(pattern[1:])]:
                        del chosen[name]
                else:
                    chosen.update((n, t) for n, t in tools.items() if t.matches(pattern))
            if "dispatch" in tools:
                chosen.setdefault("dispatch", tools["dispatch"])
        # No sub-agent → sub-agent delegation, whatever the config says.
        chosen.pop(SPAWN, None)
        chosen.pop(DELEGATE, None)
        return chosen
