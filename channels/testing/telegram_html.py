"""Telegram's text formatting, as the Bot API server applies it to a message.

``parse_html`` reads the text a bot sends with ``parse_mode=HTML`` the way
Telegram's server (tdlib's ``parse_html``) does: the tags Telegram supports,
nesting, the four named character references (``&lt; &gt; &amp; &quot;``) and
numeric ones, and the same error texts with the same byte offsets —
``Unsupported start tag "br" at byte offset 5``, ``Unmatched end tag at byte
offset 9, expected "</b>", found "</i>"``, ``Can't find end tag corresponding
to start tag "b"`` and the rest. The result is the plain text Telegram stores
and its entities (offsets and lengths in UTF-16 code units), as JSON-ready
dicts.

``find_entities`` adds what Telegram detects by itself in any message (mentions,
bot commands, hashtags, ``http(s)://`` links); ``finish_text`` trims the text
the way the server does and sorts the entities.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

Entity = dict[str, Any]

_TAGS = frozenset(
    {
        "a",
        "b",
        "strong",
        "i",
        "em",
        "s",
        "strike",
        "del",
        "u",
        "ins",
        "tg-spoiler",
        "tg-emoji",
        "tg-time",
        "span",
        "pre",
        "code",
        "blockquote",
    }
)
_SIMPLE = {
    "b": "bold",
    "strong": "bold",
    "i": "italic",
    "em": "italic",
    "s": "strikethrough",
    "strike": "strikethrough",
    "del": "strikethrough",
    "u": "underline",
    "ins": "underline",
    "tg-spoiler": "spoiler",
    "span": "spoiler",
}
# tdlib orders entities that start and end together by these priorities.
_PRIORITY = {
    "blockquote": 0,
    "expandable_blockquote": 0,
    "pre": 11,
    "code": 20,
    "date_time": 30,
    "text_link": 49,
    "text_mention": 49,
    "bold": 90,
    "italic": 91,
    "underline": 92,
    "strikethrough": 93,
    "spoiler": 94,
    "custom_emoji": 99,
}
_SPACES = frozenset(" \t\r\n\v\0")
_NAME_TOKEN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-")
_END = "\0"


class HtmlParseError(ValueError):
    """Text in HTML parse mode that Telegram refuses; the message is Telegram's own."""


def utf16_len(text: str) -> int:
    """The length of ``text`` in UTF-16 code units, the unit of Telegram's offsets and limits."""
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)


@dataclass(slots=True)
class _Open:
    tag: str
    argument: str
    unix: int
    offset: int
    begin: int  # index into the output characters, for an <a> without href


@dataclass(slots=True)
class _Parser:
    source: str
    users: Mapping[int, Mapping[str, Any]]
    out: list[str] = field(default_factory=list)
    u16: int = 0
    stack: list[_Open] = field(default_factory=list)
    entities: list[Entity] = field(default_factory=list)
    surrogate: bool = False

    def at(self, i: int) -> str:
        return self.source[i] if i < len(self.source) else _END

    def fail(self, message: str) -> HtmlParseError:
        return HtmlParseError(message)

    def byte(self, i: int) -> int:
        return len(self.source[:i].encode("utf-8", "surrogatepass"))

    def entity_at(self, i: int) -> tuple[int, int] | None:
        """The character an ``&…`` reference at ``i`` stands for, and where the text goes on."""
        s = self.at
        end = i + 1
        code = 0
        if s(i + 1) == "#":
            end += 1
            if s(i + 2) == "x":
                end += 1
                while s(end) in "0123456789abcdefABCDEF" and s(end) != _END:
                    code = code * 16 + int(s(end), 16)
                    end += 1
            else:
                while s(end).isdigit() and s(end).isascii():
                    code = code * 10 + int(s(end))
                    end += 1
            if code == 0 or code >= 0x10FFFF or end - i >= 10:
                return None
        else:
            while s(end).isascii() and s(end).isalpha():
                end += 1
            named = {"lt": "<", "gt": ">", "amp": "&", "quot": '"'}.get(self.source[i + 1 : end])
            if named is None:
                return None
            code = ord(named)
        return code, end + 1 if s(end) == ";" else end

    def emit(self, char: str) -> None:
        self.out.append(char)
        self.u16 += 2 if ord(char) > 0xFFFF else 1

    def run(self) -> tuple[str, list[Entity]]:
        i, n = 0, len(self.source)
        while i < n:
            c = self.source[i]
            if c == "&" and (decoded := self.entity_at(i)) is not None:
                code, i = decoded
                self.surrogate |= 0xD800 <= code <= 0xDFFF
                self.emit(chr(code))
                continue
            if c != "<":
                self.emit(c)
                i += 1
                continue
            i = self.end_tag(i) if self.at(i + 1) == "/" else self.start_tag(i)
        if self.stack:
            raise self.fail(
                f'Can\'t find end tag corresponding to start tag "{self.stack[-1].tag}"'
            )
        if self.surrogate:
            raise self.fail(
                "Text contains invalid Unicode characters after decoding HTML entities, "
                "check for unmatched surrogate code units"
            )
        for entity in self.entities:
            if entity["type"] == "code":
                entity.pop("language", None)
        return "".join(self.out), self.entities

    def start_tag(self, begin: int) -> int:
        s, i = self.at, begin + 1
        while s(i) not in _SPACES and s(i) != ">":
            i += 1
        if s(i) == _END:
            raise self.fail(f"Unclosed start tag at byte offset {self.byte(begin)}")
        tag = self.source[begin + 1 : i].lower()
        if tag not in _TAGS:
            raise self.fail(f'Unsupported start tag "{tag}" at byte offset {self.byte(begin)}')
        argument, unix = "", 0
        while s(i) != ">":
            while s(i) != _END and s(i) in _SPACES:
                i += 1
            if s(i) == ">":
                break
            name_begin = i
            while s(i) not in _SPACES and s(i) not in "=>/\"'":
                i += 1
            name = self.source[name_begin:i]
            if not name:
                raise self.fail(
                    f'Empty attribute name in the tag "{tag}" at byte offset {self.byte(begin)}'
                )
            while s(i) != _END and s(i) in _SPACES:
                i += 1
            if s(i) != "=":
                if s(i) == _END:
                    raise self.fail(f'Unclosed start tag "{tag}" at byte offset {self.byte(begin)}')
                if tag == "blockquote" and name == "expandable":
                    argument = "1"
                continue
            i += 1
            while s(i) != _END and s(i) in _SPACES:
                i += 1
            if s(i) == _END:
                raise self.fail(f'Unclosed start tag "{tag}" at byte offset {self.byte(begin)}')
            value, i = self.attribute_value(i)
            if s(i) == _END:
                raise self.fail(f"Unclosed start tag at byte offset {self.byte(begin)}")
            if (tag, name) in {("a", "href"), ("tg-emoji", "emoji-id"), ("tg-time", "format")}:
                argument = value
            elif tag == "code" and name == "class" and value.startswith("language-"):
                argument = value.removeprefix("language-")
            elif tag == "span" and name == "class" and value.startswith("tg-"):
                argument = value.removeprefix("tg-")
            elif tag == "blockquote" and name == "expandable":
                argument = "1"
            elif tag == "tg-time" and name == "unix":
                unix = int(value) if value.isdigit() else 0
        if tag == "span" and argument != "spoiler":
            raise self.fail(
                f'Tag "span" must have class "tg-spoiler" at byte offset {self.byte(begin)}'
            )
        self.stack.append(_Open(tag, argument, unix, self.u16, len(self.out)))
        return i + 1

    def attribute_value(self, i: int) -> tuple[str, int]:
        s = self.at
        if s(i) not in "'\"":
            token_begin = i
            while s(i) in _NAME_TOKEN:
                i += 1
            if s(i) not in _SPACES and s(i) != ">":
                raise self.fail(
                    f"Unexpected end of name token at byte offset {self.byte(token_begin)}"
                )
            return self.source[token_begin:i].lower(), i
        quote = s(i)
        i += 1
        value: list[str] = []
        while s(i) != quote and s(i) != _END:
            if s(i) == "&" and (decoded := self.entity_at(i)) is not None:
                code, i = decoded
                value.append(chr(code))
                continue
            value.append(s(i))
            i += 1
        if s(i) == quote:
            i += 1
        return "".join(value), i

    def end_tag(self, begin: int) -> int:
        s = self.at
        if not self.stack:
            raise self.fail(f"Unexpected end tag at byte offset {self.byte(begin)}")
        i = begin + 1
        while s(i) not in _SPACES and s(i) != ">":
            i += 1
        name = self.source[begin + 2 : i].lower()
        while s(i) != _END and s(i) in _SPACES:
            i += 1
        if s(i) != ">":
            raise self.fail(f"Unclosed end tag at byte offset {self.byte(begin)}")
        top = self.stack[-1]
        if name and name != top.tag:
            raise self.fail(
                f"Unmatched end tag at byte offset {self.byte(begin)}, "
                f'expected "</{top.tag}>", found "</{name}>"'
            )
        if self.u16 > top.offset:
            self.close(top)
        self.stack.pop()
        return i + 1

    def close(self, top: _Open) -> None:
        span: Entity = {"offset": top.offset, "length": self.u16 - top.offset}
        last = self.entities[-1] if self.entities else None
        same_span = last is not None and (last["offset"], last["length"]) == (
            span["offset"],
            span["length"],
        )
        if top.tag in _SIMPLE:
            self.entities.append({"type": _SIMPLE[top.tag], **span})
        elif top.tag == "tg-emoji":
            if not top.argument.isdigit() or int(top.argument) == 0:
                raise self.fail("Invalid custom emoji identifier specified")
            self.entities.append({"type": "custom_emoji", **span, "custom_emoji_id": top.argument})
        elif top.tag == "tg-time":
            if top.unix > 0:
                extra = {"date_time_format": top.argument} if top.argument else {}
                self.entities.append({"type": "date_time", **span, "unix_time": top.unix, **extra})
        elif top.tag == "a":
            self.link(top, span)
        elif top.tag == "pre":
            if last is not None and same_span and last["type"] == "code" and last.get("language"):
                last["type"] = "pre"
            else:
                self.entities.append({"type": "pre", **span})
        elif top.tag == "code":
            if last is not None and same_span and last["type"] == "pre" and top.argument:
                last["language"] = top.argument
            else:
                self.entities.append({"type": "code", **span, "language": top.argument})
        else:  # blockquote
            kind = "expandable_blockquote" if top.argument else "blockquote"
            self.entities.append({"type": kind, **span})

    def link(self, top: _Open, span: Entity) -> None:
        url = top.argument or "".join(self.out[top.begin :])
        user_id = _link_user_id(url)
        if user_id is not None:
            user = self.users.get(user_id)
            if user is not None:
                self.entities.append({"type": "text_mention", **span, "user": dict(user)})
            return
        checked = _checked_link(url)
        if checked:
            self.entities.append({"type": "text_link", **span, "url": checked})


def _link_user_id(url: str) -> int | None:
    match = re.fullmatch(r"tg:(?://)?user/?\?(?:.*&)?id=(\d+)(?:&.*)?(?:#.*)?", url.lower())
    return int(match.group(1)) if match else None


def _checked_link(url: str) -> str:
    """The link Telegram keeps for an ``<a href>``, or ``""`` when it drops the entity."""
    url = url.strip()
    if not url:
        return ""
    if "://" not in url and not url.startswith(("tg:", "ton:")):
        url = "http://" + url
    parts = urlsplit(url)
    if parts.scheme.lower() not in {"http", "https", "ftp", "tg", "ton", "tonsite"}:
        return ""
    if parts.scheme.lower() in {"http", "https", "ftp"} and not parts.hostname:
        return ""
    return url


def parse_html(
    markup: str, *, users: Mapping[int, Mapping[str, Any]] | None = None
) -> tuple[str, list[Entity]]:
    """The plain text and entities Telegram makes of ``markup`` in HTML parse mode.

    ``users`` resolves ``tg://user?id=…`` links to the user objects a
    ``text_mention`` carries; a link to a user not in it is dropped, as
    Telegram drops a mention of a user the bot cannot see. Raises
    ``HtmlParseError`` with Telegram's description of the first problem.
    """
    return _Parser(markup, users or {}).run()


_MENTION = re.compile(r"(?<!\w)@[A-Za-z0-9_]{2,32}(?!\w)")
_COMMAND = re.compile(r"(?<![\w/<>])/[A-Za-z0-9_]{1,64}(?:@[A-Za-z0-9_]{3,32})?(?![\w/<>@])")
_HASHTAG = re.compile(r"(?<!\w)#\w{1,256}(?![\w#])")
_URL = re.compile(r"\bhttps?://[^\s<>\"]+", re.IGNORECASE)
_DETECTED: tuple[tuple[str, re.Pattern[str], Callable[[str], bool]], ...] = (
    ("mention", _MENTION, lambda _: True),
    ("bot_command", _COMMAND, lambda _: True),
    ("hashtag", _HASHTAG, lambda tag: any(ch.isalpha() for ch in tag)),
    ("url", _URL, lambda _: True),
)
_OPAQUE = frozenset({"code", "pre", "text_link", "text_mention", "custom_emoji", "date_time"})


def find_entities(text: str, given: list[Entity] | None = None) -> list[Entity]:
    """The entities Telegram detects by itself in ``text``, outside ``given`` opaque ones.

    Mentions (``@name``), bot commands (``/start``, ``/start@bot``), hashtags
    and ``http(s)://`` links; the last loses trailing punctuation. Nothing is
    detected inside code, pre, links or custom emoji.
    """
    blocked = [
        (e["offset"], e["offset"] + e["length"]) for e in given or () if e["type"] in _OPAQUE
    ]
    found: list[Entity] = []
    for kind, pattern, accept in _DETECTED:
        for match in pattern.finditer(text):
            value = match.group(0)
            if kind == "url":
                value = value.rstrip(".,;:!?)'")
            if not accept(value):
                continue
            offset = utf16_len(text[: match.start()])
            length = utf16_len(value)
            if any(start < offset + length and offset < end for start, end in blocked):
                continue
            found.append({"type": kind, "offset": offset, "length": length})
    return found


def finish_text(text: str, entities: list[Entity]) -> tuple[str, list[Entity]]:
    """Trim ``text`` as Telegram does and sort ``entities``, keeping them on their characters.

    Trailing whitespace goes; leading spaces and newlines go up to the first
    entity; entities are clipped to what is left and empty ones dropped.
    """
    kept = text.rstrip()
    end = utf16_len(kept)
    clipped: list[Entity] = []
    for entity in entities:
        if entity["offset"] >= end:
            continue
        clipped.append({**entity, "length": min(entity["length"], end - entity["offset"])})
    first = min((e["offset"] for e in clipped), default=end)
    lead = 0
    while lead < len(kept) and kept[lead] in " \n" and lead < first:
        lead += 1
    shifted = [{**e, "offset": e["offset"] - lead} for e in clipped if e["length"] > 0]
    return kept[lead:], sort_entities(shifted)


def sort_entities(entities: list[Entity]) -> list[Entity]:
    """Telegram's order: by offset, longer first, then by the type's priority."""
    return sorted(entities, key=lambda e: (e["offset"], -e["length"], _PRIORITY.get(e["type"], 50)))
