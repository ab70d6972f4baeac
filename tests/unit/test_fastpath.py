"""The batch fast path (``core/fastpath.py``) against the general path and the
brute-force reference: the same random streams, bad records included, through a
task with the fast path and one without give the same results, dead letters, late
records and failed folds, byte-identical checkpoints, and checkpoints that restore
in the other path."""

from __future__ import annotations

import math
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamremat import RAW, Count, Hopping, Max, Mean, Min, Operator, Sum, Tumbling
from streamremat.core import fastpath
from streamremat.core.records import Record
from streamremat.core.task import Task
from tests.unit.fastpath_support import (
    SHAPES,
    T0,
    WINDOWS,
    keys,
    make_op,
    run_task,
    streams,
)
from tests.unit.reference import RefWindow, run_reference


def test_lone_count_and_sum_keep_their_own_loop() -> None:
    """In Python a lone Count or Sum keeps the general path's loop (as fast); the
    native fold takes them, and a batch it declines goes to that loop."""
    for agg in (Count(), Sum("x")):
        fast = Task(make_op(Tumbling(100), agg)).fast
        if fastpath.native_module is None or not fastpath.native_enabled:
            assert fast is None
        else:
            assert fast is not None and fast.native is not None
            big = [Record(b'"a"', b'{"x": 18446744073709551615}', T0, 0)]
            assert fast.fold(big) is None  # past i64: declined, nothing left to try


def _pair(op: Operator) -> tuple[Task, Task]:
    fast, pure = Task(op), Task(op)
    pure.fast = None
    assert fast.fast is not None, "the shape should take the fast path"
    return fast, pure


@pytest.mark.parametrize("window", sorted(WINDOWS))
@pytest.mark.parametrize("shape", sorted(SHAPES))
@settings(max_examples=25, deadline=None)
@given(stream=streams(), cut=st.integers(1, 25), snaps=st.sets(st.integers(0, 10)))
def test_fast_path_equals_general_path(
    window: str, shape: str, stream: list[Record], cut: int, snaps: set[int],
) -> None:
    op = make_op(WINDOWS[window](), SHAPES[shape]())
    fast, pure = _pair(op)
    batches = [stream[i : i + cut] for i in range(0, len(stream), cut)]
    assert run_task(fast, batches, snaps) == run_task(pure, batches, snaps)


@pytest.mark.parametrize("window", sorted(WINDOWS))
@settings(max_examples=25, deadline=None)
@given(stream=streams(), cut=st.integers(1, 25))
def test_event_time_from_a_field(window: str, stream: list[Record], cut: int) -> None:
    op = make_op(WINDOWS[window](), {"n": Count(), "s": Sum("x")}, timestamp_by="ts")
    fast, pure = _pair(op)
    batches = [stream[i : i + cut] for i in range(0, len(stream), cut)]
    assert run_task(fast, batches, set()) == run_task(pure, batches, set())


@settings(max_examples=25, deadline=None)
@given(stream=streams(), cut=st.integers(1, 25))
def test_count_of_raw_values(stream: list[Record], cut: int) -> None:
    fast, pure = _pair(make_op(Tumbling(100), {"n": Count()}, value_serde=RAW))
    batches = [stream[i : i + cut] for i in range(0, len(stream), cut)]
    assert run_task(fast, batches, set()) == run_task(pure, batches, set())


strs_or_numbers = st.one_of(st.integers(-5, 5), st.text("ab", min_size=1, max_size=2))


@settings(max_examples=60, deadline=None)
@given(xs=st.lists(st.tuples(keys, st.integers(0, 300), strs_or_numbers), max_size=60),
       cut=st.integers(1, 10), hopping=st.booleans())
def test_min_of_strings_then_numbers_fails_the_same_records(
    xs: list[Any], cut: int, hopping: bool,
) -> None:
    """A number compared with a string accumulator raises in the fold: the record goes
    to the dead letters and leaves stream time, as in the general path."""
    window = Hopping(100, 50) if hopping else Tumbling(100)
    fast, pure = _pair(make_op(window, {"n": Count(), "lo": Min("x"), "hi": Max("x")}))
    stream = [Record(k, orjson.dumps({"x": x}), T0 + t, i) for i, (k, t, x) in enumerate(xs)]
    batches = [stream[i : i + cut] for i in range(0, len(stream), cut)]
    assert run_task(fast, batches, {0, 1}) == run_task(pure, batches, {0, 1})


@pytest.mark.parametrize("window", sorted(WINDOWS))
@settings(max_examples=25, deadline=None)
@given(stream=streams(), cut=st.integers(1, 25), at=st.integers(0, 80))
def test_a_checkpoint_restores_in_the_other_path(
    window: str, stream: list[Record], cut: int, at: int,
) -> None:
    op = make_op(WINDOWS[window](), SHAPES["all"]())
    first, rest = stream[:at], stream[at:]
    for writer_fast in (True, False):
        writer = Task(op)
        if not writer_fast:
            writer.fast = None
        for i in range(0, len(first), cut):
            writer.process(first[i : i + cut])
        payload = writer.snapshot(full=True)
        a, b = Task.restore(op, 0, [payload]), Task.restore(op, 0, [payload])
        b.fast = None
        batches = [rest[i : i + cut] for i in range(0, len(rest), cut)]
        assert run_task(a, batches, set()) == run_task(b, batches, set())


@pytest.mark.parametrize("window", sorted(WINDOWS))
@settings(max_examples=40, deadline=None)
@given(stream=streams(bad=False), cut=st.integers(1, 40))
def test_clean_streams_take_the_fast_path_and_match_the_reference(
    window: str, stream: list[Record], cut: int,
) -> None:
    w = WINDOWS[window]()
    task = Task(make_op(w, {"n": Count(), "total": Sum("x"), "avg": Mean("x")}))
    assert task.fast is not None
    fold, taken = task.fast.fold, []

    def spy(batch: Any, decoded: Any = None) -> Any:
        folded = fold(batch, decoded)
        taken.append(folded is not None)
        return folded

    task.fast.fold = spy  # type: ignore[method-assign]
    emitted, late = [], []
    for i in range(0, len(stream), cut):
        out = task.process(stream[i : i + cut])
        emitted += [(r.key, r.start_ms, r.end_ms, repr(r.value)) for r in out.results]
        late += [lr.record.offset for lr in out.late]
    ref_window = RefWindow(window, 100, getattr(w, "advance_ms", 0), w.grace_ms)
    assert all(taken)
    items = [(r.key, r.timestamp, orjson.loads(r.value or b"")["x"]) for r in stream]

    def result(xs: list[Any]) -> str:
        total = 0
        for x in xs:  # left to right, as a stream folds
            total += x
        return repr({"n": len(xs), "total": total, "avg": total / len(xs)})

    ref = run_reference(ref_window, items, result)  # type: ignore[arg-type]
    # the reference emits at the record that closes a window, the task at batch end:
    # the same windows in the same order
    assert emitted == [(k, s, e, v) for k, s, e, v in ref.emissions]
    assert late == ref.late
    assert all(math.isfinite(float(x)) for _, _, x in items)


@pytest.mark.parametrize("window", sorted(WINDOWS))
def test_a_window_starting_with_negative_zero(window: str) -> None:
    """``Sum``'s and ``Mean``'s accumulators start at int 0, and 0 + -0.0 is 0.0."""
    fields = [Record(b'"a"', b'{"x": -0.0}', T0, 0), Record(b'"b"', b'{"x": 2}', T0 + 900, 1)]
    numbers = [Record(b'"a"', b"-0.0", T0, 0), Record(b'"b"', b"2", T0 + 900, 1)]
    for shape, recs in (("sum_whole_value", numbers), ("mean", fields), ("all", fields)):
        fast, pure = _pair(make_op(WINDOWS[window](), SHAPES[shape]()))
        split = [recs[:1], recs[1:]]
        assert run_task(fast, split, {0}) == run_task(pure, split, {0})
        fast = Task(make_op(WINDOWS[window](), SHAPES[shape]()))
        [first] = [r.value for r in fast.process(recs).results if r.key == b'"a"'][:1]
        sums = [first[k] for k in ("s", "avg") if k in first] if isinstance(first, dict) \
            else [first]
        assert [repr(x) for x in sums] == ["0.0"] * len(sums)  # Min and Max keep -0.0
