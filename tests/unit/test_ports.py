"""Ports for dev and test brokers come from outside the kernel's ephemeral range,
where client connections can't take them between the check and the broker's bind
(CI: the session broker died with "Address already in use" on its controller port)."""

from __future__ import annotations

import random
import socket
from collections.abc import Iterator
from pathlib import Path

from streamremat.dev.broker import free_port_pair
from streamremat.dev.ports import HOST, LOWEST, bindable, ephemeral_range, free_port_run, pick_range


def test_broker_ports_are_outside_the_ephemeral_range() -> None:
    low, high = ephemeral_range()
    for _ in range(20):
        port = free_port_pair()
        assert not (low <= port <= high) and not (low <= port + 1 <= high), (port, low, high)
        assert port >= LOWEST


def test_the_range_is_below_the_ephemeral_range_else_above_it() -> None:
    assert pick_range(2, (32_768, 60_999)) == (LOWEST, 32_767)
    assert pick_range(6, (1_024, 50_000)) == (50_001, 65_535)
    assert pick_range(2, (1_024, 65_000)) == (LOWEST, 65_535)


def test_an_unreadable_range_file_gives_linuxs_default(tmp_path: Path) -> None:
    assert ephemeral_range(tmp_path / "missing") == (32_768, 60_999)
    garbled = tmp_path / "garbled"
    garbled.write_text("not numbers")
    assert ephemeral_range(garbled) == (32_768, 60_999)


class _Draws(random.Random):
    """Draws the given ports in turn (then whatever ``random`` gives)."""

    def __init__(self, ports: list[int]) -> None:
        super().__init__(1)
        self._ports: Iterator[int] = iter(ports)

    def randint(self, a: int, b: int) -> int:
        return next(self._ports, None) or super().randint(a, b)


def test_a_port_held_by_a_listener_or_a_connection_is_never_picked() -> None:
    listener = socket.create_server((HOST, 0))
    target = listener.getsockname()[1]
    held = free_port_run(2)
    with socket.socket() as client:
        client.bind((HOST, held + 1))  # the local end of a connection, not a listener
        client.connect((HOST, target))
        with socket.create_server((HOST, held)) as busy:
            assert not bindable(held) and not bindable(held + 1)
            # a run starting at the listener, one ending at the connection's port, then a free one
            picked = free_port_run(2, _Draws([held, held - 1, held + 3]))
            assert picked not in (held - 1, held, held + 1)
            assert bindable(picked) and bindable(picked + 1)
            busy.close()
    listener.close()
