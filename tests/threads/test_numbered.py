"""The numbered fake model answers each order once, judged from the conversation alone."""

from __future__ import annotations

from typing import Any

from threads.testing.fake_model import RecordedRequest, Reply
from threads.testing.numbered import answers, numbered, order

HEADER = "---\nsource: web\nsender: user\ndelivery: Caller is the web user\n---\n"


def asked(*messages: dict[str, Any]) -> RecordedRequest:
    return RecordedRequest("POST", "/v1/chat/completions", {}, {"messages": list(messages)})


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": HEADER + text}


def sends(answer: Any) -> list[dict[str, Any]]:
    assert isinstance(answer, Reply)
    (call,) = answer.tool_calls
    assert call.name == "dispatch"
    assert isinstance(call.arguments, dict)
    return list(call.arguments["sends"])


def test_a_plain_order_is_answered_to_the_caller() -> None:
    assert sends(numbered(asked(user(order("a1"))))) == [
        {"to": "caller:user", "body": "reply [m:a1]"}
    ]


def test_an_order_answered_anywhere_in_the_conversation_is_not_answered_again() -> None:
    done = {"role": "assistant", "content": "", "tool_calls": [{"x": "reply [m:a1]"}]}
    resumed = user("The gateway restarted while your previous turn was running")
    assert sends(numbered(asked(user(order("a1")), done, resumed))) == []


def test_a_tools_order_runs_a_batch_of_two_then_replies() -> None:
    first = numbered(asked(user(order("a1", "tools"))))
    assert isinstance(first, Reply)
    assert [c.name for c in first.tool_calls] == ["health", "sessions_list"]
    after = asked(user(order("a1", "tools")), {"role": "assistant"}, {"role": "tool"})
    assert sends(numbered(after)) == [{"to": "caller:user", "body": "reply [m:a1]"}]


def test_answers_counts_every_reply_and_announce_mark() -> None:
    heard = answers(["reply [m:a1] reply [m:a2]", "reply [m:a1]", "announce [m:b1]"])
    assert heard == {"reply [m:a1]": 2, "reply [m:a2]": 1, "announce [m:b1]": 1}


def test_several_open_orders_are_answered_in_one_send_to_the_caller() -> None:
    steered = user(order("a2"))
    assert sends(numbered(asked(user(order("a1")), steered))) == [
        {"to": "caller:user", "body": "reply [m:a1] reply [m:a2]"}
    ]


def test_a_refused_dispatch_answered_nothing() -> None:
    call = {"id": "c1", "function": {"name": "dispatch", "arguments": "reply [m:a1]"}}
    refused = {"role": "tool", "tool_call_id": "c1", "content": "Error: dispatch refused"}
    again = asked(user(order("a1")), {"role": "assistant", "tool_calls": [call]}, refused)
    assert sends(numbered(again)) == [{"to": "caller:user", "body": "reply [m:a1]"}]
