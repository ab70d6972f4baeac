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
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.strategies import DataObject

from streamremat import JSON, Operator
from streamremat.core.records import Record
from streamremat.core.task import Task
from streamremat.testing import TestDriver
from tests.unit.equivalence_support import (
    AGGREGATIONS,
    EXAMPLES,
    FAULTS,
    KINDS,
    inputs,
    run_with_faults,
    windows,
)
from tests.unit.reference import run_reference


def _operator(window: Any, agg_name: str) -> Operator:
    return Operator(
        name="op",
        source="in",
        sink="out",
        window=window,
        aggregate=AGGREGATIONS[agg_name][0](),
    )


def _drive(op: Operator, records: list[tuple[str, int, dict[str, Any]]],
           faults: Any = None) -> TestDriver:
    """Send every record through a TestDriver, with ``faults`` (see ``run_with_faults``)."""
    driver = TestDriver(op)

    def send(i: int) -> None:
        key, t, value = records[i]
        driver.send(key, value, timestamp_ms=t)

    run_with_faults(driver, len(records), send, faults, lambda i: driver.checkpoint())
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
