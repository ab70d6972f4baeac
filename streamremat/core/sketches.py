"""Approximate aggregations on Apache DataSketches: small state whatever the data.

* ``ApproxDistinct``: HyperLogLog (``hll_sketch``, 4-bit registers);
* ``ApproxQuantiles``: t-digest (``tdigest_double``).

DataSketches' KLL is not used: its compactions flip a random coin, so the same
records give different sketches, and a replayed window would not reproduce a
failure-free run's result (DESIGN §5, determinism). HLL and t-digest are
deterministic; for t-digest the wrapper below also makes the sketch independent
of *when* it is encoded (a t-digest compresses its buffer on every serialize or
query, which would make results depend on checkpoint timing).
"""

from __future__ import annotations

import copy
import math
import struct
import sys
from array import array
from collections.abc import Sequence
from typing import Any

import datasketches as ds

from streamremat.core.aggregators import Aggregator, Picker, _check_number
from streamremat.core.codec import encode_json, read_bytes, write_bytes
from streamremat.core.exceptions import ConfigError, StateFormatError
from streamremat.core.quantiles import check_quantiles

_HLL4 = ds.tgt_hll_type.HLL_4


class ApproxDistinct(Aggregator):
    """Approximate distinct count with HyperLogLog (DataSketches ``hll_sketch``).

    With ``precision`` p (``lg_k``) the sketch has 2**p 4-bit registers: at most
    about 2**(p-1) bytes (2 KiB at the default p=12) and a relative standard error
    near 1.04 / sqrt(2**p) (1.6 %; 0.8 / sqrt(2**p) before any merge). Small sets
    are kept as a list of hashes, so they are exact and a few bytes per item.
    Items are hashed from their canonical JSON, so ``1`` and ``"1"`` differ.
    """

    def __init__(self, of: Picker = None, precision: int = 12) -> None:
        super().__init__(of)
        if isinstance(precision, bool) or not isinstance(precision, int):
            raise ConfigError(f"ApproxDistinct precision must be an int, got {precision!r}")
        if not 4 <= precision <= 16:
            raise ConfigError(f"ApproxDistinct precision must be in 4..16, got {precision}")
        self.precision = precision

    @property
    def standard_error(self) -> float:
        return 1.04 / math.sqrt(1 << self.precision)

    def pick(self, value: Any) -> str:
        item = super().pick(value)
        if isinstance(item, bytes):
            return "b:" + item.hex()
        return encode_json(item).decode()

    def zero(self) -> Any:
        return ds.hll_sketch(self.precision, _HLL4)

    def add(self, acc: Any, item: str) -> Any:
        acc.update(item)
        return acc

    def merge(self, a: Any, b: Any) -> Any:
        union = ds.hll_union(self.precision)
        union.update(a)
        union.update(b)
        return union.get_result(_HLL4)

    def result(self, acc: Any) -> int:
        estimate: float = acc.get_estimate()
        return round(estimate)

    def encode(self, acc: Any) -> bytes:
        return _canonical_hll(bytes(acc.serialize_compact()))

    def decode(self, data: bytes) -> Any:
        try:
            sketch = ds.hll_sketch.deserialize(data)
        except Exception as exc:  # the library raises plain RuntimeError/ValueError
            raise StateFormatError(f"not an encoded HyperLogLog sketch: {exc}") from None
        if sketch.lg_config_k != self.precision:
            raise StateFormatError(
                f"HyperLogLog sketch has lg_k {sketch.lg_config_k}, the aggregation "
                f"{self.precision}"
            )
        return sketch


def _canonical_hll(data: bytes) -> bytes:
    """Sort the coupons of a sketch in LIST or SET mode (small sets).

    Their compact form lists the coupons in hash-table order, which depends on
    the sketch's history (a decoded sketch re-inserts them), so equal sketches
    could encode differently. Sorted, equal sketches give equal bytes; the order
    carries no meaning (every estimate is unchanged, tested).
    """
    if len(data) < 8 or data[7] & 3 == 2:  # HLL mode: registers, already canonical
        return data
    head = data[0] * 4  # preamble ints
    body = data[head:]
    if len(body) % 4:
        return data
    coupons = sorted(struct.unpack(f"<{len(body) // 4}I", body))
    return data[:head] + struct.pack(f"<{len(coupons)}I", *coupons)


class _Digest:
    """A t-digest plus the values not folded into it yet.

    Values are folded in blocks of ``BLOCK`` and the digest compressed after
    each, so its content depends only on the values and their order: encoding
    (which would compress a partly filled buffer) never touches ``digest`` with
    pending values, and a decoded ``_Digest`` continues exactly as the original.
    """

    BLOCK = 256
    __slots__ = ("digest", "pending")

    def __init__(self, digest: Any, pending: list[float]) -> None:
        self.digest = digest
        self.pending = pending

    def add(self, x: float) -> None:
        pending = self.pending
        pending.append(x)
        if len(pending) >= self.BLOCK:
            self.flush()

    def flush(self) -> None:
        update = self.digest.update
        for x in self.pending:
            update(x)
        self.digest.compress()
        self.pending = []


class ApproxQuantiles(Aggregator):
    """Approximate quantiles of a numeric field with a t-digest (DataSketches
    ``tdigest_double``), e.g. ``ApproxQuantiles("latency_ms", [0.5, 0.99])``.

    Result: one value per requested quantile, in the order given (``None`` for
    an empty window). ``k`` (default 200) trades size for accuracy: the state
    stays a few KiB however many values arrive; the rank error is largest near
    the median (tested: under 1 % at k=200) and much smaller in the tails, where
    t-digest is most accurate. The minimum and maximum are exact.
    """

    def __init__(self, of: Picker = None, qs: Sequence[float] = (0.5, 0.99), k: int = 200) -> None:
        super().__init__(of)
        self.qs = check_quantiles(qs, type(self).__name__)
        if isinstance(k, bool) or not isinstance(k, int) or not 10 <= k <= 65535:
            raise ConfigError(f"ApproxQuantiles k must be an int in 10..65535, got {k!r}")
        self.k = k

    def check(self, item: Any) -> None:
        _check_number(item)

    def zero(self) -> _Digest:
        return _Digest(ds.tdigest_double(self.k), [])

    def add(self, acc: _Digest, item: int | float) -> _Digest:
        acc.add(float(item))
        return acc

    def merge(self, a: _Digest, b: _Digest) -> _Digest:
        out = _Digest(copy.copy(a.digest), [])
        out.digest.merge(b.digest)
        out.digest.compress()
        for x in a.pending + b.pending:
            out.add(x)
        return out

    def result(self, acc: _Digest) -> list[float] | None:
        full = _Digest(copy.copy(acc.digest), list(acc.pending))
        full.flush()
        if full.digest.is_empty():
            return None
        return [full.digest.get_quantile(q) for q in self.qs]

    def encode(self, acc: _Digest) -> bytes:
        out = bytearray()
        write_bytes(out, bytes(acc.digest.serialize()))  # compressed: no side effect
        pending = array("d", acc.pending)
        if sys.byteorder == "big":
            pending.byteswap()
        out += pending.tobytes()
        return bytes(out)

    def decode(self, data: bytes) -> _Digest:
        try:
            raw, pos = read_bytes(data, 0)
            digest = ds.tdigest_double.deserialize(raw)
        except Exception as exc:
            raise StateFormatError(f"not an encoded t-digest: {exc}") from None
        pending = array("d")
        if (len(data) - pos) % pending.itemsize:
            raise StateFormatError("truncated t-digest pending values")
        pending.frombytes(data[pos:])
        if sys.byteorder == "big":
            pending.byteswap()
        return _Digest(digest, pending.tolist())
