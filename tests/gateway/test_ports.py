"""Ports for servers a test starts later are not ones an outgoing connection can borrow."""

from __future__ import annotations

import socket

from gateway.testing.ports import FLOOR, LENT, free_port


def test_a_free_port_lies_below_the_range_the_kernel_lends_and_can_be_bound() -> None:
    low = int(LENT.read_text().split()[0])
    port = free_port()
    assert FLOOR <= port < low
    with socket.socket() as server:
        server.bind(("127.0.0.1", port))
