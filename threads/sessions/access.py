"""What a session may see and use: sandbox visibility and the sub-agent tool set.

A sandboxed agent's session tools see only the sessions it spawned
(``agent_defaults.sandbox.session_tools_visibility = "spawned"``, the default),
or every session (``"all"``). Sub-agents (``agent:<agentId>:subagent:<uuid>``)
get their agent's tools minus the session tools, or the selection
``tools.subagents.tools`` makes; never ``sessions_spawn``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from config.models import AgentConfig, GatewayConfig
from threads.agent.tools import Tool
from threads.sessions import meta as m
from threads.sessions.errors import NotVisibleError
from threads.sessions.keys import is_subagent

SESSION_TOOL_NAMES = frozenset(
    {"sessions_list", "sessions_history", "sessions_send", "sessions_spawn"}
)
SPAWN = "sessions_spawn"

Tools = dict[str, Tool[Any]]


def sees_only_spawned(config: GatewayConfig, agent: str) -> bool:
    """Whether ``agent``'s session tools are limited to the sessions it spawned."""
    agent_config = config.agents.get(agent)
    return (
        agent_config is not None
        and agent_config.sandboxed
        and config.agent_defaults.sandbox.session_tools_visibility == "spawned"
    )


def visible(requester: str, agent: str, config: GatewayConfig, meta: Mapping[str, str]) -> bool:
    """Whether the session with ``meta`` is visible to ``requester`` running ``agent``."""
    return not sees_only_spawned(config, agent) or meta.get(m.SPAWNED_BY) == requester


def require_visible(
    requester: str, agent: str, config: GatewayConfig, key: str, meta: Mapping[str, str]
) -> None:
    if not visible(requester, agent, config, meta):
        raise NotVisibleError(key, requester)


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
                    chosen.pop(pattern[1:], None)
                elif pattern in tools:
                    chosen[pattern] = tools[pattern]
            if "dispatch" in tools:
                chosen.setdefault("dispatch", tools["dispatch"])
        chosen.pop(SPAWN, None)  # no sub-agent → sub-agent spawning, whatever the config says
        return chosen
