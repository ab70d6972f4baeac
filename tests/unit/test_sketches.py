"""ApproxQuantiles (DataSketches t-digest) and ApproxDistinct (DataSketches HLL):
error bounds against exact answers, and determinism whatever the checkpoints."""

from __future__ import annotations

import bisect
import math
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamremat import ApproxDistinct, ApproxQuantiles, ConfigError, Operator, Tumbling
from streamremat.core.exceptions import StateFormatError
from streamremat.testing import TestDriver

TAILS, BODY = (0.01, 0.99), (0.1, 0.25, 0.5, 0.75, 0.9)


def _fold(agg: Any, items: list[Any]) -> Any:
    acc = agg.zero()
    for item in items:
        acc = agg.add(acc, agg.pick(item))
    return acc


def _rank(ordered: list[float], x: float) -> float:
    return bisect.bisect_right(ordered, x) / len(ordered)


# -- ApproxQuantiles -----------------------------------------------------------------------


@pytest.mark.parametrize("order", ["random", "ascending", "descending"])
@pytest.mark.parametrize("dist", ["uniform", "normal", "lognormal"])
def test_approx_quantiles_rank_error(dist: str, order: str) -> None:
    rnd = random.Random(f"{dist}-{order}")
    draw = {"uniform": rnd.random, "normal": lambda: rnd.gauss(0, 1),
            "lognormal": lambda: rnd.lognormvariate(0, 2)}[dist]
    values = [draw() for _ in range(50_000)]
    if order != "random":
        values.sort(reverse=order == "descending")
    agg = ApproxQuantiles(qs=[0.0, *TAILS, *BODY, 1.0])
    acc = _fold(agg, values)
    got = dict(zip(agg.qs, agg.result(acc), strict=True))
    ordered = sorted(values)
    assert got[0.0] == ordered[0] and got[1.0] == ordered[-1]  # extremes are exact
    for q in TAILS:
        assert abs(_rank(ordered, got[q]) - q) <= 0.002, q
    for q in BODY:
        assert abs(_rank(ordered, got[q]) - q) <= 0.02, q
    assert len(agg.encode(acc)) < 8_192  # a few KiB, not 50k values


@settings(max_examples=100, deadline=None)
@given(
    values=st.lists(st.floats(-1e6, 1e6, allow_nan=False), max_size=1_500),
    cuts=st.lists(st.integers(0, 1_500), max_size=6),
)
def test_approx_quantiles_do_not_depend_on_checkpoints(
    values: list[float], cuts: list[int]
) -> None:
    """Encoding (a checkpoint) or decoding (a recovery) at any point, and merging,
    give the same sketch as one uninterrupted fold: replay reproduces results."""
    agg = ApproxQuantiles(qs=[0.5, 0.9])
    clean = _fold(agg, values)
    acc = agg.zero()
    for i, v in enumerate(values):
        if i in cuts:
            agg.encode(acc)
            acc = agg.decode(agg.encode(acc))
        acc = agg.add(acc, v)
    assert agg.encode(acc) == agg.encode(clean)
    assert agg.result(acc) == agg.result(clean)
    if cuts:
        split = min(cuts[0], len(values))
        a, b = _fold(agg, values[:split]), _fold(agg, values[split:])
        merged = agg.merge(a, b)
        assert agg.encode(agg.decode(agg.encode(merged))) == agg.encode(merged)
        assert agg.encode(agg.merge(a, b)) == agg.encode(merged)  # inputs untouched


def test_approx_quantiles_across_crashes_in_the_driver() -> None:
    op = Operator(name="q", source="in", sink="out", window=Tumbling(100_000),
                  aggregate=ApproxQuantiles("ms", [0.5, 0.99]))
    rnd = random.Random(7)
    records = [(f"k{i % 3}", {"ms": rnd.expovariate(0.1)}, i) for i in range(3_000)]

    def run(faults: bool) -> list[Any]:
        driver = TestDriver(op)
        for key, value, t in records:
            driver.send(key, value, timestamp_ms=t)
            if faults and t % 701 == 0:
                driver.checkpoint()
            if faults and t % 1_303 == 0:
                driver.crash()
                driver.recover()
        driver.send("k0", {"ms": 0}, timestamp_ms=500_000)
        return driver.emitted()

    assert run(True) == run(False)


def test_approx_quantiles_empty_and_bad_input() -> None:
    agg = ApproxQuantiles("x")
    assert agg.result(agg.zero()) is None
    assert agg.result(agg.decode(agg.encode(agg.zero()))) is None
    with pytest.raises(ConfigError, match="k must be"):
        ApproxQuantiles("x", k=5)
    with pytest.raises(ConfigError, match="quantile"):
        ApproxQuantiles("x", [2.0])
    with pytest.raises(StateFormatError):
        agg.decode(b"\x03abc")


# -- ApproxDistinct -------------------------------------------------------------------------


@pytest.mark.parametrize("n", [10, 1_000, 20_000, 100_000])
def test_approx_distinct_error_is_within_four_standard_errors(n: int) -> None:
    agg = ApproxDistinct()
    acc = agg.zero()
    for i in range(n):
        acc = agg.add(acc, agg.pick(f"user-{i}"))
    for i in range(0, n, 3):  # repeats change nothing
        acc = agg.add(acc, agg.pick(f"user-{i}"))
    assert abs(agg.result(acc) - n) / n <= 4 * agg.standard_error
    back = agg.decode(agg.encode(acc))
    assert agg.encode(back) == agg.encode(acc) and agg.result(back) == agg.result(acc)
    assert len(agg.encode(acc)) <= 2**11 + 64  # 4-bit registers: 2 KiB at p = 12


@pytest.mark.parametrize("n", [0, 1, 2, 5, 10, 50, 100])
def test_approx_distinct_is_exact_for_small_sets(n: int) -> None:
    agg = ApproxDistinct("u")
    acc = _fold(agg, [{"u": i} for i in range(n)] * 2)
    assert agg.result(acc) == n
    assert len(agg.encode(acc)) <= 12 + 4 * n  # a preamble and a list of 4-byte hashes


def test_approx_distinct_merge_is_the_union() -> None:
    agg = ApproxDistinct(precision=14)
    a = _fold(agg, [f"x{i}" for i in range(30_000)])
    b = _fold(agg, [f"x{i}" for i in range(20_000, 50_000)])
    estimate = agg.result(agg.merge(a, b))
    assert abs(estimate - 50_000) / 50_000 <= 4 * agg.standard_error
    assert agg.standard_error == pytest.approx(1.04 / math.sqrt(2**14))


def test_approx_distinct_items_keep_their_type() -> None:
    agg = ApproxDistinct()
    assert agg.result(_fold(agg, [1, "1", 1.5, [1], {"a": 1}, b"1", None])) == 7


@pytest.mark.parametrize("distinct", [20, 300, 5_000])  # list, set and HLL modes
def test_approx_distinct_does_not_depend_on_checkpoints(distinct: int) -> None:
    agg = ApproxDistinct()
    values = [f"v{i % distinct}" for i in range(20_000)]
    clean = _fold(agg, values)
    acc = agg.zero()
    for i, v in enumerate(values):
        if i % 997 == 0:
            acc = agg.decode(agg.encode(acc))
        acc = agg.add(acc, agg.pick(v))
    assert agg.encode(acc) == agg.encode(clean)


def test_approx_distinct_bad_config_and_state() -> None:
    for p in (3, 17, 12.0):
        with pytest.raises(ConfigError, match="precision"):
            ApproxDistinct(precision=p)  # type: ignore[arg-type]
    with pytest.raises(StateFormatError, match="HyperLogLog"):
        ApproxDistinct().decode(b"not a sketch")
    with pytest.raises(StateFormatError, match="lg_k"):
        ApproxDistinct(precision=10).decode(ApproxDistinct().encode(ApproxDistinct().zero()))
