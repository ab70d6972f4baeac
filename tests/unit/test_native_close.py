"""A closing of the native table read in key order natively (``native/src/closed.rs``,
``core/native_state.py::_sorted_slices``) against the Python close of the same
table (``STREAMREMAT_NATIVE_CLOSE=0``: keys sorted, accumulators built in Python),
the Python state and the general path: the same steps (empty ones included),
the same sink bytes per slice, dead letters, late records, failed windows and
checkpoint bytes; the encoded results decode to the brute-force reference's."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamremat import Count, Max, Mean, Min, Sum, Tumbling
from streamremat.core import closing, fastpath, native_state
from streamremat.core.closing import ClosedWindows, FixedSlice
from streamremat.core.records import BatchOutput, Record
from streamremat.core.task import Task
from streamremat.runtime.outputs import to_sendables
from tests.unit.fastpath_support import T0, WINDOWS, make_op, numbers, sink_rows, streams
from tests.unit.reference import RefWindow, run_reference
from tests.unit.test_native_state import TABLE_SHAPES

needs_native_close = pytest.mark.skipif(
    fastpath.native_module is None or not fastpath.native_enabled
    or native_state._take_sorted is None,
    reason="streamremat_native is not built or STREAMREMAT_NATIVE=0: no native table",
)
#: the table closed natively; the table closed in Python; the Python state; the general path
ARMS = ("native_close", "python_close", "python", "general")


def _build(make: Callable[[], Task], arm: str) -> Task:
    saved = fastpath.enabled, fastpath.native_enabled, fastpath.native_state_enabled
    fastpath.enabled = arm != "general"
    fastpath.native_enabled = fastpath.native_state_enabled = arm.endswith("_close")
    try:
        return make()
    finally:
        fastpath.enabled, fastpath.native_enabled, fastpath.native_state_enabled = saved


def _run(op: Any, arm: str, batches: list[list[Record]], monkeypatch: pytest.MonkeyPatch
         ) -> tuple[list[Any], int]:
    """Everything observable per batch, the closing taken step by step as the
    emitter does; and how many slices came from the table's rows."""
    monkeypatch.setattr(native_state, "native_close", arm == "native_close")
    task = _build(lambda: Task(op), arm)
    seen: list[Any] = []
    native_slices = 0
    for i, batch in enumerate(batches):
        out = task.process(batch)
        steps = []
        closed = out.results
        assert isinstance(closed, ClosedWindows)
        while (piece := closed.next_slice()) is not None:
            if type(piece) is FixedSlice and piece.rows is not None:
                native_slices += 1
            part = BatchOutput(results=piece)
            rows = sink_rows(to_sendables(op, 0, part))  # first: ``len`` builds results
            steps.append((len(piece), rows,
                          [(f.key, f.start_ms, f.stage, f.reason) for f in part.failed]))
        rest = BatchOutput(dead_letters=out.dead_letters, late=out.late, failed=out.failed)
        seen.append((steps, sink_rows(to_sendables(op, 0, rest)),
                     task.snapshot(full=i % 2 == 0)))
    seen.append(task.snapshot(full=True))
    return seen, native_slices


many_keys = st.integers(0, 40).map(lambda k: json.dumps(f"k{k}").encode())


@st.composite
def many_key_streams(draw: Callable[..., Any]) -> list[Record]:
    """Clean records over up to 41 keys, so that a window holds many slices' keys."""
    return [Record(draw(many_keys), json.dumps({"x": draw(numbers)}).encode(),
                   T0 + draw(st.integers(0, 600)), i) for i in range(draw(st.integers(0, 150)))]


@needs_native_close
@pytest.mark.parametrize("window", sorted(WINDOWS))
@pytest.mark.parametrize("shape", sorted(TABLE_SHAPES))
@settings(max_examples=15, deadline=None)
@given(mixed=streams(), wide=many_key_streams(), cut=st.integers(1, 60),
       size=st.integers(1, 5))
def test_native_close_equals_the_python_close_and_the_other_paths(
        window: str, shape: str, mixed: list[Record], wide: list[Record], cut: int, size: int,
        ) -> None:
    op = make_op(WINDOWS[window](), TABLE_SHAPES[shape]())
    recs = [Record(r.key, r.value, r.timestamp, i) for i, r in enumerate(wide + mixed)]
    batches = [recs[i : i + cut] for i in range(0, len(recs), cut)]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(closing, "RESULT_SLICE", size)
        runs = {arm: _run(op, arm, batches, patch) for arm in ARMS}
    native, _ = runs["native_close"]
    for arm in ARMS[1:]:
        assert runs[arm][0] == native, arm
    assert runs["python_close"][1] == 0


@needs_native_close
@pytest.mark.parametrize("window", sorted(WINDOWS))
@settings(max_examples=30, deadline=None)
@given(xs=st.lists(st.tuples(many_keys, st.integers(0, 500), st.integers(-10**6, 10**6)),
                   max_size=200),
       cut=st.integers(1, 80), size=st.integers(1, 6))
def test_native_close_encodes_the_references_results(
        window: str, xs: list[Any], cut: int, size: int) -> None:
    w = WINDOWS[window]()
    aggregate = {"n": Count(), "s": Sum("x"), "lo": Min("x"), "hi": Max("x"), "avg": Mean("x")}
    op = make_op(w, aggregate)
    task = _build(lambda: Task(op), "native_close")
    stream = [Record(k, json.dumps({"x": x}).encode(), T0 + t, i)
              for i, (k, t, x) in enumerate(xs)]
    emitted, native_slices = [], 0
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(closing, "RESULT_SLICE", size)
        patch.setattr(native_state, "native_close", True)
        for lo in range(0, len(stream), cut):
            closed = task.process(stream[lo : lo + cut]).results
            assert isinstance(closed, ClosedWindows)
            while (piece := closed.next_slice()) is not None:
                rows = sink_rows(to_sendables(op, 0, BatchOutput(results=piece)))
                # encoded from the table's rows, no result built
                native_slices += (type(piece) is FixedSlice and piece.rows is not None
                                  and piece._built is None)
                assert len(rows) == len(piece) <= size
                for _, key, value, ts in rows:
                    doc = orjson.loads(value or b"")
                    assert ts == doc["end_ms"]
                    emitted.append((key, doc["start_ms"], doc["end_ms"], doc["value"]))

    def result(vs: list[Any]) -> dict[str, Any]:
        return {"avg": sum(vs) / len(vs), "hi": max(vs), "lo": min(vs), "n": len(vs),
                "s": sum(vs)}

    ref = run_reference(RefWindow(window, 100, getattr(w, "advance_ms", 0), w.grace_ms),
                        [(r.key, r.timestamp, orjson.loads(r.value or b"")["x"])
                         for r in stream], result)  # type: ignore[arg-type]
    assert emitted == ref.emissions
    assert native_slices > 0 or not emitted


@needs_native_close
def test_steps_are_in_orders_steps_over_many_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """5,000 keys in slices of 97: one empty step per sorted run, then the merge's
    slices, in ``sorted`` order (``closing.in_order``'s steps exactly)."""
    monkeypatch.setattr(closing, "RESULT_SLICE", 97)
    op = make_op(Tumbling(100), {"n": Count(), "s": Sum("x")})
    keys = [b"k%d" % (i * 7919 % 5000) for i in range(5000)]
    recs = [Record(k, b'{"x": %d}' % i, T0 + i % 50, i) for i, k in enumerate(keys)]
    recs.append(Record(b"z", b'{"x": 1}', T0 + 1000, 5000))
    task = _build(lambda: Task(op), "native_close")
    closed = task.process(recs).results
    assert isinstance(closed, ClosedWindows)
    steps = []
    while (piece := closed.next_slice()) is not None:
        steps.append(piece.keys if type(piece) is FixedSlice else list(piece))
    want = list(closing.in_order(iter(keys), len(keys), slice_size=97))
    assert [len(s) for s in steps] == [len(s) for s in want]
    assert steps == want and [k for s in steps for k in s] == sorted(keys)


@needs_native_close
def test_a_mean_it_cannot_divide_exactly_is_built_in_python(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A Mean whose sum is past 53 bits (Python's true division rounds once): the
    slice's results are built from the rows and go the Python way, as before."""
    op = make_op(Tumbling(100), Mean("x"))
    recs = [Record(b'"a"', b'{"x": %d}' % (2**60 + 1), T0, 0),
            Record(b'"a"', b'{"x": 2}', T0 + 1, 1),
            Record(b'"b"', b'{"x": 3}', T0 + 2, 2),
            Record(b'"c"', b'{"x": 1}', T0 + 500, 3)]
    got = {}
    for arm in ("native_close", "python"):
        monkeypatch.setattr(native_state, "native_close", arm == "native_close")
        task = _build(lambda: Task(op), arm)
        closed = task.process(recs).results
        assert isinstance(closed, ClosedWindows)
        pieces = []
        while (piece := closed.next_slice()) is not None:
            pieces.append(piece)
        got[arm] = [sink_rows(to_sendables(op, 0, BatchOutput(results=p))) for p in pieces]
        if arm == "native_close":
            assert type(pieces[0]) is FixedSlice and pieces[0].rows is not None
    assert got["native_close"] == got["python"]
    assert got["python"][0][0][2] == orjson.dumps(
        {"end_ms": T0 // 100 * 100 + 100, "start_ms": T0 // 100 * 100,
         "value": (2**60 + 3) / 2})
