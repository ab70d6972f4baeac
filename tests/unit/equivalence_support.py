"""Hypothesis strategies and fault driving shared by the equivalence properties
(``test_equivalence.py``: one task; ``test_repartition_equivalence.py``: re-keying):
window parameters, aggregations with their brute-force results, inputs, and the
checkpoint / crash / recover interleavings run on a ``TestDriver``."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from streamremat import (
    Collect,
    Count,
    DistinctCount,
    Hopping,
    Max,
    Mean,
    Median,
    Min,
    Quantiles,
    Session,
    Sliding,
    Sum,
    TopK,
    Tumbling,
)
from streamremat.testing import TestDriver
from tests.unit.reference import RefWindow, ref_quantile

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


#: fault operations run before each record (and after the last), at most three each
FAULTS = st.lists(st.sampled_from(["checkpoint", "crash", "recover"]), max_size=3)


def run_with_faults(driver: TestDriver, count: int, send: Callable[[int], None], faults: Any,
                    checkpoint: Callable[[int], None]) -> None:
    """``send(i)`` for each record ``i < count``; ``faults[i]`` run before record i (and
    ``faults[count]`` after the last): a checkpoint (``checkpoint(i)``), a crash, or a
    recovery; a crashed driver recovers at the end."""
    crashed = False
    for i in range(count + 1):
        for fault in faults[i] if faults else ():
            if fault == "checkpoint" and not crashed:
                checkpoint(i)
            elif fault == "crash" and not crashed:
                driver.crash()
                crashed = True
            elif fault == "recover" and crashed:
                driver.recover()
                crashed = False
        if i < count:
            send(i)
    if crashed:
        driver.recover()
