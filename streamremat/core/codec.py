"""Small, deterministic binary building blocks for encoded state: varints and values."""

from __future__ import annotations

import heapq
import itertools
import struct
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

import orjson

from streamremat.core.exceptions import StateFormatError

_DOUBLE = struct.Struct(">d")

#: the longest run ``sorted_in_runs`` sorts in one call
SORT_RUN = 32_768

_K = TypeVar("_K", bytes, int)


def in_runs(items: Iterable[_K], run: int = SORT_RUN) -> Iterator[list[_K]]:
    """``items`` as lists of at most ``run`` (each list built by one short C call)."""
    it = iter(items)
    while chunk := list(itertools.islice(it, run)):
        yield chunk


def sorted_in_runs(items: Iterable[_K], run: int = SORT_RUN) -> list[_K]:
    """``sorted(items)``, without any single call over more than ``run`` items.

    One ``sorted`` of a million keys is a second of C that holds the GIL; runs of
    ``run`` keys merged by ``heapq.merge`` (Python between items) let a checkpoint
    that encodes in a worker thread hand the GIL back to the event loop every
    switch interval. Same order as ``sorted``, and no slower at that size."""
    runs = [sorted(chunk) for chunk in in_runs(items, run)]
    if len(runs) <= 1:
        return runs[0] if runs else []
    return list(heapq.merge(*runs))


def write_uvarint(out: bytearray, n: int) -> None:
    """Append an unsigned LEB128 varint."""
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def read_uvarint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    """Read an unsigned LEB128 varint at ``pos``; return (value, next position)."""
    result = 0
    shift = 0
    try:
        while True:
            b = data[pos]
            pos += 1
            result |= (b & 0x7F) << shift
            if b < 0x80:
                return result, pos
            shift += 7
    except IndexError:
        raise StateFormatError("truncated varint") from None


def write_svarint(out: bytearray, n: int) -> None:
    """Append a signed (zigzag) varint; window starts may be negative."""
    write_uvarint(out, (n << 1) if n >= 0 else ((-n << 1) - 1))


def read_svarint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    u, pos = read_uvarint(data, pos)
    return ((u >> 1) if not u & 1 else -((u + 1) >> 1)), pos


def write_bytes(out: bytearray, b: bytes) -> None:
    """Append a length-prefixed byte string."""
    write_uvarint(out, len(b))
    out += b


def read_bytes(data: bytes | memoryview, pos: int) -> tuple[bytes, int]:
    n, pos = read_uvarint(data, pos)
    end = pos + n
    if end > len(data):
        raise StateFormatError("truncated byte string")
    return bytes(data[pos:end]), end


def encode_number(x: int | float) -> bytes:
    """Ints stay exact (zigzag varint), floats are 8-byte IEEE doubles."""
    if isinstance(x, bool):
        x = int(x)
    if isinstance(x, int):
        out = bytearray(b"i")
        write_svarint(out, x)
        return bytes(out)
    return b"f" + _DOUBLE.pack(x)


def decode_number(data: bytes) -> int | float:
    if data[:1] == b"i":
        return read_svarint(data, 1)[0]
    if data[:1] == b"f" and len(data) == 9:
        return float(_DOUBLE.unpack_from(data, 1)[0])
    raise StateFormatError(f"not an encoded number: {data[:16]!r}")


def encode_json(obj: Any) -> bytes:
    """JSON with sorted keys, so equal values give equal bytes (determinism)."""
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)


def decode_json(data: bytes) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise StateFormatError(f"bad JSON in state: {exc}") from None
