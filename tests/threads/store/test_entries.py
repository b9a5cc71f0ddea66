"""Entries: relinking one onto a new parent changes its parent and nothing else."""

from __future__ import annotations

import dataclasses

import pytest

from tests.threads.store.helpers import every_field
from threads.store.entries import ENTRY_KINDS, relinked


@pytest.mark.parametrize("kind", ENTRY_KINDS)
def test_a_relinked_entry_is_the_entry_with_its_new_parent(kind: str) -> None:
    entry = every_field(kind)
    moved = relinked(entry, "e_9")
    assert type(moved) is ENTRY_KINDS[kind]
    assert moved == dataclasses.replace(entry, parent="e_9")
    assert entry.parent == "e_0"
