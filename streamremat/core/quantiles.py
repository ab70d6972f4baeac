"""Exact quantiles: state that grows with the data (every value is kept).

**Interpolation rule** (the "linear" rule, Hyndman & Fan type 7, the default of
numpy and R): for the ``n`` values sorted ascending as ``x[0..n-1]`` and a
quantile ``q`` in ``[0, 1]``, let ``h = (n - 1) * q``, ``i = floor(h)``. The
result is ``x[i]`` when ``h == i`` (an element, of its own type), else
``x[i] + (x[i+1] - x[i]) * (h - i)``. So ``q = 0`` is the minimum, ``q = 1`` the
maximum, and ``Median`` of an even count is the mean of the two middle values.
A window without values gives ``None``.
"""

from __future__ import annotations

import math
import sys
from array import array
from collections.abc import Sequence
from typing import Any

from streamremat.core.aggregators import ListAggregator, Picker, _check_number
from streamremat.core.codec import decode_number, encode_number, read_svarint
from streamremat.core.exceptions import ConfigError, StateFormatError

_INT64 = (-(2**63), 2**63 - 1)


def check_quantiles(qs: Sequence[float], what: str) -> tuple[float, ...]:
    """The requested quantiles as a tuple; each must be a number in [0, 1]."""
    if isinstance(qs, str) or not isinstance(qs, Sequence) or not qs:
        raise ConfigError(f"{what}: give the quantiles as a non-empty list, e.g. [0.5, 0.99]")
    out = []
    for q in qs:
        if isinstance(q, bool) or not isinstance(q, int | float) or not 0 <= q <= 1:
            raise ConfigError(f"{what}: quantile {q!r} is not a number in [0, 1]")
        out.append(float(q))
    return tuple(out)


def quantile_of_sorted(xs: Sequence[Any], q: float) -> Any:
    """The module docstring's rule on ascending ``xs`` (non-empty)."""
    h = (len(xs) - 1) * q
    i = math.floor(h)
    if h == i:
        return xs[i]
    lo = xs[i]
    return lo + (xs[i + 1] - lo) * (h - i)


def _canonical(acc: list[Any]) -> bytes:
    """Sorted values, so equal multisets give equal bytes whatever the arrival order."""
    if all(type(x) is int for x in acc):
        if not acc or (_INT64[0] <= min(acc) and max(acc) <= _INT64[1]):
            acc.sort()
            return b"q" + _little_endian(array("q", acc))
    elif all(type(x) is float for x in acc):
        acc.sort()
        if 0.0 in acc:  # -0.0 == 0.0: order the signed zeros too, for equal bytes
            acc.sort(key=lambda x: (x, math.copysign(1.0, x)))
        return b"d" + _little_endian(array("d", acc))
    # Mixed ints and floats (or huge ints): one tagged number each keeps its type.
    acc.sort(key=lambda x: (x, type(x) is float and math.copysign(1.0, x), type(x) is float))
    out = bytearray(b"m")
    for x in acc:
        out += encode_number(x)
    return bytes(out)


def _little_endian(values: array[Any]) -> bytes:
    if sys.byteorder == "big":
        values.byteswap()
    return values.tobytes()


def _from_canonical(data: bytes) -> list[Any]:
    tag, body = data[:1], data[1:]
    if tag in (b"q", b"d"):
        values = array(tag.decode())
        if len(body) % values.itemsize:
            raise StateFormatError("truncated quantile values")
        values.frombytes(body)
        if sys.byteorder == "big":
            values.byteswap()
        return values.tolist()
    if tag == b"m":
        out: list[Any] = []
        pos, n = 1, len(data)
        while pos < n:
            if data[pos : pos + 1] == b"f":
                out.append(decode_number(data[pos : pos + 9]))
                pos += 9
            elif data[pos : pos + 1] == b"i":
                x, pos = read_svarint(data, pos + 1)
                out.append(x)
            else:
                raise StateFormatError("not an encoded number in quantile values")
        return out
    raise StateFormatError("not encoded quantile values")


class Quantiles(ListAggregator):
    """Exact quantiles of a numeric field, e.g. ``Quantiles("latency_ms", [0.5, 0.99])``.

    Result: a list with one value per requested quantile, in the order given,
    identical to sorting all values of the window and applying the module's
    interpolation rule. Every value is kept until the window closes (the state
    grows with the data); ``ApproxQuantiles`` keeps a small sketch instead.
    """

    def __init__(self, of: Picker = None, qs: Sequence[float] = (0.5, 0.99)) -> None:
        super().__init__(of)
        self.qs = check_quantiles(qs, type(self).__name__)

    def check(self, item: Any) -> None:
        _check_number(item)

    def result(self, acc: list[Any]) -> Any:
        if not acc:
            return None
        xs = sorted(acc)
        return [quantile_of_sorted(xs, q) for q in self.qs]

    def encode(self, acc: list[Any]) -> bytes:
        return _canonical(acc)

    def decode(self, data: bytes) -> list[Any]:
        return _from_canonical(data)


class Median(Quantiles):
    """Exact median of a numeric field (``Quantiles`` at 0.5, the value itself)."""

    def __init__(self, of: Picker = None) -> None:
        super().__init__(of, (0.5,))

    def result(self, acc: list[Any]) -> Any:
        return quantile_of_sorted(sorted(acc), 0.5) if acc else None
