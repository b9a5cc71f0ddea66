r"""A fake model that answers numbered orders, so a crash test can count every answer.

A person (a test's web client) sends orders: one line ``[m:ID] VERB [ARG]``
(IDs are ``[a-z0-9-]+``). :func:`numbered` is the :data:`Responder` of a fake
model server that carries each one out and answers ``reply [m:ID]`` — once per
order, judged from the conversation it is shown and nothing else, so any
number of gateways and restarts can share one server:

- ``plain`` — ``dispatch(to=caller:user)`` with the reply;
- ``text`` — the reply as a final text answer;
- ``tools`` — a batch of two tools (``health`` and ``sessions_list``) first,
  then the reply;
- ``spawn`` — ``dispatch(to=subagent)`` with ``task [m:ID]``; the child answers
  ``result [m:ID]``, and when its ``child_completed`` wake comes the parent
  replies with ``dispatch(to=user)``;
- ``ask KEY`` — ``sessions_send`` ``question [m:ID]`` to session ``KEY``
  (without waiting), then the reply. The other session answers
  ``answer [m:ID]``, ends the reply-back ping-pong with ``REPLY_SKIP``, and
  in its announce step posts ``announce [m:ID]`` to its own user.

An order counts as answered once ``reply [m:ID]`` appears anywhere in the
conversation (a send the model made, or a record of one the runtime shows it),
so a turn resumed after a crash answers what is still open and nothing twice;
a turn with nothing open ends with ``dispatch({})``. :func:`answers` reads the
``reply`` and ``announce`` marks back out of what a person received.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from threads.testing.fake_model import Answer, RecordedRequest, Reply, ToolCall

ORDER = re.compile(r"^\[m:([a-z0-9-]+)\] (plain|text|tools|spawn|ask)(?: (\S+))?$", re.MULTILINE)
ANSWER = re.compile(r"\b(reply|announce) \[m:([a-z0-9-]+)\]")
QUESTION = re.compile(r"question \[m:([a-z0-9-]+)\]")
TASK = re.compile(r"task \[m:([a-z0-9-]+)\]")
BATCH = ("health", "sessions_list")
A2A_MESSAGE = "[agent-to-agent message]"
A2A_REPLY = "[agent-to-agent reply"
A2A_ANNOUNCE = "[agent-to-agent announce step]"


@dataclass(frozen=True, slots=True)
class Order:
    """One numbered order and where in the conversation it was given."""

    id: str
    verb: str
    arg: str
    at: int  # the index of the message that carries it


def order(id: str, verb: str = "plain", arg: str = "") -> str:
    """The text a person sends for one order."""
    return f"[m:{id}] {verb}" + (f" {arg}" if arg else "")


def answers(texts: Iterable[str]) -> Counter[str]:
    """How many times each ``reply [m:ID]`` / ``announce [m:ID]`` came in ``texts``."""
    return Counter(f"{kind} [m:{id}]" for text in texts for kind, id in ANSWER.findall(text))


def numbered(request: RecordedRequest) -> Answer:
    """The next step of whatever the conversation in ``request`` calls for."""
    messages = request.messages
    prompt = _last_user_text(messages)
    seen = orjson.dumps(_without_refused_calls(messages)).decode()
    if A2A_ANNOUNCE in prompt:
        return Reply(text=" ".join(f"announce [m:{id}]" for id in QUESTION.findall(prompt)))
    if A2A_REPLY in prompt:
        return Reply(text="REPLY_SKIP")
    if A2A_MESSAGE in prompt:
        sends = [_send("caller:session", f"answer [m:{id}]") for id in QUESTION.findall(prompt)]
        return _dispatch(sends)
    tasks = [id for id in TASK.findall(_user_texts(messages)) if f"result [m:{id}]" not in seen]
    if "caller_session_key:" in prompt and tasks:
        return Reply(text=" ".join(f"result [m:{id}]" for id in tasks))
    return _carry_out(messages, prompt, seen)


def _carry_out(messages: list[dict[str, Any]], prompt: str, seen: str) -> Answer:
    """The next step for the orders still open: tools first, then one dispatch (or text)."""
    open_orders = [o for o in _orders(messages) if f"reply [m:{o.id}]" not in seen]
    to = "caller:user" if "\nsender: user" in prompt else "user"
    calls: list[ToolCall] = []
    sends: list[dict[str, Any]] = []
    texts: list[str] = []
    for o in open_orders:
        reply = f"reply [m:{o.id}]"
        if o.verb == "tools" and not any(m.get("role") == "tool" for m in messages[o.at :]):
            calls.extend(ToolCall(name=name) for name in BATCH)
        elif o.verb == "ask" and f"question [m:{o.id}]" not in seen:
            arguments = {"sessionKey": o.arg, "message": f"question [m:{o.id}]"}
            calls.append(
                ToolCall(name="sessions_send", arguments={**arguments, "timeoutSeconds": 0})
            )
        elif o.verb == "spawn" and f"result [m:{o.id}]" not in seen:
            if f"task [m:{o.id}]" not in seen:
                params = {"task_id": f"t-{o.id}"}
                sends.append({**_send("subagent", f"task [m:{o.id}]"), "params": params})
        elif o.verb == "text":
            texts.append(reply)
        else:
            sends.append(_send(to, reply))
    if calls:
        return Reply(tool_calls=calls)
    if texts and not sends:
        return Reply(text=" ".join(texts))
    # dispatch takes one caller:* send per call: every answer in one body.
    replies = [send["body"] for send in sends if send["to"] == to] + texts
    others = [send for send in sends if send["to"] != to]
    return _dispatch([*others, _send(to, " ".join(replies))] if replies else others)


def _without_refused_calls(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation without the tool calls whose result is an error (nothing was done)."""
    refused = {
        m.get("tool_call_id")
        for m in messages
        if m.get("role") == "tool" and _text(m.get("content")).startswith("Error: ")
    }
    if not refused:
        return messages
    return [
        {**m, "tool_calls": [c for c in m["tool_calls"] if c.get("id") not in refused]}
        if m.get("tool_calls")
        else m
        for m in messages
    ]


def _orders(messages: list[dict[str, Any]]) -> list[Order]:
    """Every order a person gave in the conversation, first mention of each ID only."""
    found: dict[str, Order] = {}
    for at, message in enumerate(messages):
        if message.get("role") != "user":
            continue
        for id, verb, arg in ORDER.findall(_text(message.get("content"))):
            found.setdefault(id, Order(id=id, verb=verb, arg=arg, at=at))
    return list(found.values())


def _user_texts(messages: list[dict[str, Any]]) -> str:
    return "\n".join(_text(m.get("content")) for m in messages if m.get("role") == "user")


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            return _text(message.get("content"))
    return ""


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def _send(to: str, body: str) -> dict[str, Any]:
    return {"to": to, "body": body}


def _dispatch(sends: list[dict[str, Any]]) -> Reply:
    return Reply(tool_calls=[ToolCall(name="dispatch", arguments={"sends": sends})])
