"""Poison shared by the engine's and the real broker's poison tests."""

from __future__ import annotations

from typing import Any

import orjson

BIG = 2**63 - 1  # three in one window overflow the 64 bits JSON encoders take


class PriceTotal:
    """A custom aggregation as a new user writes it: ``add`` assumes the field."""

    def zero(self) -> int:
        return 0

    def add(self, acc: int, value: dict[str, Any]) -> int:
        return acc + value["price"]

    def merge(self, a: int, b: int) -> int:
        return a + b

    def result(self, acc: int) -> int:
        return acc

    def encode(self, acc: int) -> bytes:
        return orjson.dumps(acc)

    def decode(self, data: bytes) -> int:
        return int(orjson.loads(data))
