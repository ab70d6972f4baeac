"""Property tests: re-keying through the repartition topic in the TestDriver.

For random streams of keyless records spread over N source partitions, whose key
comes from the value (``key_by``), with checkpoints, crashes and recoveries at
random points:

(a) the repartition topic holds every valid source record exactly once, keyed by
    its new key, on the partition Kafka's partitioner gives that key, with the
    event time as timestamp;
(b) each repartition partition's results equal the brute-force reference over
    that partition's records in their order (one task per key: a key's results
    come from one partition only);
(c) with a grace covering the whole stream and one closing record per key, each
    key's results equal a failure-free single-partition run over that key's
    records alone.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.strategies import DataObject

from streamremat import JSON, App, Operator
from streamremat.core.topology import repartition_topic
from streamremat.runtime.outputs import partition_for
from streamremat.testing import Emission, TestDriver
from tests.unit.equivalence_support import (
    AGGREGATIONS,
    FAULTS,
    KINDS,
    inputs,
    run_with_faults,
    windows,
)
from tests.unit.equivalence_support import EXAMPLES as BASE
from tests.unit.reference import run_reference

#: fewer than the single-task properties: each example runs up to four drivers
EXAMPLES = settings(BASE, max_examples=120)

ORDER_FREE = tuple(a for a in AGGREGATIONS if a not in ("collect", "dict"))
Sent = tuple[int, int, dict[str, Any]]  # (source partition, timestamp, value)


def _operator(window: Any, agg_name: str) -> Operator:
    return Operator(name="rk", source="in", sink="out", window=window,
                    aggregate=AGGREGATIONS[agg_name][0](), key_by=lambda v: v["k"])


def _drive(app: App, partitions: int, sent: list[Sent], faults: Any = None) -> TestDriver:
    driver = TestDriver(app, partitions=partitions)

    def send(i: int) -> None:
        p, t, value = sent[i]
        driver.send(None, value, timestamp_ms=t, partition=p)

    def checkpoint(i: int) -> None:
        driver.checkpoint(partition=None if i % 2 else i % partitions)

    run_with_faults(driver, len(sent), send, faults, checkpoint)
    return driver


@st.composite
def scenario(
    draw: Callable[..., Any], kind: str, aggregations: tuple[str, ...] = tuple(AGGREGATIONS)
) -> tuple[Any, ...]:
    window, ref_window = draw(windows(kind), label="window")
    agg_name = draw(st.sampled_from(sorted(aggregations)), label="aggregation")
    partitions = draw(st.integers(1, 4), label="partitions")
    records = draw(inputs(), label="records")
    sent = [(draw(st.integers(0, partitions - 1)), t, {**v, "k": k}) for k, t, v in records]
    faults = draw(st.lists(FAULTS, min_size=len(sent) + 1, max_size=len(sent) + 1))
    return window, ref_window, agg_name, partitions, sent, faults


def _by_key(emissions: list[Emission]) -> dict[Any, list[tuple[int, int, Any]]]:
    out: dict[Any, list[tuple[int, int, Any]]] = {}
    for e in emissions:
        out.setdefault(e.key, []).append((e.start_ms, e.end_ms, e.value))
    return out


@pytest.mark.parametrize("kind", KINDS)
@EXAMPLES
@given(data=st.data())
def test_rekeyed_run_equals_reference_per_repartition_partition(
    kind: str, data: DataObject
) -> None:
    window, ref_window, agg_name, n, sent, faults = data.draw(scenario(kind))
    app = App("eq", [_operator(window, agg_name)])
    driver = _drive(app, n, sent, faults)
    topic = repartition_topic("eq", "rk")

    # (a) every record forwarded exactly once, to its key's partition.
    forwarded: Counter[tuple[int, bytes | None, int | None, bytes | None]] = Counter()
    for p in range(n):
        for r in driver.topic_log(topic, p):
            forwarded[(p, r.key, r.timestamp, r.value)] += 1
    expected = Counter(
        (partition_for(JSON.dumps(v["k"]), n), JSON.dumps(v["k"]), t, JSON.dumps(v))
        for _, t, v in sent
    )
    assert forwarded == expected

    # (b) per repartition partition, the reference over its records in their order.
    result = AGGREGATIONS[agg_name][1]
    for p in range(n):
        log = driver.topic_log(topic, p)
        items = [(r.key or b"", r.timestamp or 0, JSON.loads(r.value or b"")) for r in log]
        ref = run_reference(ref_window, items, result)
        got = [(JSON.dumps(e.key), e.start_ms, e.end_ms, e.value)
               for e in driver.emitted() if e.partition == p]
        assert got == ref.emissions
        late = sorted(JSON.loads(x.value or b"")["i"] for x in driver.late() if x.partition == p)
        assert late == sorted(JSON.loads(log[i].value or b"")["i"] for i in ref.late)
    assert all(e.partition == partition_for(JSON.dumps(e.key), n) for e in driver.emitted())


@pytest.mark.parametrize("kind", KINDS)
@EXAMPLES
@given(data=st.data())
def test_rekeyed_run_equals_single_partition_run_per_key(kind: str, data: DataObject) -> None:
    # A recovery may interleave the source partitions differently from the live run
    # (as a real worker may): only aggregations that ignore arrival order compare.
    window, _, agg_name, n, sent, faults = data.draw(scenario(kind, ORDER_FREE))
    # A grace covering the whole stream (no record is late on any partition, whatever
    # the interleaving), then one closer per key far ahead, sent last.
    window = type(window)(**{**_params(window), "grace_ms": 10_000})
    keys = sorted({v["k"] for _, _, v in sent})
    closers = [(i % n, 1_000_000, {"i": -1, "v": 0, "s": "x", "k": k})
               for i, k in enumerate(keys)]
    op = _operator(window, agg_name)
    # Recovered before the closers: a recovery runs each source partition's backlog
    # in turn, and a closer overtaking another partition's data would make it late.
    faults = [*faults[:-1], ["recover"], *[[]] * len(closers)]
    driver = _drive(App("eq", [op]), n, sent + closers, faults)
    got = _by_key(driver.emitted())
    for k in keys:
        mine = [(0, t, v) for _, t, v in sent + closers if v["k"] == k]
        alone = _drive(App("eq", [op]), 1, mine)
        assert sorted(got.get(k, []), key=repr) == sorted(_by_key(alone.emitted())[k], key=repr)
    assert set(got) <= set(keys)


def _params(window: Any) -> dict[str, Any]:
    names = {"Tumbling": ("size_ms",), "Hopping": ("size_ms", "advance_ms"),
             "Sliding": ("size_ms",), "Session": ("gap_ms",)}[type(window).__name__]
    return {name: getattr(window, name) for name in names}
