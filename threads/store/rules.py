"""Rules every backend answers identically: ids, headers, the list order, filters and paging."""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta

from threads.errors import InvalidIdError
from threads.ids import valid_id
from threads.store.base import Page, Query
from threads.store.entries import FORMAT_VERSION, Header

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
ZERO_TIME = datetime.min.replace(tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def check_id(session: str) -> str:
    """Return ``session`` if it is a valid id; else raise :class:`InvalidIdError`."""
    if not isinstance(session, str) or not valid_id(session):
        raise InvalidIdError(str(session))
    return session


def check_header(header: Header) -> Header:
    """Vet a header for create: a valid id and this build's envelope version."""
    check_id(header.id)
    if header.weft not in (0, FORMAT_VERSION):
        raise ValueError(
            f"session {header.id}: header weft={header.weft} is not this build's format "
            f"{FORMAT_VERSION}; leave it at the default"
        )
    return header


def created_us(created: datetime) -> int:
    """A creation time as integer microseconds since the epoch: exact, so ties are ties."""
    if created.tzinfo is None:
        created = created.replace(tzinfo=UTC)
    return (created - EPOCH) // _MICROSECOND


def order_key(header: Header) -> tuple[int, str]:
    """Sort key of the list order: newest first by created, ties by id descending."""
    return (created_us(header.created), header.id)


def matches(header: Header, title: str, query: Query) -> bool:
    """Whether a session passes the query's filters (not its cursor)."""
    for key, value in query.meta.items():
        if header.meta.get(key) != value:
            return False
    return not query.title_search or query.title_search.casefold() in title.casefold()


def _after_cursor(key: tuple[int, str], query: Query) -> bool:
    assert query.before is not None
    cursor = created_us(query.before)
    if key[0] != cursor:
        return key[0] < cursor
    return bool(query.before_id) and key[1] < query.before_id


def select_page(candidates: Iterable[tuple[Header, str]], query: Query) -> Page:
    """Filter, order and page ``(header, current title)`` pairs."""
    pairs = list(candidates)
    titles = {id(h): t for h, t in pairs}
    return page_of(((order_key(h), h) for h, _ in pairs), query, lambda h: titles[id(h)])


def page_of(
    rows: Iterable[tuple[tuple[int, str], Header]],
    query: Query,
    title_of: Callable[[Header], str] | None = None,
) -> Page:
    """Filter, order and page ``(order key, header)`` rows without sorting them all.

    ``title_of`` is consulted only when the query searches titles.
    """
    meta = tuple(query.meta.items())
    needle = query.title_search.casefold()
    total = 0
    after: list[tuple[tuple[int, str], Header]] = []
    for key, header in rows:
        if meta and any(header.meta.get(k) != v for k, v in meta):
            continue
        if needle and (title_of is None or needle not in title_of(header).casefold()):
            continue
        total += 1
        if query.before is None or _after_cursor(key, query):
            after.append((key, header))
    top = heapq.nlargest(query.page_size, after, key=lambda row: row[0])
    return Page(sessions=[header for _, header in top], total=total)


def page_of_sorted(keys: list[tuple[int, str]], headers: list[Header], query: Query) -> Page:
    """A page of an unfiltered query over rows kept in ascending list-order keys.

    The cursor is a bisection, so a page costs O(log n + page) however many
    sessions there are.
    """
    end = len(keys)
    if query.before is not None:
        # Keys below (cursor, before_id); with no before_id, below (cursor, ""): strictly older.
        end = bisect.bisect_left(keys, (created_us(query.before), query.before_id))
    start = max(0, end - query.page_size)
    return Page(sessions=headers[start:end][::-1], total=len(keys))
