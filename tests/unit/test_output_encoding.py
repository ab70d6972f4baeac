"""The output path's cheaper encoding of default results gives the same bytes as
``JSON.dumps(default_output(...))``, the definition of a sink record's value."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamremat import JSON, Count, DistinctCount, Max, Mean, Min, Operator, Sum, Tumbling
from streamremat.core.aggregators import Aggregator, as_aggregator
from streamremat.core.operator import default_output
from streamremat.core.records import BatchOutput, WindowResult
from streamremat.runtime.outputs import partition_for, to_records

SCALARS: dict[str, tuple[type[Aggregator], st.SearchStrategy[Any]]] = {
    "count": (Count, st.integers(0, 2**40)),
    "sum": (Sum, st.one_of(st.integers(-(2**62), 2**62),
                           st.floats(allow_nan=False, allow_infinity=False))),
    "min": (Min, st.one_of(st.none(), st.integers(-(2**62), 2**62), st.text(max_size=8),
                           st.floats(allow_nan=False, allow_infinity=False))),
    "max": (Max, st.one_of(st.none(), st.integers(-(2**62), 2**62), st.text(max_size=8))),
    "mean": (Mean, st.one_of(st.none(), st.floats(allow_nan=False, allow_infinity=False))),
    "distinct": (DistinctCount, st.integers(0, 2**20)),
}


def _make(kind: str) -> Aggregator:
    cls = SCALARS[kind][0]
    return cls() if cls is Count else cls("x")


@st.composite
def shapes(draw: Any) -> tuple[Any, st.SearchStrategy[Any]]:
    """An aggregation spec (one built-in or a dict of them, names in any order and
    any characters) and a strategy for its results."""
    if draw(st.booleans()):
        kind = draw(st.sampled_from(sorted(SCALARS)))
        return _make(kind), SCALARS[kind][1]
    names = draw(st.lists(st.text(min_size=1, max_size=6), min_size=1, max_size=5,
                          unique=True))
    kinds = [draw(st.sampled_from(sorted(SCALARS))) for _ in names]
    spec = {n: _make(k) for n, k in zip(names, kinds, strict=True)}
    return spec, st.fixed_dictionaries(
        {n: SCALARS[k][1] for n, k in zip(names, kinds, strict=True)})


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_default_results_encode_like_json_dumps(data: Any) -> None:
    spec, values = data.draw(shapes())
    op = Operator(name="op", source="in", sink="out", window=Tumbling(1000), aggregate=spec)
    assert type(op.aggregator) is type(as_aggregator(spec))
    names = getattr(op.aggregator, "names", None)

    def result() -> Any:
        drawn = data.draw(values)
        # A composite's result is a dict in the order of its names (Composite.result).
        return drawn if names is None else {n: drawn[n] for n in names}

    results = [
        WindowResult(JSON.dumps(data.draw(st.text(max_size=4))), start, start + 1000, result())
        for start in data.draw(st.lists(st.integers(-(2**40), 2**40), max_size=6))
    ]
    records = to_records(op, 0, BatchOutput(results=results))
    assert [(r.topic, r.key, r.value, r.timestamp_ms, r.headers) for r in records] == [
        ("out", r.key, JSON.dumps(default_output(None, r.start_ms, r.end_ms, r.value)),
         r.end_ms, [])
        for r in results
    ]


#: Kafka's own test vectors for ``org.apache.kafka.common.utils.Utils.murmur2``
#: (clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java), signed.
JAVA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize("native", [True, False], ids=["native-if-built", "aiokafka"])
def test_partitions_are_the_java_clients(native: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The partitioner the sender uses gives the Java client's partition:
    ``toPositive(murmur2(key)) % partitions``, natively (where built) and in Python."""
    from streamremat.core import fastpath
    monkeypatch.setattr(fastpath, "native_enabled", native and fastpath.native_enabled)
    for key, signed in JAVA_MURMUR2.items():
        for partitions in (1, 3, 4, 12, 100):
            assert partition_for(key, partitions) == (signed & 0x7FFFFFFF) % partitions


def test_native_partitioner_is_aiokafkas() -> None:
    """Where the extension is built, its batch murmur2 gives aiokafka's partition
    for every key (random bytes of every length, so each tail case is hit)."""
    from aiokafka.partitioner import murmur2

    from streamremat.core import fastpath
    native = fastpath.native_module
    if native is None:
        pytest.skip("streamremat_native is not built (no cargo): nothing to compare")
    rng = random.Random(5)
    keys = [rng.randbytes(rng.randrange(40)) for _ in range(5_000)] + list(JAVA_MURMUR2)
    for partitions in (1, 3, 12, 100):
        got = native.partition_indexes(keys, partitions)
        assert got == [(murmur2(k) & 0x7FFFFFFF) % partitions for k in keys]
    with pytest.raises(ValueError, match="at least one partition"):
        native.partition_indexes(keys, 0)
