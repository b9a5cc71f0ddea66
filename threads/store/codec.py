"""The session wire codec: a header line, then one entry per line, as JSON.

:func:`encode_entry` / :func:`decode_entry` and :func:`encode_header` /
:func:`decode_header` turn the values of :mod:`threads.store.entries` into
lines and back. Each field is coded by its annotation; a field equal to its
default is left off the line. Decoding is the hot path of a session load, so
every kind gets a decoder generated as straight-line code (see
:func:`_compile`); its checks and messages are the same as the plain path's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, fields
from datetime import UTC, datetime
from typing import Any, TypeAlias

import orjson

from threads.errors import NewerFormatError
from threads.ids import valid_id
from threads.messages import (
    ROLES,
    Message,
    TextPart,
    ToolCallPart,
    WireError,
    kept_message,
    message_from_wire,
    message_to_wire,
    part_from_wire,
    part_to_wire,
    usage_from_wire,
    usage_to_wire,
)
from threads.store.checks import CHECKS
from threads.store.entries import (
    ACCEPTED_SUFFIX,
    ENTRY_KINDS,
    FORMAT_VERSION,
    INJECTED_SUFFIX,
    JSON,
    RECEIPT_ACCEPTED,
    Entry,
    Header,
    Lineage,
    MessageEntry,
    ParentRef,
    ReceiptEntry,
    prompt_of,
)
from threads.store.referrals import UNRESOLVED

# -- field codecs: (to_wire, from_wire); from_wire raises WireError naming nothing,
#    the caller adds the field name.


def _check(kind: type | tuple[type, ...], label: str) -> Callable[[JSON], JSON]:
    def decode(value: JSON) -> JSON:
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise WireError(f"must be {label}")
        return value

    return decode


def _ident(value: JSON) -> JSON:
    return value


def _time_to_wire(value: datetime) -> str:
    if value.tzinfo is UTC:  # every time the gateway makes (``utcnow``): written in C
        return orjson.dumps(value, option=orjson.OPT_UTC_Z)[1:-1].decode()
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _time_from_wire(value: JSON) -> datetime:
    if not isinstance(value, str):
        raise WireError("must be an RFC 3339 time string")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError as exc:
        raise WireError(f"is not an RFC 3339 time: {value!r}") from exc
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _str_list(value: JSON) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise WireError("must be a list of strings")
    return tuple(value)


def _str_map(value: JSON) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise WireError("must be an object of strings")
    return dict(value)


def _object(value: JSON) -> dict[str, JSON]:
    if not isinstance(value, dict):
        raise WireError("must be an object")
    return value


def _calls_to_wire(calls: tuple[ToolCallPart, ...]) -> list[JSON]:
    return [part_to_wire(c) for c in calls]


def _calls_from_wire(value: JSON) -> tuple[ToolCallPart, ...]:
    if not isinstance(value, list):
        raise WireError("must be a list of tool_call parts")
    calls = tuple(part_from_wire(v) for v in value)
    if not all(isinstance(c, ToolCallPart) for c in calls):
        raise WireError("must hold only tool_call parts")
    return calls  # type: ignore[return-value]


def _opt_message_from_wire(value: JSON) -> Message | None:
    return None if value is None else message_from_wire(value)


def _opt_message_to_wire(value: Message | None) -> JSON:
    return None if value is None else message_to_wire(value)


def _list_of_objects(value: JSON) -> tuple[dict[str, JSON], ...]:
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise WireError("must be a list of objects")
    return tuple(value)


_STR = (_ident, _check(str, "a string"))
_INT = (_ident, _check(int, "an integer"))
_BOOL = (_ident, _check(bool, "a boolean"))
_TIME = (_time_to_wire, _time_from_wire)
_OPT_TIME = (
    lambda v: None if v is None else _time_to_wire(v),
    lambda v: None if v is None else _time_from_wire(v),
)
_STRS = (list, _str_list)
_STRMAP = (dict, _str_map)
_OBJECT = (dict, _object)
_ANY = (_ident, _ident)
_MESSAGE = (message_to_wire, message_from_wire)
_OPT_MESSAGE = (_opt_message_to_wire, _opt_message_from_wire)
_USAGE = (usage_to_wire, usage_from_wire)
_CALLS = (_calls_to_wire, _calls_from_wire)
_OBJECTS = (list, _list_of_objects)

_CODECS: dict[str, tuple[Callable[[Any], JSON], Callable[[JSON], Any]]] = {
    "str": _STR,
    "int": _INT,
    "bool": _BOOL,
    "datetime": _TIME,
    "datetime | None": _OPT_TIME,
    "tuple[str, ...]": _STRS,
    "Mapping[str, str]": _STRMAP,
    "Mapping[str, JSON]": _OBJECT,
    "JSON": _ANY,
    "Message": _MESSAGE,
    "Message | None": _OPT_MESSAGE,
    "Usage": _USAGE,
    "tuple[ToolCallPart, ...]": _CALLS,
    "tuple[Mapping[str, JSON], ...]": _OBJECTS,
}


# Per kind: (name, to_wire, check, required, default) for every field but the
# three every entry carries. Computed once from the dataclass annotations.
_FieldSpec: TypeAlias = tuple[str, Callable[[Any], JSON], Callable[[Any], str] | None, bool, Any]


def _spec(cls: type[Entry]) -> tuple[_FieldSpec, ...]:
    out = []
    for f in fields(cls):
        if f.name in ("id", "created", "parent"):
            continue
        encode, _decode = _CODECS[str(f.type)]
        required = f.default is MISSING and f.default_factory is MISSING
        if f.default is not MISSING:
            default = f.default
        elif f.default_factory is not MISSING:
            default = f.default_factory()
        else:
            default = None
        out.append((f.name, encode, CHECKS.get(str(f.type)), required, default))
    return tuple(out)


_SPECS: dict[type[Entry], tuple[_FieldSpec, ...]] = {
    cls: _spec(cls) for cls in ENTRY_KINDS.values()
}


def entry_to_wire(entry: Entry) -> dict[str, JSON]:
    """The JSON object of one entry line.

    Raises :class:`ValueError` naming the entry and the field for a value the
    decoder would refuse, such as a required field that is None (the format
    has no way to say it) or a string field holding a number.
    """
    return _ENCODERS[type(entry)](entry)


# A field whose check passes at once for a value of exactly this type.
_PLAIN_TYPES = {"str": "str", "int": "int", "bool": "bool"}


def _compile_encoder(cls: type[Entry]) -> Callable[[Entry], dict[str, JSON]]:
    """``entry_to_wire`` for one kind as straight-line code (as :func:`_compile` does
    for decoding): a loop over the field specs cost twice as much on every append.
    Fields are written in declaration order, each left off when equal to its default;
    a None reads back as the default (null is "missing"), anything else is checked."""
    env: dict[str, Any] = {"time_to_wire": _time_to_wire, "type": type, "str": str}
    env.update(int=int, bool=bool, ValueError=ValueError)
    where = "{entry.TYPE} entry {entry.id}"
    body = [
        "def encode_kind(entry):",
        "    out = {'type': entry.TYPE}",
        "    version = entry.wire_version()",
        "    if version:",
        "        out['v'] = version",
        "    out['id'] = entry.id",
        "    if entry.parent:",
        "        out['parent'] = entry.parent",
        "    out['created'] = time_to_wire(entry.created)",
    ]
    if cls is MessageEntry:
        body.append("    whole = not entry.receipt")  # else the receipt it names holds them
    for index, (name, encode, check, required, default) in enumerate(_SPECS[cls]):
        env[f"encode_{index}"], env[f"check_{index}"] = encode, check
        env[f"default_{index}"] = default
        pad = "    "
        if cls is MessageEntry and name in _REFERRED:
            body.append(f"{pad}if whole:")
            pad += "    "
        elif cls is MessageEntry and name in _IMPLIED_BY_ID:
            body.append(f"{pad}if version < 3:")  # a v3 or v4 message's id says its receipt
            pad += "    "
        elif cls is ReceiptEntry and name in ("status", "turn"):
            # A v4 receipt is accepted, and its id says its prompt.
            body.append(f"{pad}if version != 4:")
            pad += "    "
        elif cls is ReceiptEntry and name == "policy":
            body.append(f"{pad}if version != 4 or entry.policy != {IMPLIED_POLICY!r}:")
            pad += "    "
        body.append(f"{pad}value = entry.{name}")
        if required:
            body.append(f"{pad}if value is None:")
            body.append(
                f"{pad}    raise ValueError(f\"{where}: '{name}' is required and is None\")"
            )
        else:
            body.append(f"{pad}if value != default_{index}:")
            pad += "    "
        if check is not None:
            plain = _PLAIN_TYPES.get(_field_type(cls, name))
            tests = [] if required else ["value is not None"]
            tests += [f"type(value) is not {plain}"] if plain else []
            body.append(f"{pad}if {' and '.join(tests) or 'True'}:")
            body.append(f"{pad}    problem = check_{index}(value)")
            body.append(f"{pad}    if problem:")
            body.append(f"{pad}        raise ValueError(f\"{where}: '{name}' {{problem}}\")")
        written = "value" if encode is _ident else f"encode_{index}(value)"
        body.append(f"{pad}out[{name!r}] = {written}")
    body.append("    return out")
    exec(compile("\n".join(body), f"<encoder of {cls.__name__}>", "exec"), env)
    encoder: Callable[[Entry], dict[str, JSON]] = env["encode_kind"]
    return encoder


def _field_type(cls: type[Entry], name: str) -> str:
    return next(str(f.type) for f in fields(cls) if f.name == name)


def _setter(cls: type, name: str) -> Callable[[Any, Any], None]:
    for klass in cls.__mro__:
        slot = klass.__dict__.get(name)
        if slot is not None and hasattr(slot, "__set__"):
            return slot.__set__  # type: ignore[no-any-return]
    raise TypeError(f"{cls.__name__}.{name} is not a slot")


def _fast_message(value: JSON) -> Message:
    """``message_from_wire`` with a fast path for text parts; errors are the same."""
    if type(value) is not dict:
        return message_from_wire(value)
    role = value.get("role")
    content = value.get("content")
    if role not in ROLES or type(content) is not list:
        return message_from_wire(value)
    kept: tuple[Any, ...] | str
    if len(content) == 1 and _is_text(first := content[0]):
        kept = first["text"]  # a lone text part: the message keeps its text (decision perf-26)
    else:
        parts: list[Any] = []
        for index, part in enumerate(content):
            if _is_text(part):
                text_part = _new(TextPart)
                _set_text(text_part, part["text"])
                parts.append(text_part)
            else:
                parts.append(part_from_wire(part, f"message.content[{index}]"))
        kept = tuple(parts)
    return kept_message(ROLES[role], kept)


def _is_text(part: JSON) -> bool:
    return type(part) is dict and part.get("type") == "text" and type(part.get("text")) is str


_new = object.__new__
_set_text = _setter(TextPart, "text")
_FAST: dict[Callable[[JSON], Any], Callable[[JSON], Any]] = {message_from_wire: _fast_message}

EntryDecoder: TypeAlias = Callable[[dict[str, JSON], str], Entry]


_PLAIN = {"str": ("str", "a string"), "int": ("int", "an integer"), "bool": ("bool", "a boolean")}


def _compile(cls: type[Entry]) -> EntryDecoder:
    """A decoder for one kind, generated as straight-line code (as dataclasses
    generate ``__init__``) that sets the slots directly: a frozen dataclass's
    ``__init__`` and a loop over the fields cost several times more on a
    10 000-entry load. The checks and messages are ``entry_from_wire``'s."""
    env: dict[str, Any] = {
        "cls": cls,
        "reads": cls.READS,
        "new": _new,
        "WireError": WireError,
        "NewerFormatError": NewerFormatError,
        "time_from_wire": _time_from_wire,
        "str": str,
        "int": int,
        "bool": bool,
        "type": type,
    }
    for name in ("id", "parent", "created"):
        env[f"set_{name}"] = _setter(cls, name)
    body = []
    for index, f in enumerate(fields(cls)):
        if f.name in ("id", "created", "parent"):
            continue
        _encode, decode = _CODECS[str(f.type)]
        env[f"set_{index}"] = _setter(cls, f.name)
        env[f"decode_{index}"] = _FAST.get(decode, decode)
        where = f"{{kind}} entry {{entry_id}}: '{f.name}'"
        body.append(f"    value = obj.get({f.name!r})")
        body.append("    if value is None:")
        required = f.default is MISSING and f.default_factory is MISSING
        if cls is MessageEntry and f.name in _REFERRED and required:
            # Left out of a prompt that names its receipt: referrals.Referrals puts it back.
            env[f"unresolved_{index}"] = UNRESOLVED
            body.append('        if version < 3 and not obj.get("receipt"):')
            body.append(f'            raise WireError(f"{where} is missing")')
            body.append(f"        set_{index}(entry, unresolved_{index})")
        elif cls is ReceiptEntry and f.name == "status":
            body.append("        if version < 4:")
            body.append(f'            raise WireError(f"{where} is missing")')
            body.append(f"        set_{index}(entry, accepted)")
        elif required:
            body.append(f'        raise WireError(f"{where} is missing")')
        elif f.default_factory is not MISSING:
            env[f"factory_{index}"] = f.default_factory
            body.append(f"        set_{index}(entry, factory_{index}())")
        else:
            env[f"default_{index}"] = f.default
            body.append(f"        set_{index}(entry, default_{index})")
        plain = _PLAIN.get(str(f.type))
        if plain is not None:
            body.append(f"    elif type(value) is not {plain[0]}:")
            body.append(f'        raise WireError(f"{where} must be {plain[1]}")')
            body.append("    else:")
            body.append(f"        set_{index}(entry, value)")
        else:
            body.append("    else:")
            body.append("        try:")
            body.append(f"            set_{index}(entry, decode_{index}(value))")
            body.append("        except WireError as exc:")
            body.append(f'            raise WireError(f"{where} {{exc}}") from None')
    if cls is MessageEntry:
        # A v4 message is a steer's, and its id says the receipt that holds it.
        env.update(injected_suffix=INJECTED_SUFFIX, set_receipt=_setter(cls, "receipt"))
        body += [
            "    if version >= 4:",
            "        if not entry_id.endswith(injected_suffix):",
            "            raise WireError(",
            '                f"{kind} entry {entry_id}: a v{version} message\'s id must end in "',
            '                f"{injected_suffix!r} after its receipt\'s"',
            "            )",
            "        set_receipt(entry, entry_id[: -len(injected_suffix)])",
        ]
    if cls is ReceiptEntry:
        # A v4 receipt is accepted, its id says its prompt, and a policy left out is queue.
        env.update(prompt_of=prompt_of, implied_policy=IMPLIED_POLICY, accepted=RECEIPT_ACCEPTED)
        env.update(set_turn=_setter(cls, "turn"), set_policy=_setter(cls, "policy"))
        body += [
            "    if version >= 4:",
            "        if entry.status != accepted:",
            "            raise WireError(",
            '                f"{kind} entry {entry_id}: a v{version} receipt is {accepted!r}, not "',
            '                f"{entry.status!r}"',
            "            )",
            "        if not entry.turn:",
            "            set_turn(entry, prompt_of(entry_id))",
            "            if not entry.turn:",
            "                raise WireError(",
            "                    f\"{kind} entry {entry_id}: a v{version} receipt's id must end in "
            f"{ACCEPTED_SUFFIX!r} after its prompt's\"",
            "                )",
            "        if not entry.policy:",
            "            set_policy(entry, implied_policy)",
        ]
    source = "\n".join(
        [
            "def decode_kind(obj, kind):",
            '    version = obj.get("v", 0)',
            "    if type(version) is not int:",
            """        raise WireError("'v' must be an integer")""",
            "    if version > reads:",
            "        raise NewerFormatError(",
            '            f"{kind} entry has v={version} but this build reads up to v={reads}; "',
            '            "upgrade to read this session"',
            "        )",
            '    entry_id = obj.get("id")',
            "    if type(entry_id) is not str or not entry_id:",
            """        raise WireError(f"{kind} entry: 'id' must be a non-empty string")""",
            '    parent = obj.get("parent", "")',
            "    if type(parent) is not str:",
            """        raise WireError(f"{kind} entry {entry_id}: 'parent' must be a string")""",
            "    try:",
            '        created = time_from_wire(obj.get("created"))',
            "    except WireError as exc:",
            """        raise WireError(f"{kind} entry {entry_id}: 'created' {exc}") from None""",
            "    entry = new(cls)",
            "    set_id(entry, entry_id)",
            "    set_parent(entry, parent)",
            "    set_created(entry, created)",
            *body,
            "    return entry",
        ]
    )
    exec(compile(source, f"<decoder of {cls.__name__}>", "exec"), env)
    decoder: EntryDecoder = env["decode_kind"]
    return decoder


_REFERRED = ("message", "wake")
_IMPLIED_BY_ID = ("run_id", "receipt")  # of a v3 prompt: its receipt holds the run id
IMPLIED_POLICY = "queue"

_DECODERS: dict[str, EntryDecoder] = {kind: _compile(cls) for kind, cls in ENTRY_KINDS.items()}
_ENCODERS: dict[type[Entry], Callable[[Entry], dict[str, JSON]]] = {
    cls: _compile_encoder(cls) for cls in ENTRY_KINDS.values()
}


def entry_from_wire(obj: JSON) -> Entry:
    """Restore an entry from its JSON object.

    Raises :class:`NewerFormatError` for an unknown kind or a newer ``v``, and
    :class:`WireError` naming the field for anything malformed.
    """
    if type(obj) is not dict:
        raise WireError("an entry line must be a JSON object")
    kind = obj.get("type")
    decoder = _DECODERS.get(kind) if isinstance(kind, str) else None
    if decoder is None:
        if not isinstance(kind, str) or not kind:
            raise WireError("the entry has no 'type'")
        raise NewerFormatError(
            f"entry kind {kind!r} is not known to this build; it was written by a newer "
            "gateway — upgrade to read this session"
        )
    return decoder(obj, str(kind))


def encode_entry(entry: Entry) -> bytes:
    """One entry as a line of bytes, newline included, once it is sure to read back.

    An entry the format cannot read back would make its session fail to load
    forever, so it is refused here, before anything is written: an ``id`` or
    ``parent`` that is not a valid id (:func:`threads.ids.valid_id`), a
    required field that is None, or any field the decoder would not accept
    raises :class:`ValueError` naming the entry and the field. The check looks
    at the values, not at a decode of the line (see :mod:`threads.store.checks`). A value JSON
    cannot hold raises :class:`TypeError` naming the entry.
    """
    kind = entry.TYPE
    if not isinstance(entry.id, str) or not valid_id(entry.id):
        raise ValueError(
            f"{kind} entry: 'id' {entry.id!r} is not a valid id (1 to 128 letters, digits, "
            "'_' or '-'); mint one with threads.ids.new_entry_id()"
        )
    if not isinstance(entry.parent, str) or (entry.parent and not valid_id(entry.parent)):
        raise ValueError(
            f"{kind} entry {entry.id}: 'parent' {entry.parent!r} is not a valid entry id "
            "(1 to 128 letters, digits, '_' or '-'); leave it empty on a root"
        )
    if not isinstance(entry.created, datetime):
        raise ValueError(f"{kind} entry {entry.id}: 'created' must be a datetime")
    try:
        return orjson.dumps(entry_to_wire(entry)) + b"\n"
    except TypeError as exc:
        raise TypeError(f"{kind} entry {entry.id} cannot be encoded as JSON: {exc}") from None
    except (AttributeError, WireError) as exc:
        raise ValueError(f"{kind} entry {entry.id} cannot be encoded: {exc}") from None


def decode_entry(line: bytes | str) -> Entry:
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise WireError(f"not JSON: {exc}") from None
    return entry_from_wire(obj)


def header_to_wire(header: Header) -> dict[str, JSON]:
    out: dict[str, JSON] = {
        "type": "session",
        "weft": header.weft or FORMAT_VERSION,
        "id": header.id,
        "created": _time_to_wire(header.created),
    }
    if header.parent is not None:
        out["parent"] = {"session": header.parent.session, "entry": header.parent.entry}
    if header.lineage is not None:
        lineage = {"parent_session": header.lineage.parent_session}
        for name in ("parent_call_id", "parent_entry", "parent_run"):
            if value := getattr(header.lineage, name):
                lineage[name] = value
        out["lineage"] = lineage
    if header.meta:
        out["meta"] = dict(header.meta)
    return out


def header_from_wire(obj: JSON) -> Header:
    """Restore a header; a newer ``weft`` envelope raises :class:`NewerFormatError`."""
    if not isinstance(obj, dict) or obj.get("type") != "session":
        raise WireError("the first line is not a session header (type 'session')")
    weft = obj.get("weft")
    if not isinstance(weft, int) or isinstance(weft, bool) or weft < 1:
        raise WireError("the header's 'weft' must be a positive integer")
    if weft > FORMAT_VERSION:
        raise NewerFormatError(
            f"session format weft={weft} is newer than this build's {FORMAT_VERSION}; "
            "upgrade to read this session"
        )
    session_id = obj.get("id")
    if not isinstance(session_id, str) or not session_id:
        raise WireError("the header's 'id' must be a non-empty string")
    try:
        created = _time_from_wire(obj.get("created"))
    except WireError as exc:
        raise WireError(f"the header's 'created' {exc}") from None
    parent = None
    raw_parent = obj.get("parent")
    if isinstance(raw_parent, dict):
        parent = ParentRef(
            session=str(raw_parent.get("session", "")), entry=str(raw_parent.get("entry", ""))
        )
    lineage = None
    raw_lineage = obj.get("lineage")
    if isinstance(raw_lineage, dict):
        lineage = Lineage(
            parent_session=str(raw_lineage.get("parent_session", "")),
            parent_call_id=str(raw_lineage.get("parent_call_id", "")),
            parent_entry=str(raw_lineage.get("parent_entry", "")),
            parent_run=str(raw_lineage.get("parent_run", "")),
        )
    meta = obj.get("meta") or {}
    try:
        meta = _str_map(meta)
    except WireError:
        raise WireError("the header's 'meta' must be an object of strings") from None
    return Header(
        id=session_id, created=created, weft=weft, parent=parent, lineage=lineage, meta=meta
    )


def encode_header(header: Header) -> bytes:
    return orjson.dumps(header_to_wire(header)) + b"\n"


def decode_header(line: bytes | str) -> Header:
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise WireError(f"header is not JSON: {exc}") from None
    return header_from_wire(obj)
