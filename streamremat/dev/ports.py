"""Free local ports for dev and test brokers.

``bind(0)`` hands out a port from the kernel's ephemeral range, the range every
outgoing connection on the machine also takes its local port from. A test run
opens thousands of client connections, so between the check and the broker's
own bind a client could take the port, and the broker died with "Address
already in use" (seen in CI: the session broker's controller port, and with it
every test that needs the broker). Ports are therefore picked *outside* the
ephemeral range, where only explicit binds (other brokers) can take them, and
each one is checked by binding it, which also sees the local ends of
connections (a connect only sees listeners).
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

HOST = "127.0.0.1"
#: where Linux keeps its ephemeral range ("32768\t60999" by default)
_EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
#: the lowest port picked: above the fixed ports people run things on (Kafka's
#: 9092, the dev brokers' own ports, 19xxx of this project's docs)
LOWEST = 20_000


def ephemeral_range(path: Path = _EPHEMERAL_RANGE_FILE) -> tuple[int, int]:
    """The kernel's ephemeral port range (Linux's default where it can't be read)."""
    try:
        low, high = (int(part) for part in path.read_text().split())
    except (OSError, ValueError):
        return 32_768, 60_999
    return low, high


def pick_range(count: int, ephemeral: tuple[int, int]) -> tuple[int, int]:
    """The ports (first, last) to pick runs of ``count`` from: below the ephemeral
    range when there is room above ``LOWEST``, else above it."""
    low, high = ephemeral
    if low - LOWEST >= 1_000 + count:
        return LOWEST, low - 1
    if 65_535 - high >= 1_000 + count:
        return high + 1, 65_535
    return LOWEST, 65_535  # a machine whose ephemeral range is nearly everything


def bindable(port: int) -> bool:
    """True if nothing on this host holds ``port`` now (listening or connected)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def free_port_run(count: int, rng: random.Random | None = None) -> int:
    """A port ``p`` such that ``p .. p + count - 1`` are free now, outside the
    ephemeral range (a test broker takes ``p`` and ``p + 1``, a cluster more)."""
    first, last = pick_range(count, ephemeral_range())
    draw = rng or random.Random()
    for _ in range(200):
        port = draw.randint(first, last - count + 1)
        if all(bindable(p) for p in range(port, port + count)):
            return port
    raise RuntimeError(f"no run of {count} free ports found on {HOST} in {first}-{last}")


def free_port_pair() -> int:
    """A port ``p`` such that ``p`` and ``p + 1`` are free now (for a test broker)."""
    return free_port_run(2)


__all__ = ["bindable", "ephemeral_range", "free_port_pair", "free_port_run", "pick_range"]
