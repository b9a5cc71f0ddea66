"""Rules every backend answers identically: ids, the list order, filters and paging."""

from __future__ import annotations

from collections.abc import Iterable

from threads.errors import InvalidIdError
from threads.ids import valid_id
from threads.store.base import Page, Query
from threads.store.entries import Header


def check_id(session: str) -> str:
    """Return ``session`` if it is a valid id; else raise :class:`InvalidIdError`."""
    if not isinstance(session, str) or not valid_id(session):
        raise InvalidIdError(str(session))
    return session


def order_key(header: Header) -> tuple[float, str]:
    """Sort key of the list order: newest first by created, ties by id descending."""
    return (header.created.timestamp(), header.id)


def matches(header: Header, title: str, query: Query) -> bool:
    """Whether a session passes the query's filters (not its cursor)."""
    for key, value in query.meta.items():
        if header.meta.get(key) != value:
            return False
    return not query.title_search or query.title_search.casefold() in title.casefold()


def before_cursor(header: Header, query: Query) -> bool:
    """Whether a session lies after the query's cursor in list order."""
    if query.before is None:
        return True
    cursor = query.before.timestamp()
    created = header.created.timestamp()
    if created != cursor:
        return created < cursor
    return bool(query.before_id) and header.id < query.before_id


def select_page(candidates: Iterable[tuple[Header, str]], query: Query) -> Page:
    """Filter, order and page ``(header, current title)`` pairs."""
    matching = [h for h, title in candidates if matches(h, title, query)]
    matching.sort(key=order_key, reverse=True)
    after = [h for h in matching if before_cursor(h, query)]
    return Page(sessions=after[: query.page_size], total=len(matching))
