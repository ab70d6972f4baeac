"""Property tests: the engine against the brute-force reference, under faults and batching.

For random keys, out-of-order and duplicate timestamps, window parameters and
aggregations, per window type:

(a) a TestDriver run with random checkpoint / crash / recover emits exactly what a
    failure-free run emits (and reports the same late records);
(b) the failure-free run equals ``reference.run_reference`` (same list, same order);
(c) a task restored from (full + deltas) has a byte-identical full snapshot, and
    continues exactly like the original;
(d) any split of the records into ``Task.process`` batches gives the same results,
    late records and full snapshot.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.strategies import DataObject

from streamremat import (
    JSON,
    Collect,
    Count,
    DistinctCount,
    Hopping,
    Max,
    Mean,
    Median,
    Min,
    Operator,
    Quantiles,
    Session,
    Sliding,
    Sum,
    TopK,
    Tumbling,
)
from streamremat.core.records import Record
from streamremat.core.task import Task
from streamremat.testing import TestDriver
from tests.unit.reference import RefWindow, ref_quantile, run_reference

KINDS = ("tumbling", "hopping", "sliding", "session")
KEYS = ("a", "b", "c", "d")
ITEMS = ("x", "y", "z", "w")

EXAMPLES = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# -- aggregations: engine factory and brute-force result from the item values ----------


def _top(items: list[tuple[str, int]], k: int) -> list[tuple[str, int]]:
    weights: Counter[str] = Counter()
    for item, w in items:
        weights[item] += w
    return sorted(weights.items(), key=lambda kv: (-kv[1], kv[0]))[:k]


AGGREGATIONS: dict[str, tuple[Callable[[], Any], Callable[[list[dict[str, Any]]], Any]]] = {
    "count": (Count, len),
    "sum": (lambda: Sum("v"), lambda vs: sum(v["v"] for v in vs)),
    "collect": (lambda: Collect("v"), lambda vs: [v["v"] for v in vs]),
    "min": (lambda: Min("v"), lambda vs: min((v["v"] for v in vs), default=None)),
    "max_str": (lambda: Max("s"), lambda vs: max((v["s"] for v in vs), default=None)),
    "mean": (
        lambda: Mean("v"),
        lambda vs: sum(v["v"] for v in vs) / len(vs) if vs else None,
    ),
    "topk": (lambda: TopK(2, of="s"), lambda vs: _top([(v["s"], 1) for v in vs], 2)),
    "topk_weighted": (
        lambda: TopK(3, of="s", weight="v"),
        lambda vs: _top([(v["s"], v["v"]) for v in vs], 3),
    ),
    "distinct": (lambda: DistinctCount("s"), lambda vs: len({v["s"] for v in vs})),
    "quantiles": (
        lambda: Quantiles("v", [0.0, 0.25, 0.5, 0.99, 1.0]),
        lambda vs: [ref_quantile([v["v"] for v in vs], q) for q in (0.0, 0.25, 0.5, 0.99, 1.0)]
        if vs
        else None,
    ),
    "median": (lambda: Median("v"), lambda vs: ref_quantile([v["v"] for v in vs], 0.5)),
    "dict": (
        lambda: {
            "n": Count(),
            "sum": Sum("v"),
            "lo": Min("v"),
            "all": Collect("s"),
            "top": TopK(2, of="s", weight="v"),
        },
        lambda vs: {
            "n": len(vs),
            "sum": sum(v["v"] for v in vs),
            "lo": min((v["v"] for v in vs), default=None),
            "all": [v["s"] for v in vs],
            "top": _top([(v["s"], v["v"]) for v in vs], 2),
        },
    ),
}


# -- strategies -------------------------------------------------------------------------


@st.composite
def windows(draw: Callable[..., Any], kind: str) -> tuple[Any, RefWindow]:
    grace = draw(st.integers(0, 30) | st.just(0))
    if kind == "tumbling":
        size = draw(st.integers(1, 60))
        return Tumbling(size, grace_ms=grace), RefWindow("tumbling", size, grace=grace)
    if kind == "hopping":
        size = draw(st.integers(1, 60))
        advance = draw(st.integers(1, size))
        return (
            Hopping(size, advance, grace_ms=grace),
            RefWindow("hopping", size, advance, grace),
        )
    if kind == "sliding":
        size = draw(st.integers(1, 40))
        return Sliding(size, grace_ms=grace), RefWindow("sliding", size, grace=grace)
    gap = draw(st.integers(1, 30))
    return Session(gap, grace_ms=grace), RefWindow("session", gap, grace=grace)


@st.composite
def timestamps(draw: Callable[..., Any], n: int) -> list[int]:
    """Mostly advancing with jitter back in time (out of order, duplicates), or uniform."""
    if draw(st.booleans()):
        return draw(st.lists(st.integers(0, 150), min_size=n, max_size=n))
    out, base = [], 0
    for _ in range(n):
        base += draw(st.integers(0, 12))
        back = draw(st.sampled_from([0, 0, 0, 1, 5]) | st.integers(0, 80))
        out.append(max(0, base - back))
    return out


@st.composite
def inputs(draw: Callable[..., Any]) -> list[tuple[str, int, dict[str, Any]]]:
    """(key, timestamp ms, value) records; values carry their index ``i``."""
    n = draw(st.integers(0, 40))
    keys = draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=4, unique=True))
    times = draw(timestamps(n))
    out = []
    for i, t in enumerate(times):
        key = draw(st.sampled_from(keys))
        value = {"i": i, "v": draw(st.integers(-5, 20)), "s": draw(st.sampled_from(ITEMS))}
        out.append((key, t, value))
    return out


def _operator(window: Any, agg_name: str) -> Operator:
    return Operator(
        name="op",
        source="in",
        sink="out",
        window=window,
        aggregate=AGGREGATIONS[agg_name][0](),
    )


def _drive(op: Operator, records: list[tuple[str, int, dict[str, Any]]], faults: Any = None):
    """Send every record through a TestDriver; ``faults[i]`` are the fault operations
    run before record i (and ``faults[len]`` after the last one)."""
    driver = TestDriver(op)
    crashed = False
    for i in range(len(records) + 1):
        for fault in faults[i] if faults else ():
            if fault == "checkpoint" and not crashed:
                driver.checkpoint()
            elif fault == "crash" and not crashed:
                driver.crash()
                crashed = True
            elif fault == "recover" and crashed:
                driver.recover()
                crashed = False
        if i < len(records):
            key, t, value = records[i]
            driver.send(key, value, timestamp_ms=t)
    if crashed:
        driver.recover()
    return driver


def _late_indices(driver: TestDriver) -> list[int]:
    return [JSON.loads(x.value)["i"] for x in driver.late()]


def _source_records(records: list[tuple[str, int, dict[str, Any]]]) -> list[Record]:
    return [
        Record(JSON.dumps(key), JSON.dumps(value), t, offset)
        for offset, (key, t, value) in enumerate(records)
    ]


# -- (b) engine == reference ----------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@EXAMPLES
@given(data=st.data())
def test_failure_free_run_matches_reference(kind: str, data: DataObject) -> None:
    window, ref_window = data.draw(windows(kind), label="window")
    agg_name = data.draw(st.sampled_from(sorted(AGGREGATIONS)), label="aggregation")
    records = data.draw(inputs(), label="records")
    driver = _drive(_operator(window, agg_name), records)

    ref = run_reference(
        ref_window,
        [(JSON.dumps(k), t, v) for k, t, v in records],
        AGGREGATIONS[agg_name][1],
    )
    got = [(JSON.dumps(e.key), e.start_ms, e.end_ms, e.value) for e in driver.emitted()]
    assert got == ref.emissions
    assert _late_indices(driver) == ref.late


# -- (a) faults never change the output -------------------------------------------------------


FAULTS = st.lists(st.sampled_from(["checkpoint", "crash", "recover"]), max_size=3)


@pytest.mark.parametrize("kind", KINDS)
@EXAMPLES
@given(data=st.data())
def test_faults_do_not_change_output(kind: str, data: DataObject) -> None:
    window, _ = data.draw(windows(kind), label="window")
    agg_name = data.draw(st.sampled_from(sorted(AGGREGATIONS)), label="aggregation")
    records = data.draw(inputs(), label="records")
    faults = data.draw(
        st.lists(FAULTS, min_size=len(records) + 1, max_size=len(records) + 1), label="faults"
    )
    op = _operator(window, agg_name)
    clean = _drive(op, records)
    faulty = _drive(op, records, faults)
    assert faulty.emitted() == clean.emitted()
    assert _late_indices(faulty) == _late_indices(clean)
    assert faulty.task().snapshot(full=True) == clean.task().snapshot(full=True)


# -- (c) restore from full + deltas is byte-identical -----------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@EXAMPLES
@given(data=st.data())
def test_restore_is_byte_identical(kind: str, data: DataObject) -> None:
    window, _ = data.draw(windows(kind), label="window")
    agg_name = data.draw(st.sampled_from(sorted(AGGREGATIONS)), label="aggregation")
    records = _source_records(data.draw(inputs(), label="records"))
    snap_after = data.draw(
        st.lists(st.booleans(), min_size=len(records), max_size=len(records)), label="snaps"
    )
    op = _operator(window, agg_name)
    task = Task(op)
    chain: list[bytes] = []
    results = []
    #: (index of the first record after the fork, restored task, its results)
    forks: list[tuple[int, Task, list[Any]]] = []
    for i, record in enumerate(records):
        results.append(task.process([record]).results)
        for _, fork, fork_results in forks:
            fork_results.append(fork.process([record]).results)
        if snap_after[i]:
            chain.append(task.snapshot(full=not chain))
            restored = Task.restore(op, 0, chain)
            assert restored.snapshot(full=True) == task.snapshot(full=True)
            assert restored.next_offset == task.next_offset == i + 1
            assert restored.open_windows() == task.open_windows()
            forks.append((i + 1, restored, []))
    final = task.snapshot(full=True)
    for start, fork, fork_results in forks:
        assert fork_results == results[start:]
        assert fork.snapshot(full=True) == final


# -- (d) batch splits never matter --------------------------------------------------------------


def _run_batches(op: Operator, records: list[Record], cuts: list[int]) -> tuple[Any, ...]:
    task = Task(op)
    results, late = [], []
    bounds = [0, *sorted(set(cuts)), len(records)]
    for lo, hi in itertools.pairwise(bounds):
        out = task.process(records[lo:hi])
        results.extend(out.results)
        late.extend((x.record.offset, x.timestamp_ms) for x in out.late)
    return results, late, task.snapshot(full=True)


@pytest.mark.parametrize("kind", KINDS)
@EXAMPLES
@given(data=st.data())
def test_batch_splits_do_not_matter(kind: str, data: DataObject) -> None:
    window, _ = data.draw(windows(kind), label="window")
    agg_name = data.draw(st.sampled_from(sorted(AGGREGATIONS)), label="aggregation")
    records = _source_records(data.draw(inputs(), label="records"))
    n = len(records)
    cuts = data.draw(st.lists(st.integers(0, n), max_size=8), label="cuts")
    op = _operator(window, agg_name)
    one_by_one = _run_batches(op, records, list(range(n)))
    results, _, snapshot = _run_batches(op, records, cuts)
    assert results == one_by_one[0]
    assert snapshot == one_by_one[2]
    whole = _run_batches(op, records, [])
    assert whole[0] == one_by_one[0]
    assert whole[2] == one_by_one[2]
