"""Recovery with a rematerialization plan (DESIGN §9) against the failure-free run
and the brute-force reference.

For random streams, window kinds and aggregations (Collect, Quantiles, sessions
among them), checkpoints with random store/recompute plans and random crashes:
the TestDriver's output, late records and final state (full snapshot, bytes)
equal the failure-free run's, which equals ``reference.run_reference``.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.strategies import DataObject

from streamremat import JSON, Operator
from streamremat.testing import TestDriver
from streamremat.tuning.remat import WindowCandidate
from tests.unit.reference import run_reference
from tests.unit.test_equivalence import AGGREGATIONS, KINDS, inputs, windows

EXAMPLES = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

#: The aggregations whose state grows with the data, and two that don't.
AGGS = ("collect", "quantiles", "median", "distinct", "dict", "count", "sum", "topk_weighted")

FAULTS = st.lists(st.sampled_from(["checkpoint", "checkpoint", "crash", "recover"]),
                  max_size=3)


def _operator(window: Any, agg_name: str) -> Operator:
    return Operator(name="op", source="in", sink="out", window=window,
                    aggregate=AGGREGATIONS[agg_name][0]())


def _drive(
    op: Operator, records: list[tuple[str, int, dict[str, Any]]],
    faults: list[list[str]] | None = None, rng: random.Random | None = None,
) -> tuple[TestDriver, int]:
    """Run ``records`` through a driver with ``faults[i]`` before record i; each
    checkpoint recomputes a random subset of the open groups. Returns the driver
    and how many recoveries had recompute groups to rebuild."""
    driver = TestDriver(op)
    chosen: list[int] = []

    def choose(_op: str, _p: int, groups: list[WindowCandidate]) -> list[int]:
        assert rng is not None
        picked = [g.group for g in groups if rng.random() < 0.7]
        chosen.append(len(picked))
        return picked

    crashed, rebuilt = False, 0
    for i in range(len(records) + 1):
        for fault in faults[i] if faults else ():
            if fault == "checkpoint" and not crashed:
                driver.checkpoint(choose=choose)
            elif fault == "crash" and not crashed:
                driver.crash()
                crashed = True
            elif fault == "recover" and crashed:
                driver.recover()
                crashed = False
                rebuilt += bool(chosen and chosen[-1])
        if i < len(records):
            key, t, value = records[i]
            driver.send(key, value, timestamp_ms=t)
    if crashed:
        driver.recover()
    return driver, rebuilt


def _late(driver: TestDriver) -> list[int]:
    return [JSON.loads(x.value)["i"] for x in driver.late()]


@pytest.mark.parametrize("kind", KINDS)
@EXAMPLES
@given(data=st.data())
def test_recovery_with_random_plans_equals_failure_free_run(kind: str, data: DataObject) -> None:
    window, ref_window = data.draw(windows(kind), label="window")
    agg_name = data.draw(st.sampled_from(AGGS), label="aggregation")
    records = data.draw(inputs(), label="records")
    faults = data.draw(
        st.lists(FAULTS, min_size=len(records) + 1, max_size=len(records) + 1), label="faults"
    )
    rng = random.Random(data.draw(st.integers(0, 2**32), label="seed"))
    op = _operator(window, agg_name)
    clean, _ = _drive(op, records)
    faulty, _ = _drive(op, records, faults, rng)

    ref = run_reference(ref_window, [(JSON.dumps(k), t, v) for k, t, v in records],
                        AGGREGATIONS[agg_name][1])
    got = [(JSON.dumps(e.key), e.start_ms, e.end_ms, e.value) for e in clean.emitted()]
    assert got == ref.emissions
    assert _late(clean) == ref.late
    assert faulty.emitted() == clean.emitted()
    assert _late(faulty) == _late(clean)
    assert faulty.task().snapshot(full=True) == clean.task().snapshot(full=True)


def _recovery_counts(kind: str, seeds: range, make: Callable[[int], Any]) -> int:
    """How many of the seeded runs rebuilt at least one recompute group."""
    total = 0
    for seed in seeds:
        rng = random.Random(seed)
        records, faults = make(seed)
        _, rebuilt = _drive(_operator(*_window_and_agg(kind)), records, faults, rng)
        total += rebuilt
    return total


def _window_and_agg(kind: str) -> tuple[Any, str]:
    from streamremat import Hopping, Session, Sliding, Tumbling

    window = {"tumbling": Tumbling(20), "hopping": Hopping(20, 5), "sliding": Sliding(10),
              "session": Session(8)}[kind]
    return window, "collect"


@pytest.mark.parametrize("kind", ["tumbling", "hopping", "session"])
def test_random_plans_do_rebuild_groups(kind: str) -> None:
    """The property above is not vacuous: its kind of run recovers with recompute
    groups to rebuild (a stream advancing in time, checkpoint then crash)."""

    def make(seed: int) -> tuple[list[tuple[str, int, dict[str, Any]]], list[list[str]]]:
        rng = random.Random(seed)
        records = [(rng.choice("ab"), i * 3, {"i": i, "v": i % 7, "s": "x"}) for i in range(40)]
        faults: list[list[str]] = [[] for _ in range(41)]
        for at in rng.sample(range(1, 40), 4):
            faults[at] = ["checkpoint", "crash", "recover"]
        return records, faults

    assert _recovery_counts(kind, range(5), make) >= 5
