"""The random streams, shapes and run driver shared by the batch fast path's
equivalence tests (``test_fastpath.py``: fast vs general path; ``test_native.py``:
native vs Python fast vs general path)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

from streamremat import Count, Hopping, Max, Mean, Min, Operator, Sum, Tumbling
from streamremat.core.records import Record
from streamremat.core.task import Task
from streamremat.runtime.outputs import OutRecord, ResultRun

T0 = 1_000


def make_op(window: Any, aggregate: Any, **kw: Any) -> Operator:
    return Operator(name="fp", source="in", sink="out", window=window, aggregate=aggregate, **kw)


#: the shapes the fast path takes, each with the window families
SHAPES: dict[str, Any] = {
    "count": lambda: {"n": Count()},
    "min": lambda: Min("x"),
    "max": lambda: Max("x"),
    "mean": lambda: Mean("x"),
    "count_sum": lambda: {"n": Count(), "total": Sum("x")},
    "all": lambda: {"n": Count(), "s": Sum("x"), "lo": Min("x"), "hi": Max("x"),
                    "avg": Mean("x")},
    "sum_whole_value": lambda: {"s": Sum()},
}
WINDOWS = {
    "tumbling": lambda: Tumbling(100, grace_ms=20),
    "hopping": lambda: Hopping(100, 30, grace_ms=10),
}

numbers = st.one_of(
    st.integers(-50, 50),
    st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False),
    st.sampled_from([0.1, 0.2, 0.3, 1e16, -1e16, -0.0, 2**63, 2**70]),
)


def json_value(x: Any, ts: Any) -> bytes:
    return json.dumps({"x": x, "ts": ts}).encode()  # json: also ints past 64 bits


good_values = st.builds(json_value, numbers, st.one_of(st.integers(T0, T0 + 600), st.just(-3)))
bad_values = st.sampled_from([
    b"{not json", b'{"y": 1}', None, b"[1, 2]", b'{"x": true}', b'{"x": null}', b'{"x": "s"}',
    b'{"x": "\xff"}', b"7", b'{"x": 1e400}', b'{"x": [1]}',
])
keys = st.sampled_from([b'"a"', b'"b"', b'"c"', b'"d"'])


@st.composite
def streams(draw: Any, bad: bool = True) -> list[Record]:
    """Records, a share of them bad (none, a few or many: with many, most batches
    take the general path; with a few, most take the fast one)."""
    n = draw(st.integers(0, 80))
    bad_pct = draw(st.sampled_from([0, 2, 10, 30])) if bad else 0
    recs = []
    for i in range(n):
        key, t, v = draw(keys), draw(st.integers(0, 600)), draw(good_values)
        if draw(st.integers(0, 99)) < bad_pct:
            which = draw(st.sampled_from(["key", "time", "value"]))
            if which == "key":
                key = None
            elif which == "time":
                t = draw(st.sampled_from([None, -5]))
            else:
                v = draw(bad_values)
        recs.append(Record(key, v, None if t is None else T0 + t, i))
    return recs


def run_task(task: Task, batches: list[list[Record]], snapshot_at: set[int]) -> list[Any]:
    """Everything observable of a run: outputs per batch and the checkpoints taken."""
    seen: list[Any] = []
    for i, batch in enumerate(batches):
        out = task.process(batch)
        seen.append((
            [(r.key, r.start_ms, r.end_ms, canon(r.value)) for r in out.results],
            [(d.record.offset, d.stage, d.reason) for d in out.dead_letters],
            [(lr.record.offset, lr.timestamp_ms, lr.stream_time_ms) for lr in out.late],
            [(f.key, f.start_ms, f.stage, f.reason) for f in out.failed],
        ))
        if i in snapshot_at:
            seen.append(task.snapshot(full=i % 2 == 0))
    seen.append(task.snapshot(full=True))
    return seen


def canon(value: Any) -> Any:
    """Results compared with their types (1 vs 1.0) and the sign of zero."""
    return repr(value)


def sink_rows(records: list[Any]) -> list[tuple[str, bytes | None, bytes | None, int | None]]:
    """(topic, key, value, timestamp) of each record ``to_sendables`` or ``to_records``
    gave, whether encoded natively in runs or one by one: what the sink receives."""
    rows: list[tuple[str, bytes | None, bytes | None, int | None]] = []
    for rec in records:
        if isinstance(rec, ResultRun):
            keys, values, times = rec.encoded.columns()
            rows += [(rec.topic, k, v, t) for k, v, t in zip(keys, values, times, strict=True)]
        else:
            assert isinstance(rec, OutRecord)
            rows.append((rec.topic, rec.key, rec.value, rec.timestamp_ms))
    return rows
