"""Ids: minted in order within a process, apart across processes, from any thread."""

from __future__ import annotations

import multiprocessing
import threading

from threads.ids import new_entry_id, new_session_id


def _mint_in_child(out: multiprocessing.connection.Connection) -> None:
    out.send([new_entry_id() for _ in range(100)])
    out.close()


def test_ids_of_one_process_sort_in_the_order_they_were_minted() -> None:
    # Thousands of ids share a millisecond: random low bits would order them at random.
    minted = [new_entry_id() for _ in range(5000)]
    assert minted == sorted(minted)
    assert len(set(minted)) == len(minted)


def test_a_forked_child_mints_ids_its_parent_never_does() -> None:
    receive, send = multiprocessing.get_context("fork").Pipe(duplex=False)
    child = multiprocessing.get_context("fork").Process(target=_mint_in_child, args=(send,))
    child.start()
    send.close()
    from_child = receive.recv()
    child.join()
    from_parent = [new_entry_id() for _ in range(100)]
    # The 16 digits after the time are the counter: a child that kept its parent's
    # would mint the very ids the parent mints next.
    assert not {i[12:] for i in from_child} & {i[12:] for i in from_parent}


def test_threads_minting_at_once_never_mint_the_same_id() -> None:
    minted: list[list[str]] = [[] for _ in range(4)]
    start = threading.Barrier(4)

    def mint(into: list[str]) -> None:
        start.wait()
        into.extend(new_session_id() for _ in range(5000))

    workers = [threading.Thread(target=mint, args=(each,)) for each in minted]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    every = [i for each in minted for i in each]
    assert len(set(every)) == len(every)
    for each in minted:
        assert each == sorted(each)
