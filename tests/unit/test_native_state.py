"""The native state table (``core/native_state.py``, ``native/src/table.rs``) against
the Python state: the same random streams (bad and late records, tumbling and
hopping, event time from a field, full and delta checkpoints, recompute plans,
restores, closings taken in slices) through the table, the native fold into the
Python dicts, the Python fast path and the general path give the same results and
byte-identical checkpoints; checkpoints restore across them; the results are the
brute-force reference's; values the table can't hold convert it back losslessly;
its encode and decode let the GIL go."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamremat import Count, Hopping, Max, Min, Sum, Tumbling
from streamremat.core import fastpath
from streamremat.core.native_state import NativeWindowState
from streamremat.core.records import Record
from streamremat.core.recovery import PartitionTasks
from streamremat.core.task import Task
from tests.unit.fastpath_support import SHAPES, T0, WINDOWS, canon, keys, make_op, run_task, streams
from tests.unit.reference import RefWindow, run_reference

needs_native = pytest.mark.skipif(
    fastpath.native_module is None or not fastpath.native_enabled,
    reason="streamremat_native is not built or STREAMREMAT_NATIVE=0: no native table",
)
#: the table; the native fold into the dicts; the Python fast path; the general path
MODES = ("table", "dicts", "python", "general")
TABLE_SHAPES: dict[str, Any] = {**SHAPES, "lone_count": Count, "lone_sum": lambda: Sum("x")}


def _build(make: Callable[[], Task], mode: str) -> Task:
    saved = fastpath.enabled, fastpath.native_enabled, fastpath.native_state_enabled
    fastpath.enabled = mode != "general"
    fastpath.native_enabled = mode in ("table", "dicts")
    fastpath.native_state_enabled = mode == "table"
    try:
        task = make()
    finally:
        fastpath.enabled, fastpath.native_enabled, fastpath.native_state_enabled = saved
    assert isinstance(task.state, NativeWindowState) == (mode == "table")
    return task


def _batches(recs: list[Record], cut: int) -> list[list[Record]]:
    return [recs[i : i + cut] for i in range(0, len(recs), cut)]


big_numbers = st.one_of(
    st.integers(-50, 50),
    st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False),
    st.sampled_from([2**62, -(2**62), 2**63 - 1, 2**63, 0.5, -0.0, 1e16]),
)


@st.composite
def big_streams(draw: Callable[..., Any]) -> list[Record]:
    """Clean records whose sums may leave i64 (the table converts itself back)."""
    return [Record(draw(keys), json.dumps({"x": draw(big_numbers)}).encode(),
                   T0 + draw(st.integers(0, 400)), i)
            for i in range(draw(st.integers(0, 50)))]


@needs_native
@pytest.mark.parametrize("window", sorted(WINDOWS))
@pytest.mark.parametrize("shape", sorted(TABLE_SHAPES))
@settings(max_examples=15, deadline=None)
@given(stream=streams(), big=big_streams(), cut=st.integers(1, 25),
       snaps=st.sets(st.integers(0, 10)))
def test_table_equals_the_python_state_and_general_path(
    window: str, shape: str, stream: list[Record], big: list[Record], cut: int, snaps: set[int],
) -> None:
    op = make_op(WINDOWS[window](), TABLE_SHAPES[shape]())
    for recs in (stream, big):
        seen = [run_task(_build(lambda: Task(op), m), _batches(recs, cut), snaps) for m in MODES]
        assert seen[0] == seen[1] == seen[2] == seen[3]


@needs_native
@pytest.mark.parametrize("window", sorted(WINDOWS))
@settings(max_examples=15, deadline=None)
@given(stream=streams(), cut=st.integers(1, 25))
def test_table_with_event_time_from_a_field(window: str, stream: list[Record], cut: int) -> None:
    op = make_op(WINDOWS[window](), {"n": Count(), "s": Sum("x")}, timestamp_by="ts")
    seen = [run_task(_build(lambda: Task(op), m), _batches(stream, cut), {1, 3}) for m in MODES]
    assert seen[0] == seen[1] == seen[2] == seen[3]


def _recover(op: Any, write: str, restore: str, recs: list[Record], cut: int, at: int,
             crash: int, pick: list[bool]) -> list[Any]:
    """Checkpoint at ``at`` (full, with a recompute plan) in mode ``write``, a delta at
    ``crash``, then restore the chain in mode ``restore`` and replay from the plan's
    start (nothing emitted below ``crash``) to the end, closings taken in slices."""
    task = _build(lambda: Task(op), write)
    seen: list[Any] = []
    for b in _batches(recs[:at], cut):
        task.process(b)
    groups = task.groups()
    seen.append(groups)
    plan = [g[0] for g, p in zip(groups, pick, strict=False) if p]
    chain = [task.snapshot(full=True, recompute=plan)]
    for b in _batches(recs[at:crash], cut):
        task.process(b)
    chain.append(task.snapshot(full=False, recompute=plan))
    seen.append(chain)
    horizon = task.stream_time_ms
    restored = _build(lambda: Task.restore(op, 0, chain), restore)
    seen.append((restored.open_windows(), restored.open_keys(), restored.refold_from))
    tasks = PartitionTasks([restored], crash if crash else None,
                           {} if horizon is None else {op.name: horizon})
    for b in _batches(recs[tasks.start:], cut):
        for _, out in tasks.process(b):
            results = []
            while (piece := out.results.next_slice()) is not None:
                results += [(r.key, r.start_ms, r.end_ms, canon(r.value)) for r in piece]
            seen.append((results, [(d.record.offset, d.reason) for d in out.dead_letters],
                         [(lr.record.offset, lr.timestamp_ms) for lr in out.late]))
    seen.append(restored.groups())
    seen.append(restored.snapshot(full=True))
    return seen


@needs_native
@pytest.mark.parametrize("window", sorted(WINDOWS))
@pytest.mark.parametrize("shape", ["count_sum", "all", "mean"])
@settings(max_examples=15, deadline=None)
@given(stream=streams(), cut=st.integers(1, 20), at=st.integers(0, 80), more=st.integers(0, 40),
       pick=st.lists(st.booleans(), max_size=12))
def test_table_checkpoints_plans_and_restores_across_states(
    window: str, shape: str, stream: list[Record], cut: int, at: int, more: int,
    pick: list[bool],
) -> None:
    """The same chain and state whichever state wrote it and whichever restores it."""
    op = make_op(WINDOWS[window](), SHAPES[shape]())
    at = min(at, len(stream))
    crash = min(at + more, len(stream))
    pairs = [("table", "table"), ("python", "python"), ("general", "general"),
             ("table", "python"), ("python", "table"), ("general", "table")]
    seen = [_recover(op, w, r, stream, cut, at, crash, pick) for w, r in pairs]
    assert all(s == seen[0] for s in seen[1:])


@needs_native
@pytest.mark.parametrize("window", sorted(WINDOWS))
@settings(max_examples=30, deadline=None)
@given(xs=st.lists(st.tuples(keys, st.integers(0, 500), big_numbers), max_size=60),
       cut=st.integers(1, 30))
def test_table_matches_the_reference(window: str, xs: list[Any], cut: int) -> None:
    w = WINDOWS[window]()
    task = _build(lambda: Task(make_op(w, {"n": Count(), "s": Sum("x"), "lo": Min("x"),
                                           "hi": Max("x")})), "table")
    stream = [Record(k, json.dumps({"x": x}).encode(), T0 + t, i)
              for i, (k, t, x) in enumerate(xs)]
    emitted, late = [], []
    for b in _batches(stream, cut):
        out = task.process(b)
        emitted += [(r.key, r.start_ms, r.end_ms, repr(r.value)) for r in out.results]
        late += [lr.record.offset for lr in out.late]

    def result(vs: list[Any]) -> str:
        total: Any = 0
        lo = hi = None
        for x in vs:  # left to right, as a stream folds
            total += x
            lo = x if lo is None or x < lo else lo
            hi = x if hi is None or x > hi else hi
        return repr({"n": len(vs), "s": total, "lo": lo, "hi": hi})

    ref = run_reference(RefWindow(window, 100, getattr(w, "advance_ms", 0), w.grace_ms),
                        [(r.key, r.timestamp, orjson.loads(r.value or b"")["x"])
                         for r in stream], result)  # type: ignore[arg-type]
    assert emitted == [(k, s, e, v) for k, s, e, v in ref.emissions]
    assert late == ref.late


def _fill(op: Any, mode: str, n: int) -> Task:
    task = _build(lambda: Task(op), mode)
    task.process([Record(b"k%06d" % i, b'{"x": %d}' % (i % 97), T0 + i % 50, i)
                  for i in range(n)])
    return task


@needs_native
@pytest.mark.parametrize("window", [Tumbling(100), Hopping(100, 50)])
def test_a_closing_over_many_keys_in_slices(window: Any) -> None:
    """A window over more keys than one slice closes into the same results, in the
    same slices, as the Python state's."""
    op = make_op(window, {"n": Count(), "s": Sum("x")})
    seen = []
    for mode in ("table", "python"):
        task = _fill(op, mode, 5_000)
        assert task.open_windows() == 5_000 * (1 if isinstance(window, Tumbling) else 2)
        out = task.process([Record(b"z", b'{"x": 1}', T0 + 1_000, 5_000)])
        slices = []
        while (piece := out.results.next_slice()) is not None:
            slices.append([(r.key, r.start_ms, r.end_ms, canon(r.value)) for r in piece])
        seen.append(slices)
    assert seen[0] == seen[1] and sum(map(len, seen[0])) >= 5_000


@needs_native
@pytest.mark.parametrize("kind", ["overflow", "string_min", "float_max", "big_int_restore"])
def test_values_the_table_cannot_hold_convert_it_back_losslessly(kind: str) -> None:
    """A sum past i64, a string Min (general path), a float Max to encode, a restored
    int past 64 bits: the table hands everything to the dicts and the run goes on
    exactly as the Python state's."""
    agg: dict[str, Any] = {"n": Count(), "lo": Min("x"), "hi": Max("x")}
    if kind != "string_min":
        agg["s"] = Sum("x")
    op = make_op(Tumbling(100), agg)
    xs: list[Any] = {"overflow": [2**62, 2**62, 2**62, 5], "string_min": [3, "b", "a", 4],
                     "float_max": [1, 2.5, 3, 4], "big_int_restore": [1, 2, 3, 4]}[kind]
    stream = [Record(b"k%d" % (i % 2), json.dumps({"x": x}).encode(), T0 + i, i)
              for i, x in enumerate(xs)]
    if kind == "big_int_restore":  # a chain the Python state wrote with a sum past 64 bits
        py = _build(lambda: Task(op), "general")
        py.process([Record(b"k0", json.dumps({"x": 2**70}).encode(), T0, 0)])
        chain = [py.snapshot(full=True)]
    seen = []
    for mode in ("table", "general"):
        if kind == "big_int_restore":
            task = _build(lambda: Task.restore(op, 0, chain), mode)
        else:
            task = _build(lambda: Task(op), mode)
        seen.append(run_task(task, _batches(stream, 2), {0, 1}))
        if mode == "table":
            assert isinstance(task.state, NativeWindowState) and task.state.table is None
    assert seen[0] == seen[1]


@needs_native
def test_encode_and_restore_let_the_gil_go() -> None:
    """With the switch interval at 10 s, a thread that holds the GIL is never made
    to hand it over: the main thread (sleeping 0.5 ms a turn) turns during the
    table's encode and decode in a worker thread only if they let the GIL go."""
    op = make_op(Hopping(100, 50), {"n": Count(), "s": Sum("x")})
    task = _fill(op, "table", 200_000)
    payload = task.snapshot(full=True)

    def work(fn: Callable[[], Any]) -> int:
        state = task.state
        assert isinstance(state, NativeWindowState) and state.table is not None
        done = threading.Event()
        started = threading.Event()

        def run() -> None:
            started.set()
            for _ in range(3):
                fn()
            done.set()

        turns = 0
        old = sys.getswitchinterval()
        sys.setswitchinterval(10.0)
        try:
            worker = threading.Thread(target=run)
            worker.start()
            started.wait()
            while not done.is_set():
                time.sleep(0.0005)
                turns += 1
            worker.join()
        finally:
            sys.setswitchinterval(old)
        return turns

    table = task.state.table  # type: ignore[attr-defined]
    plan = [(end, 0, 1) for end in table.ends()]
    assert work(lambda: table.encode(b"", plan)) > 10
    body = table.encode(b"", plan)

    def restore() -> None:
        fresh = _build(lambda: Task(op), "table").state
        assert fresh.table.apply(body, 0, 2) is not None  # type: ignore[attr-defined]

    assert work(restore) > 10
    assert Task.restore(op, 0, [payload]).snapshot(full=True) == task.snapshot(full=True)
