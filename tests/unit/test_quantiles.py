"""Exact Quantiles / Median against the brute-force rule of tests/unit/reference.py,
and against numpy's "linear" method (the same rule, computed independently)."""

from __future__ import annotations

import statistics
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamremat import ConfigError, Median, Operator, Quantiles, Session, Tumbling
from streamremat.testing import TestDriver
from tests.unit.reference import ref_quantile

QS = [0.0, 0.01, 0.25, 0.5, 0.9, 0.99, 1.0]
numbers = st.one_of(
    st.integers(-(10**6), 10**6),
    st.floats(-1e9, 1e9, allow_nan=False, allow_infinity=False),
)


def _fold(agg: Any, items: list[Any]) -> Any:
    acc = agg.zero()
    for item in items:
        acc = agg.add(acc, agg.pick(item))
    return acc


@settings(max_examples=300, deadline=None)
@given(values=st.lists(numbers, max_size=60), split=st.integers(0, 60))
def test_quantiles_equal_sorting_all_values(values: list[Any], split: int) -> None:
    agg = Quantiles(qs=QS)
    acc = _fold(agg, values)
    want = [ref_quantile(values, q) for q in QS] if values else None
    assert agg.result(acc) == want
    # Merged halves (sessions) and an encode/decode round trip change nothing.
    merged = agg.merge(_fold(agg, values[:split]), _fold(agg, values[split:]))
    assert agg.result(merged) == want
    again = agg.decode(agg.encode(acc))
    assert agg.result(again) == want
    # Canonical bytes: any arrival order of the same values encodes the same.
    assert agg.encode(_fold(agg, list(reversed(values)))) == agg.encode(acc)
    if values:
        assert want == pytest.approx(list(np.quantile(np.array(values, float), QS)), rel=1e-9,
                                     abs=1e-6)


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.integers(-1000, 1000), min_size=1, max_size=50))
def test_median_is_the_textbook_median(values: list[int]) -> None:
    agg = Median("x")
    acc = _fold(agg, [{"x": v} for v in values])
    assert agg.result(acc) == statistics.median(values)
    assert agg.result(acc) == ref_quantile(values, 0.5)


def test_integers_stay_integers_and_types_survive_encoding() -> None:
    agg = Quantiles(qs=[0.0, 0.5, 1.0])
    acc = _fold(agg, [3, 1, 2])
    assert agg.result(acc) == [1, 2, 3] and all(type(x) is int for x in agg.result(acc))
    mixed = _fold(agg, [1, 2.5, 2**70, -3])
    back = agg.decode(agg.encode(mixed))
    assert sorted(back) == sorted([1, 2.5, 2**70, -3])
    assert [type(x) for x in sorted(back)] == [int, int, float, int]
    assert agg.encode(agg.zero()) == b"q"
    assert agg.result(agg.zero()) is None
    # Compact: 8 bytes per value plus a tag.
    assert len(agg.encode(_fold(agg, list(range(1000))))) == 1 + 8 * 1000


def test_bad_quantiles_and_items() -> None:
    for qs in ([], [1.5], [-0.1], ["0.5"], 0.5, [True]):
        with pytest.raises(ConfigError, match="Quantiles"):
            Quantiles("x", qs)  # type: ignore[arg-type]
    agg = Quantiles("x")
    for bad in ({"x": "7"}, {"x": float("nan")}, {"x": True}, {"y": 1}):
        with pytest.raises((TypeError, ValueError, KeyError)):
            agg.pick(bad)


def test_quantiles_per_key_and_window_through_the_driver() -> None:
    op = Operator(name="lat", source="in", sink="out", window=Tumbling(10_000),
                  aggregate={"p": Quantiles("ms", [0.5, 0.99]), "med": Median("ms")})
    driver = TestDriver(op)
    values = [5, 1, 9, 7, 3, 8]
    for i, v in enumerate(values):
        driver.send("k", {"ms": v}, timestamp_ms=1_000 * i)
    driver.checkpoint()
    driver.crash()
    driver.recover()
    driver.send("k", {"ms": 100}, timestamp_ms=20_000)
    [emission] = driver.emitted()
    assert emission.value == {
        "p": [ref_quantile(values, 0.5), ref_quantile(values, 0.99)],
        "med": ref_quantile(values, 0.5),
    }


def test_session_merge_keeps_every_value() -> None:
    op = Operator(name="s", source="in", sink="out", window=Session(100, grace_ms=1_000),
                  aggregate=Quantiles("v", [0.5]))
    driver = TestDriver(op)
    driver.send("k", {"v": 1}, timestamp_ms=0)
    driver.send("k", {"v": 3}, timestamp_ms=200)
    driver.send("k", {"v": 2}, timestamp_ms=100)  # bridges the two sessions
    driver.send("k", {"v": 0}, timestamp_ms=10_000)
    assert [e.value for e in driver.emitted()] == [[2]]
