"""Reading a chat-completions request: the agent, the new message, the session it goes to.

The gateway keeps each session's history, so of the ``messages`` a client
sends only the new part is read (docs/decisions/api-01): the user messages
after the last ``assistant`` message. Their text is the wake's body (several
are joined by a blank line) and their ``image_url`` parts its files. What
came before is already in the session; ``system`` and ``developer`` messages
are ignored (the agent's instructions come from the gateway's config).

The session is named by the ``X-Session-Key`` header (``api:<name>``), else
by the request's ``user`` field (``api:<user>``), else it is the API key's
own default session (docs/decisions/api-02).
"""

from __future__ import annotations

import mimetypes
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from channels.api.errors import ApiError, bad_request
from channels.base import MediaRef
from threads.errors import InvalidKeyError
from threads.keys import SessionKey

ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
NAME = re.compile(r"[A-Za-z0-9_.@+=-]{1,128}")
NAME_RULE = "1 to 128 letters, digits or _.@+=- (no '..')"
_DATA_IMAGE = re.compile(r"data:(image/[A-Za-z0-9.+-]+);base64,", re.ASCII)


@dataclass(frozen=True, slots=True, kw_only=True)
class ChatRequest:
    """What a chat-completions request asks: ``agent`` on ``text`` (and ``images``)."""

    model: str
    agent: str
    text: str
    images: tuple[MediaRef, ...] = ()
    stream: bool = False
    include_usage: bool = False
    user: str = ""


def read_chat(body: Any, agents: Collection[str], default_agent: str) -> ChatRequest:
    """The request ``body`` (decoded JSON) asks for; raises :class:`ApiError` naming the field."""
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    model = body.get("model")
    if model is None or model == "":
        model = default_agent
    if not isinstance(model, str):
        raise bad_request("'model' must be a string: the name of an agent", param="model")
    if model not in agents:
        raise unknown_model(model)
    stream = body.get("stream") or False
    if not isinstance(stream, bool):
        raise bad_request("'stream' must be true or false", param="stream")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise bad_request("'stream_options' must be an object", param="stream_options")
    user = body.get("user") or ""
    if not isinstance(user, str):
        raise bad_request("'user' must be a string", param="user")
    text, images = new_input(body.get("messages"))
    return ChatRequest(
        model=model,
        agent=model,
        text=text,
        images=images,
        stream=stream,
        include_usage=stream and options.get("include_usage") is True,
        user=user,
    )


def unknown_model(model: str) -> ApiError:
    return ApiError(
        404,
        f"The model '{model[:100]}' does not exist: a model is one of this gateway's agents "
        "(GET /v1/models lists them)",
        param="model",
        code="model_not_found",
    )


def new_input(messages: Any) -> tuple[str, tuple[MediaRef, ...]]:
    """The text and images of the user messages after the last assistant message."""
    if not isinstance(messages, list) or not messages:
        raise bad_request("'messages' must be a non-empty array", param="messages")
    start = 0
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise bad_request(f"messages[{index}] must be an object", param=f"messages[{index}]")
        role = message.get("role")
        if role not in ROLES:
            raise bad_request(
                f"messages[{index}].role {str(role)[:40]!r} is not one of {sorted(ROLES)}",
                param=f"messages[{index}].role",
            )
        if role == "assistant":
            start = index + 1
    last = messages[-1]["role"]
    if last != "user":
        raise bad_request(
            f"the last message is the {last}'s; it must be the user's: the gateway runs its "
            "own tools and keeps the history, so send the user's new message",
            param=f"messages[{len(messages) - 1}].role",
        )
    texts: list[str] = []
    images: list[MediaRef] = []
    for index in range(start, len(messages)):
        message = messages[index]
        if message["role"] == "user":
            text = _content(message.get("content"), f"messages[{index}].content", images)
            if text:
                texts.append(text)
    text = "\n\n".join(texts)
    if not text.strip() and not images:
        raise bad_request(
            "the user's message is empty: send text or an image",
            param=f"messages[{len(messages) - 1}].content",
        )
    return text, tuple(images)


def _content(content: Any, where: str, images: list[MediaRef]) -> str:
    """The text of one message's content (a string or parts); its images go to ``images``."""
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if not isinstance(content, list):
        raise bad_request(f"{where} must be a string or an array of parts", param=where)
    texts: list[str] = []
    for index, part in enumerate(content):
        at = f"{where}[{index}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            text = part.get("text")
            if not isinstance(text, str):
                raise bad_request(f"{at}.text must be a string", param=f"{at}.text")
            texts.append(text)
        elif kind == "image_url":
            images.append(_image(part.get("image_url"), f"{at}.image_url"))
        else:
            raise bad_request(
                f"{at} is a {str(kind)[:40]!r} part: the gateway takes 'text' and "
                "'image_url' parts",
                param=f"{at}.type",
            )
    return "\n".join(texts)


def _image(value: Any, where: str) -> MediaRef:
    """An ``image_url`` part as a file reference: an http(s) URL, or a base64 ``data:`` URL."""
    url = value.get("url") if isinstance(value, dict) else value
    if not isinstance(url, str):
        raise bad_request(f"{where}.url must be a string", param=f"{where}.url")
    data = _DATA_IMAGE.match(url)
    if data is not None:
        size = (len(url) - data.end()) * 3 // 4
        return MediaRef(kind="image", ref=url, media_type=data.group(1), size=size)
    if url.startswith(("https://", "http://")):
        guessed, _ = mimetypes.guess_type(url.partition("?")[0])
        kind = guessed if guessed and guessed.startswith("image/") else "image/*"
        return MediaRef(kind="image", ref=url, media_type=kind)
    raise bad_request(
        f"{where}.url must be an https:// URL or a data:image/…;base64, URL", param=f"{where}.url"
    )


def session_name(headers: Mapping[str, str], user: str, default: str) -> str:
    """The name of the request's session (``api:<name>``): the header's, the user's, or ``default``."""
    given = headers.get("X-Session-Key", "").strip()
    if given:
        channel, _, name = given.partition(":")
        if channel != "api" or not _valid(name):
            raise bad_request(
                f"X-Session-Key {given[:140]!r} must be api:<name>, the name {NAME_RULE}",
                code="invalid_session_key",
            )
        return name
    if user:
        if not _valid(user):
            raise bad_request(
                f"'user' {user[:140]!r} names the session api:<user>, so it must be {NAME_RULE}",
                param="user",
            )
        return user
    return default


def _valid(name: str) -> bool:
    if not NAME.fullmatch(name) or ".." in name:
        return False
    try:
        SessionKey(f"api:{name}")
    except InvalidKeyError:
        return False
    return True
