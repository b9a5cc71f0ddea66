"""The agent loop: model → tool calls → model …, until ``dispatch``, a text answer or the cap.

One :class:`AgentLoop` serves every session. Per turn it resolves the agent
(the wake's override, else the session's), its model and tools, then steps:
each step's messages are staged on the run and made durable before the next
model call; steered messages are drained after each tool batch and at what
would have been the final answer (which they turn into one more step).

Nothing here hands a message to a sink directly: a final text answer and a
closing notice go to the run's outbox, recorded with the turn's end and sent
once it is durable; a notice mid-turn is recorded, then sent
(:mod:`threads.outbound`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, MutableSequence, Sequence
from typing import Any

from config.models import AgentConfig, GatewayConfig, ModelSettings
from threads.agent.compaction import NOTICE as COMPACTION_NOTICE
from threads.agent.compaction import automatic_allowed, compact, over_threshold
from threads.agent.models import Models
from threads.agent.summaries import CompactionError, Summarizer, SummaryCheck, Writer
from threads.agent.tools import Tool, ToolContext, ToolOutput, ToolRegistry
from threads.agent.trimming import trim
from threads.approvals.boundary import APPROVE
from threads.budget import Overseer
from threads.faults import fault
from threads.identity import run_metadata
from threads.keys import SessionKey
from threads.llm.base import ModelRequest
from threads.llm.errors import (
    ContextOverflowError,
    ModelConfigError,
    ModelError,
    ModelTimeoutError,
    RateLimitError,
)
from threads.media import Media
from threads.messages import Message, ToolCallPart, ToolResultPart, Usage
from threads.outbound import outgoing
from threads.session import Session
from threads.sinks import OutboundMessage
from threads.store.entries import CompactionEntry
from threads.turns import Run, RunResult, StepFinish, TextDelta, ToolFinish, ToolStart
from threads.wake import SessionCaller, UserCaller, Wake

log = logging.getLogger(__name__)

PREAMBLE = """You are one thread of a chat gateway: a durable conversation that runs one turn at a time.
Every user message starts with a YAML wake header (source, sender, time, delivery, and caller_session_key when another session woke you), then the body.
End every turn by calling `dispatch` once: reply to your caller, message your user, or hand work to subagents, forks and other sessions. dispatch({}) ends silently."""

STOP_CONTROL = (
    "[control] A soft stop was requested for this thread. End this turn now by calling "
    "dispatch({}) with no sends. Do not start new work."
)

STOP_SKIPPED = "not run: a soft stop ended the turn"

ToolFilter = Callable[[str, AgentConfig, dict[str, Tool[Any]]], dict[str, Tool[Any]]]


class AgentLoop:
    """Runs turns for every session: the runtime's :class:`threads.turns.Agent`."""

    def __init__(
        self,
        *,
        config: GatewayConfig,
        models: Models,
        tools: ToolRegistry,
        services: Any = None,
        tool_filter: ToolFilter | None = None,
        media: Media | None = None,
    ) -> None:
        self.config = config
        self.models = models
        self.tools = tools
        self.services = services
        self.tool_filter = tool_filter
        self.media = media
        self._systems: dict[str, str] = {}

    @property
    def services(self) -> Any:
        """What tools reach (the thread manager); it also keeps the model budget."""
        return self._services

    @services.setter
    def services(self, value: Any) -> None:
        self._services = value
        self._overseer: Overseer | None = value if isinstance(value, Overseer) else None

    def system_prompt(self, agent: str) -> str:
        cached = self._systems.get(agent)
        if cached is None:
            instructions = self.config.agents[agent].instructions.strip()
            cached = f"{PREAMBLE}\n\n{instructions}" if instructions else PREAMBLE
            self._systems[agent] = cached
        return cached

    def agent_for(self, run: Run) -> str:
        wake = run.payload if isinstance(run.payload, Wake) else None
        name = (wake.agent if wake else None) or run.session.header.meta.get("agent")
        if name and name not in self.config.agents:
            log.warning(
                "session %s asks for agent %r, which is not configured; using %r",
                run.session.id,
                name,
                self.config.default_agent,
            )
        if not name or name not in self.config.agents:
            name = self.config.default_agent
        return name

    def model_ref(self, run: Run, agent: str) -> str:
        """The ``provider/model`` a turn of ``agent`` calls."""
        # A session created with a model of its own (sessions_spawn's model) keeps it.
        return (
            run.session.header.meta.get("model")
            or self.config.agents[agent].model
            or self.config.models.default
        )

    async def run(self, run: Run) -> RunResult:
        """Run one turn; a chat user hears, in one line, about a turn that fails or stops short."""
        try:
            result = await self._run(run)
        except ModelError as exc:
            log.warning("session %s: the model failed: %s", run.session.id, exc)
            provider = self.model_ref(run, self.agent_for(run)).partition("/")[0]
            self._notice_at_end(run, f"(Sorry — {unavailable(exc, provider)})")
            return RunResult(
                stop_reason="error", error=f"{type(exc).__name__}: {exc}", steps=run.steps
            )
        except Exception as exc:
            log.exception("session %s: the turn failed", run.session.id)
            self._notice_at_end(
                run, "(Sorry — something went wrong on our side and this turn failed.)"
            )
            return RunResult(
                stop_reason="error", error=f"{type(exc).__name__}: {exc}", steps=run.steps
            )
        if result.stop_reason == "max_steps":
            self._notice_at_end(
                run, f"(I stopped after {result.steps} steps without finishing; ask me to go on.)"
            )
        return result

    async def compact_session(
        self, session: Session, *, reason: str = "manual", instructions: str = ""
    ) -> CompactionEntry:
        """Compact a session now with its agent's model (``/compact``); between turns only."""
        ref = self.session_model(session)
        _client, _model, settings = self.models.resolve(ref)
        return await compact(
            session, self.summarizer(ref), settings, reason=reason, instructions=instructions
        )

    def session_model(self, session: Session) -> str:
        """The ``provider/model`` a session's turns call (its own, its agent's, the default)."""
        return session_model(self.config, session)

    def summarizer(self, ref: str) -> Summarizer:
        """The summary chain for a session on model ``ref``: the summary models, then ``ref``."""
        return summarizer_for(self.config, self.models, ref)

    async def _run(self, run: Run) -> RunResult:
        agent_name = self.agent_for(run)
        agent = self.config.agents[agent_name]
        client, model, settings = self.models.resolve(self.model_ref(run, agent_name))
        key = run.session.header.meta.get("key", run.session.id)
        wake = run.payload if isinstance(run.payload, Wake) else None
        chain = wake.chain if wake is not None else ""
        overseer = self._overseer
        tools, specs = self.tools.select(
            agent.tools, without_groups=() if agent.cron_tools else ("cron",)
        )
        if self.tool_filter is not None:
            tools = self.tool_filter(key, agent, tools)
            specs = [t.spec for t in tools.values()]
        ctx = ToolContext(run=run, key=key, agent=agent_name, services=self.services)
        system = self.system_prompt(agent_name)
        session = run.session
        metadata = run_metadata(session.header, run.run_id)
        messages: MutableSequence[Message] = run.messages  # the run's own, extended as it goes
        usage = Usage()
        last_input = 0
        stopping = False
        overflowed = False
        if run.resumption:
            # A decided approval boundary: its calls are answered before the model goes on.
            resolved = await self._resolve(tools, ctx, run)
            if messages and messages[-1].role == "tool":
                # The step's other calls were answered before it parked: one tool message.
                resolved = Message(role="tool", content=messages.pop().content + resolved.content)
            messages.append(resolved)
            await run.flush()
        elif await self._compact_if_due(run, settings):
            messages = run.session.context()

        def on_delta(text: str) -> None:
            run.emit(TextDelta(text=text))

        for step in range(1, agent.max_steps + 1):
            if run.stop_requested and not stopping:
                stopping = True
                control = Message.user(STOP_CONTROL)
                messages.append(control)
                run.stage(control)
            if overseer is not None and (over := overseer.budget.check(key, chain)) is not None:
                await overseer.overspent(key, run, over)
                return RunResult(
                    stop_reason="budget",
                    error=over.describe(),
                    usage=usage,
                    steps=run.steps,
                    last_input=last_input,
                )
            request = ModelRequest(
                model=model,
                messages=messages
                if self.media is None or not settings.vision
                else await self.media.prepare(messages),
                system=system,
                tools=specs,
                max_output_tokens=settings.max_output_tokens,
                stream=settings.stream,
                metadata=metadata,
            )
            try:
                response = await client.complete(request, on_delta)
            except ContextOverflowError as exc:
                if overflowed or not await self._compact(run, settings, "overflow"):
                    raise
                overflowed = True
                # The attempt is recorded as failed on the overflow, naming its re-run.
                await run.rerun(f"{type(exc).__name__}: {exc}", usage)
                usage = Usage()
                metadata = run_metadata(session.header, run.run_id)
                messages = run.session.context()
                request = dataclasses.replace(request, messages=messages, metadata=metadata)
                response = await client.complete(request, on_delta)
            usage = usage + response.usage
            if overseer is not None:
                overseer.budget.charge(key, chain, response.usage.total_tokens)
            last_input = response.usage.input_tokens
            run.steps = step
            message = response.message
            messages.append(message)
            run.stage(message)
            run.emit(StepFinish(step=step, usage=response.usage))
            calls = message.tool_calls()
            if not calls:
                if run.has_steers():
                    messages.extend(await run.drain())
                    continue
                text = message.text()
                if not stopping:
                    self._answer(text, run, key)
                return RunResult(
                    stop_reason="stopped" if stopping else "end_turn",
                    text=text,
                    usage=usage,
                    steps=step,
                    last_input=last_input,
                )
            if stopping and any(c.name != "dispatch" for c in calls):
                # Asked to stop, the model went on working: end here without running it.
                skipped = tuple(
                    ToolResultPart(call_id=c.id, name=c.name, content=STOP_SKIPPED, is_error=True)
                    for c in calls
                )
                run.stage(Message(role="tool", content=skipped))
                return RunResult(
                    stop_reason="stopped", usage=usage, steps=step, last_input=last_input
                )
            if any(c.name != "dispatch" for c in calls):
                # The calls are durable before they run: a crash in a tool leaves a
                # record of what was asked (the restart closes it as interrupted).
                await run.flush()
            results, outputs, staged = await self._call_tools(tools, calls, ctx, run)
            parked = tuple(o.parked for o in outputs if o.parked is not None)
            if parked:
                # Calls wait for a person; the others' results are durable already.
                return RunResult(
                    stop_reason="parked",
                    text=message.text(),
                    usage=usage,
                    steps=step,
                    last_input=last_input,
                    parked=parked,
                )
            messages.append(_tool_message(results, outputs, staged))
            ended = next((o for o in outputs if o.ends_turn), None)
            if ended is not None:
                return RunResult(
                    stop_reason="stopped" if stopping else "dispatch",
                    text=message.text(),
                    usage=usage,
                    steps=step,
                    last_input=last_input,
                    data=dict(ended.data),
                )
            if run.has_steers():
                messages.extend(await run.drain())
        return RunResult(
            stop_reason="max_steps",
            usage=usage,
            steps=agent.max_steps,
            last_input=last_input,
            error=f"the turn reached its step cap ({agent.max_steps}) without dispatch",
        )

    async def _call_tools(
        self,
        tools: dict[str, Tool[Any]],
        calls: Sequence[ToolCallPart],
        ctx: ToolContext,
        run: Run,
        *,
        approved: bool = False,
    ) -> tuple[list[ToolResultPart], list[ToolOutput], list[Message]]:
        """Run a step's calls side by side; each result is durable as soon as its tool ends.

        Returns the results and outputs in the calls' order, and the tool
        messages staged, in the order their tools ended.

        A restart in the middle of a batch keeps the finished results and
        closes only the calls still running as interrupted. The result of a
        call that ends the turn (``dispatch``) lands with the turn's end; a
        call parked for approval gets none until it is decided.
        """

        staged: list[Message] = []

        async def one(call: ToolCallPart) -> tuple[ToolResultPart, ToolOutput]:
            run.current_tool = call.name
            run.tool_history.append(call.name)
            run.emit(ToolStart(call_id=call.id, name=call.name))
            result, output = await self.tools.call(tools, call, ctx, approved=approved)
            if output.parked is None:
                # Durable now; a parked call stays open for its decision.
                message = Message(role="tool", content=(result, *output.files))
                staged.append(message)
                run.stage(message)
                if not output.ends_turn:
                    await run.flush()
            if len(calls) > 1:
                fault("mid_tool_batch")
            run.emit(
                ToolFinish(
                    call_id=call.id,
                    name=call.name,
                    content=result.content,
                    is_error=result.is_error,
                )
            )
            return result, output

        try:
            if len(calls) == 1:
                pairs = [await one(calls[0])]
            else:
                pairs = list(await asyncio.gather(*(one(c) for c in calls)))
        finally:
            run.current_tool = ""
        return [p[0] for p in pairs], [p[1] for p in pairs], staged

    async def _compact_if_due(self, run: Run, settings: ModelSettings) -> bool:
        """Before a turn's first model call: trim or compact when the context nears the window."""
        session = run.session
        limits = self.config.compaction
        if not over_threshold(session, settings) or not automatic_allowed(session, limits):
            return False
        if limits.keep_tool_results is not None:
            try:
                trimmed = await trim(session, settings, limits.keep_tool_results, run=run)
            except CompactionError as exc:
                log.warning("session %s: the trim failed: %s", session.id, exc)
                trimmed = None
            if trimmed is not None:
                return True
        return await self._compact(run, settings, "threshold")

    async def _resolve(self, tools: dict[str, Tool[Any]], ctx: ToolContext, run: Run) -> Message:
        """The results of a decided boundary's calls: approved ones run once, denied ones say so."""
        approved = [r.call for r in run.resumption if r.outcome == APPROVE]
        ran: dict[str, ToolResultPart] = {}
        if approved:
            results, _, _ = await self._call_tools(tools, approved, ctx, run, approved=True)
            ran = {r.call_id: r for r in results}
        parts = [
            ran.get(r.call.id)
            or ToolResultPart(
                call_id=r.call.id,
                name=r.call.name,
                content=f"DENIED: {r.reason or 'no reason given'}",
                is_error=True,
            )
            for r in run.resumption
        ]
        denied = tuple(p for p in parts if p.call_id not in ran)
        if denied:
            run.stage(Message(role="tool", content=denied))  # the approved ones are durable
        return Message(role="tool", content=tuple(parts))

    async def _compact(self, run: Run, settings: ModelSettings, reason: str) -> bool:
        """Compact the running turn's session; tell a chat user it happened."""
        summarizer = self.summarizer(self.session_model(run.session))
        try:
            await compact(run.session, summarizer, settings, reason=reason, run=run)
        except (CompactionError, ModelError) as exc:
            # The turn goes on uncompacted; an overflow then fails it with its own error.
            log.warning("session %s: %s compaction failed: %s", run.session.id, reason, exc)
            return False
        wake = _user_wake(run)
        if wake is not None:
            # Recorded with the step so far, then sent; a restart does not send it again.
            notice = outgoing(
                run.send_id(),
                wake.sink,
                OutboundMessage(text=COMPACTION_NOTICE),
                kind="notice",
                run_id=run.run_id,
            )
            try:
                await run.send_now([notice])
            except Exception:
                log.exception("session %s: the compaction notice was not recorded", run.session.id)
        return True

    def _notice_at_end(self, run: Run, text: str) -> None:
        """A short notice to the turn's caller when that caller is a chat user, sent at the end."""
        wake = _user_wake(run)
        if wake is not None:
            run.outbox.append(
                outgoing(
                    run.send_id(),
                    wake.sink,
                    OutboundMessage(text=text),
                    kind="notice",
                    run_id=run.run_id,
                )
            )

    def _answer(self, text: str, run: Run, key: str) -> None:
        """A final text answer goes to the caller, as a reply would, once the turn's end is durable.

        A child's answer to the parent that woke it is not sent here: the
        parent receives it in the ``child_completed`` wake. An answer to a
        session that expects no reply (its own final answer woke this turn)
        is not sent either: two plain answers never wake each other. A text
        answer to a session is delivered once and expects no reply.
        """
        wake = run.payload if isinstance(run.payload, Wake) else None
        if wake is None or not text.strip() or wake.sink.drops:
            return
        if isinstance(wake.caller, SessionCaller):
            if SessionKey(key).parent == wake.caller.session_key:
                return
            if not wake.expects_reply:
                log.info(
                    "session %s: a text answer to %s, which expects no reply, stays here",
                    key,
                    wake.caller.session_key,
                )
                return
        run.outbox.append(
            outgoing(
                run.send_id(),
                wake.sink,
                OutboundMessage(text=text, expects_reply=False),
                kind="reply",
                run_id=run.run_id,
            )
        )


def _tool_message(
    results: Sequence[ToolResultPart], outputs: Sequence[ToolOutput], staged: Sequence[Message]
) -> Message:
    """The tool message a step adds to the run's context: its results, then the files they carry.

    For one call it is the very message staged, the one the session's context
    will hold: the model client keeps a conversation's encoding up to the
    object its last request ended with, and finds that object again next turn
    only if it is the same one (``threads/llm/conversations.py``).
    """
    if len(results) == 1 and len(staged) == 1:
        return staged[0]
    files = tuple(f for o in outputs for f in o.files)  # images tools returned
    return Message(role="tool", content=(*results, *files))


def _user_wake(run: Run) -> Wake | None:
    """The turn's wake when its caller is a chat user who can be told things."""
    wake = run.payload if isinstance(run.payload, Wake) else None
    if wake is None or not isinstance(wake.caller, UserCaller) or wake.sink.drops:
        return None
    return wake


def session_model(config: GatewayConfig, session: Session) -> str:
    """The ``provider/model`` a session's turns call (its own, its agent's, the default)."""
    agent = config.agents.get(session.header.meta.get("agent", "")) or config.agent(None)
    return session.header.meta.get("model") or agent.model or config.models.default


def summarizer_for(config: GatewayConfig, models: Models, ref: str) -> Summarizer:
    """The summary chain: ``compaction.summary_models`` in order, then model ``ref``."""
    writers: list[Writer] = []
    for each in [*config.compaction.summary_models, ref]:
        if any(w.model == each for w in writers):
            continue
        client, model, settings = models.resolve(each)
        writers.append(Writer(client=client, model=model, settings=settings))
    return Summarizer(
        writers, check=SummaryCheck.of(config.compaction), focus=config.compaction.focus
    )


def unavailable(exc: ModelError, provider: str) -> str:
    """What a chat user is told about a failed model call: plain words, no internals."""
    if isinstance(exc, RateLimitError):
        return f"the model is busy (provider {provider} is rate limiting); try again in a minute."
    if isinstance(exc, ModelTimeoutError):
        return f"the model did not answer in time (provider {provider}); try again."
    if isinstance(exc, ContextOverflowError):
        return "this conversation no longer fits the model's context; send /compact or /new."
    if isinstance(exc, ModelConfigError):
        return f"the model is unavailable (provider {provider} is not set up right)."
    return f"the model is unavailable (provider {provider})."
