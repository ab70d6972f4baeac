"""The native output path (``native/src/output.rs``) against what it replaces:
sink values byte-identical to orjson's on random results (floats of every
magnitude, ints at the 64-bit edges, unicode and control characters), the
results it must leave to Python, record batches byte-identical to aiokafka's
``DefaultRecordBatchBuilder`` split at the same records, partitions those of
the Java client's partitioner, and ``to_sendables`` giving the records
``to_records`` gives, with it on or off (``STREAMREMAT_NATIVE=0``)."""

from __future__ import annotations

import enum
import math
import random
import struct
from typing import Any

import orjson
import pytest
from aiokafka.partitioner import DefaultPartitioner
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from streamremat import Count, Hopping, Max, Mean, Min, Operator, Sum, Tumbling
from streamremat.core import closing, fastpath
from streamremat.core.closing import ClosedWindows
from streamremat.core.records import BatchOutput, Record, WindowResult
from streamremat.core.task import Task
from streamremat.runtime.outputs import OutRecord, ResultRun, to_records, to_sendables
from streamremat.runtime.recovery_report import result_latencies
from tests.unit.fastpath_support import sink_rows

native = pytest.importorskip("streamremat_native")
#: every test here compares the native encoder with the Python one: with
#: ``STREAMREMAT_NATIVE=0`` the runtime never calls the encoder, so there is nothing to compare
pytestmark = pytest.mark.skipif(not fastpath.native_enabled,
                                reason="STREAMREMAT_NATIVE=0: the native encoder is off")

_FLOATS = [0.0, -0.0, 1.0, -1.5, 0.1, 1 / 3, 1e15, 1e16, 1e17, 9007199254740993.0,
           123456789012345680.0, 1e-4, 1e-5, 1e-6, 1e-7, 5e-324, 2.2250738585072014e-308,
           1.7976931348623157e308, 1e22, 1e23, 1e300, 12345.678, 0.000123, 100.0, 1e21,
           math.nan, math.inf, -math.inf]
_INTS = [0, 1, -1, 2**31, 2**53 + 1, 2**63 - 1, -(2**63), 2**63, 2**64 - 1]
_CHARS = "aZ09 \"\\/\n\r\t\b\f\x00\x01\x1f\x7f\u00e9\u4e2d\U0001f600\u2028"


def _text(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(_CHARS) for _ in range(n))


def _float(rng: random.Random) -> float:
    pick = rng.random()
    if pick < 0.3:
        return rng.choice(_FLOATS)
    if pick < 0.6:  # any bit pattern: every exponent, subnormals, NaNs
        return float(struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0])
    if pick < 0.8:
        return round(rng.uniform(-1e6, 1e6), rng.randrange(0, 8))
    return rng.uniform(-1, 1) * 10.0 ** rng.randrange(-30, 30)


def _scalar(rng: random.Random) -> Any:
    pick = rng.randrange(6)
    if pick == 0:
        return rng.choice(_INTS) if rng.random() < 0.5 else rng.randrange(-(2**62), 2**62)
    if pick == 1:
        return _float(rng)
    if pick == 2:
        return _text(rng, rng.randrange(0, 12))
    if pick == 3:
        return None
    if pick == 4:
        return rng.random() < 0.5
    return rng.randrange(1000)


def _value(rng: random.Random) -> Any:
    if rng.random() < 0.3:
        return _scalar(rng)
    names = {_text(rng, rng.randrange(1, 6)) for _ in range(rng.randrange(1, 6))}
    return {n: _scalar(rng) for n in names}


def _results(rng: random.Random, n: int) -> list[WindowResult]:
    out = []
    for _ in range(n):
        key = orjson.dumps(_text(rng, rng.randrange(0, 10)))
        start = rng.randrange(-(2**40), 2**62)
        out.append(WindowResult(key, start, start + rng.randrange(1, 10**6), _value(rng)))
    return out


@pytest.mark.parametrize("sort", [False, True])
def test_values_are_orjsons_bytes_on_random_results(sort: bool) -> None:
    rng = random.Random(15 + sort)
    option = orjson.OPT_SORT_KEYS if sort else 0
    for _ in range(40):
        results = _results(rng, 250)
        encoded = native.encode_results(results, sort)
        assert encoded is not None and len(encoded) == len(results)
        keys, values, times = encoded.columns()
        assert keys == [r.key for r in results]
        assert times == [r.end_ms for r in results]
        want = [orjson.dumps({"end_ms": r.end_ms, "start_ms": r.start_ms, "value": r.value},
                             option=option) for r in results]
        assert values == want


class _Level(enum.IntEnum):
    HIGH = 3


@pytest.mark.parametrize("value", [
    2**64, -(2**63) - 1, 10**30,  # past 64 bits: orjson raises, the Python path says why
    {"n": 2**64}, _Level.HIGH, [1, 2], {"n": [1]}, {"n": {"m": 1}}, {1: 2},
    "\ud800", {"n": "\udfff"}, b"bytes", 1 + 2j,
])
def test_what_orjson_would_not_write_the_same_is_left_to_python(value: Any) -> None:
    ok = WindowResult(b'"k"', 0, 10, 1)
    assert native.encode_results([ok, WindowResult(b'"k"', 0, 10, value)], False) is None
    assert native.encode_results([ok], False) is not None


def test_keys_and_times_it_cannot_take_are_left_to_python() -> None:
    assert native.encode_results([WindowResult("k", 0, 10, 1)], False) is None  # type: ignore[arg-type]
    assert native.encode_results([WindowResult(b"k", 0, 2**63, 1)], False) is None
    assert native.encode_results([WindowResult(b"k", 0.0, 10, 1)], False) is None  # type: ignore[arg-type]


def _aiokafka_batches(records: list[tuple[bytes, bytes, int]], batch_size: int, txn: bool,
                      state: tuple[int, int, int]) -> list[bytes]:
    """aiokafka's batches of ``records``, split where its builder refuses a record."""
    out = []

    def new() -> DefaultRecordBatchBuilder:
        return DefaultRecordBatchBuilder(2, 0, is_transactional=int(txn), producer_id=-1,
                                         producer_epoch=-1, base_sequence=0,
                                         batch_size=batch_size)

    def build(b: DefaultRecordBatchBuilder) -> bytes:
        b.set_producer_state(*state)
        return bytes(b.build())

    builder, offset = new(), 0
    for key, value, ts in records:
        if builder.append(offset, ts, key=key, value=value, headers=[]) is None:
            out.append(build(builder))
            builder, offset = new(), 0
            assert builder.append(offset, ts, key=key, value=value, headers=[]) is not None
        offset += 1
    out.append(build(builder))
    return out


@pytest.mark.parametrize(("partitions", "batch_size", "txn"),
                         [(1, 16384, False), (4, 16384, True), (3, 700, True), (5, 1, False)])
def test_record_batches_are_aiokafkas_bytes_per_partition(
        partitions: int, batch_size: int, txn: bool) -> None:
    rng = random.Random(partitions * batch_size)
    results = _results(rng, 3000)
    # not in order of time (sessions close by close time): deltas go negative
    encoded = native.encode_results(results, True)
    keys, values, times = encoded.columns()
    parts = list(range(partitions))
    partitioner = DefaultPartitioner()
    by_partition: dict[int, list[tuple[bytes, bytes, int]]] = {p: [] for p in parts}
    for k, v, t in zip(keys, values, times, strict=True):
        by_partition[partitioner(k, parts, parts)].append((k, v, t))
    assert encoded.partition_indexes(partitions) == [partitioner(k, parts, parts) for k in keys]

    got: dict[int, list[bytes]] = {p: [] for p in parts}
    for n, (index, batch) in enumerate(encoded.batches(partitions, batch_size, txn)):
        assert batch.closed() and batch.append(key=b"k", value=b"v", timestamp=1) is None
        state = (1000 + index, 7, 40 * n)
        batch._set_producer_state(*state)
        data = batch._build()
        assert batch._build() == data  # built once: a retry sends the same bytes
        assert batch.size() == len(data)
        count = batch.record_count()
        got[index].append(data)
        # what aiokafka's own builder writes for the same records and state
        want = _aiokafka_batches(by_partition[index][:count], batch_size, txn, state)[0]
        del by_partition[index][:count]
        assert data == want
        parsed = DefaultRecordBatch(bytearray(data))
        assert parsed.validate_crc() and parsed.is_transactional == txn
        assert parsed.producer_id == state[0] and parsed.base_sequence == state[2]
    assert all(not rest for rest in by_partition.values())  # every record in a batch
    if batch_size == 1:  # a record larger than the batch size goes alone, as in aiokafka
        assert sum(len(b) for b in got.values()) == len(results)


def _op(aggregate: Any) -> Operator:
    return Operator(name="op", source="in", sink="out", window=Tumbling(1000),
                    aggregate=aggregate)


@pytest.mark.parametrize("aggregate", [
    {"n": Count(), "total": Sum("x")}, {"total": Sum("x"), "n": Count()},
    {"lo": Min("x"), "hi": Max("x"), "avg": Mean("x")}, Count(), Mean("x"),
])
def test_to_records_native_and_python_give_the_same_records(
        aggregate: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    op = _op(aggregate)
    rng = random.Random(3)
    names = getattr(op.aggregator, "names", None)

    def item() -> Any:
        return rng.choice([rng.randrange(-99, 99), _float(rng), None])

    def value() -> Any:
        return item() if names is None else {n: item() for n in names}

    results = [WindowResult(orjson.dumps(f"u\u00e9{i}"), 0, 1000, value()) for i in range(500)]
    out = BatchOutput(results=list(results))
    native_records = to_sendables(op, 0, out)
    assert len(native_records) == 1 and isinstance(native_records[0], ResultRun)
    monkeypatch.setattr(fastpath, "native_enabled", False)  # what STREAMREMAT_NATIVE=0 gives
    python_records = to_sendables(op, 0, BatchOutput(results=list(results)))
    assert all(isinstance(r, OutRecord) for r in python_records)
    assert sink_rows(native_records) == sink_rows(python_records)
    assert sink_rows(python_records) == sink_rows(to_records(op, 0, BatchOutput(results=results)))


def test_a_result_orjson_refuses_fails_into_the_dead_letters_as_in_python() -> None:
    op = _op({"n": Count(), "total": Sum("x")})
    results = [WindowResult(b'"a"', 0, 1000, {"n": 1, "total": 5}),
               WindowResult(b'"b"', 0, 1000, {"n": 2, "total": 2**64})]
    out = BatchOutput(results=results)
    records = to_sendables(op, 0, out)
    assert [f.key for f in out.failed] == [b'"b"'] and out.failed[0].stage == "output"
    assert all(isinstance(r, OutRecord) for r in records)
    assert [(r.topic, r.key) for r in records] == [  # type: ignore[union-attr]
        ("out", b'"a"'), (op.dead_letter_topic, b'"b"')]


def test_a_custom_output_stays_in_python() -> None:
    op = Operator(name="op", source="in", sink="out", window=Tumbling(1000), aggregate=Count(),
                  output=lambda key, start, end, value: {"k": key, "v": value})
    records = to_sendables(op, 0, BatchOutput(results=[WindowResult(b'"a"', 0, 1000, 3)]))
    assert records == [OutRecord("out", b'"a"', b'{"k":"a","v":3}', 1000, [])]


def _events(rng: random.Random, n: int) -> list[Record]:
    """Random events over 40 keys, 10 ms apart: ints and floats (every magnitude)
    in ``x``; two keys get only 2**63 one window in four, so that their sums
    there pass 64 bits."""
    out = []
    for i in range(n):
        k = rng.randrange(40)
        big = k < 2 and i // 500 % 4 == 0
        x: Any = (2**63 if big else rng.randrange(-(2**40), 2**40) if rng.random() < 0.5
                  else _float(rng))
        if isinstance(x, float) and not math.isfinite(x):
            x = 0.5
        out.append(Record(orjson.dumps(f"k\u00e9{k}"), orjson.dumps({"x": x}), i * 10, i))
    return out


def _slices(op: Operator, events: list[Record]) -> list[BatchOutput]:
    """The task's closed windows as the emitter takes them: a slice at a time."""
    task = Task(op)
    outs = []
    for lo in range(0, len(events), 700):
        out = task.process(events[lo:lo + 700])
        closed = out.results
        assert isinstance(closed, ClosedWindows)
        while (piece := closed.next_slice()) is not None:
            if piece:
                outs.append(BatchOutput(results=piece))
    return outs


@pytest.mark.parametrize("aggregate", [
    {"n": Count(), "total": Sum("x")}, {"total": Sum("x"), "n": Count(), "avg": Mean("x")},
    {"lo": Min("x"), "hi": Max("x"), "avg": Mean("x")}, Count(), Sum("x"), Mean("x"),
    Max("x"),
])
@pytest.mark.parametrize("window", [Tumbling(1000), Hopping(3000, 1000)])
def test_closed_windows_encoded_from_accumulators_are_pythons_records(
        aggregate: Any, window: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A closing's slices encoded from their accumulators (no result built) give
    the records, dead letters and metrics the Python path gives."""
    op = Operator(name="op", source="in", sink="out", window=window, aggregate=aggregate)
    events = _events(random.Random(5), 6000)
    monkeypatch.setattr(closing, "RESULT_SLICE", 97)
    native_outs = _slices(op, events)
    native_records = [to_sendables(op, 0, out) for out in native_outs]
    assert any(isinstance(r, ResultRun) for recs in native_records for r in recs)
    # most slices went out with no result built (from their accumulators)
    unbuilt = [o for o in native_outs if o.results._built is None]  # type: ignore[attr-defined]
    assert len(unbuilt) > len(native_outs) / 2
    monkeypatch.setattr(fastpath, "native_enabled", False)
    python_outs = _slices(op, events)
    python_records = [to_sendables(op, 0, out) for out in python_outs]
    assert [sink_rows(r) for r in native_records] == [sink_rows(r) for r in python_records]
    assert [len(o.results) for o in native_outs] == [len(o.results) for o in python_outs]
    assert [o.failed for o in native_outs] == [o.failed for o in python_outs]
    if isinstance(aggregate, dict) and "total" in aggregate:  # sums past 64 bits
        assert any(o.failed for o in native_outs)
    now = 10**7
    assert ([result_latencies(o.results, now) for o in native_outs]
            == [result_latencies(o.results, now) for o in python_outs])


def test_accumulators_it_cannot_take_are_left_to_python() -> None:
    enc = native.encode_accumulators
    keys = [b'"a"', b'"b"']
    assert enc(keys, [[1, 2], [3, 4]], 0, 10, ["count", "sum"], ["n", "t"], [0, 1]) is not None
    for bad in ([1, 2**64], [1, 2.5, 3], [1, "s"], (1, 2), [1, {"x": 1}]):
        assert enc(keys, [[1, 2], bad], 0, 10, ["count", "sum"], ["n", "t"], [0, 1]) is None
    # a mean whose sum is past 53 bits: Python's true division rounds it once
    assert enc(keys, [[1, 1], [2**53 + 1, 3]], 0, 10, ["mean"], None, [0]) is None
    assert enc(keys, [[1, 1], [0, 0]], 0, 10, ["mean"], None, [0]).columns()[1][1] == (
        b'{"end_ms":10,"start_ms":0,"value":null}')
