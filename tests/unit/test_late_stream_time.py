"""A late record carries the stream time it was judged at (DESIGN §4: the running
maximum of the event times up to it), whatever the batch it came in.

Before, ``Task.process`` gave every late record of a batch the stream time at the
batch's end: the same records in other batches gave late records with other
bytes (``streamremat.late.reason`` names that stream time), so the copies an
at-least-once restart of the faust integration writes differed (seen in
``tests/fault/test_faust.py::test_faust_worker_kill9_three_times`` under a busy
loop). The expectation here is computed from the timestamps alone.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from streamremat import Count, Operator, Sum, Tumbling
from streamremat.core import fastpath
from streamremat.core.records import Record
from streamremat.core.task import Task

SIZE = 100
N = 300


def _timestamps() -> list[int]:
    # Mostly in order; every seventh record 250 ms back: late once stream time is past
    # its window's end.
    return [1_000 + i * 10 - (250 if i % 7 == 3 else 0) for i in range(N)]


def _records(time_field: bool) -> list[Record]:
    out = []
    for i, t in enumerate(_timestamps()):
        value: dict[str, Any] = {"x": i % 13}
        if time_field:
            value["ts"] = t
        # With a time field, the record's own timestamp says nothing (all alike).
        out.append(Record(b'"k%d"' % (i % 5), orjson.dumps(value), 0 if time_field else t, i))
    return out


def _expected() -> list[tuple[int, int, int]]:
    """(offset, event time, stream time at it) of every late record."""
    out, st = [], -1
    for i, t in enumerate(_timestamps()):
        st = max(st, t)
        if t - t % SIZE + SIZE <= st:
            out.append((i, t, st))
    return out


@pytest.mark.parametrize("path", ["native", "python fast path", "general path"])
@pytest.mark.parametrize("time_field", [False, True], ids=["record time", "time field"])
@pytest.mark.parametrize("batch", [1, 7, 64, N])
def test_a_late_record_carries_the_stream_time_at_it(
    path: str, time_field: bool, batch: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    if path == "native" and (fastpath.native_module is None or not fastpath.native_enabled):
        pytest.skip("the native module is not built here or STREAMREMAT_NATIVE=0 "
                    "(tests/unit/test_native.py says which)")
    if path != "native":
        monkeypatch.setattr(fastpath, "native_enabled", False)
    op = Operator(name="late", source="in", sink="out", window=Tumbling(SIZE),
                  aggregate={"n": Count(), "total": Sum("x")},
                  timestamp_by="ts" if time_field else None)
    task = Task(op)
    if path == "general path":
        task.fast = None
    else:
        assert task.fast is not None, "the shape should take the fast path"
        assert (task.fast.native is not None) == (path == "native")
    records = _records(time_field)
    late = []
    for i in range(0, N, batch):
        out = task.process(records[i:i + batch])
        late += [(x.record.offset, x.timestamp_ms, x.stream_time_ms) for x in out.late]
    expected = _expected()
    assert len(expected) > 20
    assert late == expected
