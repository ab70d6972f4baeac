"""Hand-checked window examples (DESIGN.md §4), run through the public TestDriver."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from streamremat import (
    JSON,
    Collect,
    ConfigError,
    Count,
    Hopping,
    Operator,
    Session,
    Sliding,
    Sum,
    Tumbling,
)
from streamremat.testing import TestDriver
from tests.unit.reference import RefWindow, run_reference


def _driver(window: Any, aggregate: Any = None) -> TestDriver:
    op = Operator(
        name="w",
        source="in",
        sink="out",
        window=window,
        aggregate=Collect("v") if aggregate is None else aggregate,
    )
    return TestDriver(op)


def _out(driver: TestDriver) -> list[tuple[Any, int, int, Any]]:
    return [(e.key, e.start_ms, e.end_ms, e.value) for e in driver.emitted()]


def _late(driver: TestDriver) -> list[tuple[Any, int]]:
    # Late records carry the raw key bytes (they go to the late topic as they came).
    return [(JSON.loads(x.key), x.timestamp_ms) for x in driver.late()]


# -- sliding -------------------------------------------------------------------------------


def test_kafka_streams_sliding_windows_example() -> None:
    """The example of Kafka Streams' SlidingWindows docs: time difference 5000 ms,
    records A=1@8000, A=2@9200, A=3@12400."""
    d = _driver(Sliding(5000))
    d.send("A", {"v": 1}, timestamp_ms=8000)
    d.send("A", {"v": 2}, timestamp_ms=9200)
    d.send("A", {"v": 3}, timestamp_ms=12400)  # stream time 12400 closes the first two
    assert _out(d) == [("A", 3000, 8000, [1]), ("A", 4200, 9200, [1, 2])]
    d.send("B", {"v": 0}, timestamp_ms=100_000)  # stream time is per task: closes A's windows
    assert _out(d) == [
        ("A", 3000, 8000, [1]),
        ("A", 4200, 9200, [1, 2]),
        ("A", 7400, 12400, [1, 2, 3]),
        ("A", 8001, 13001, [2, 3]),
        ("A", 9201, 14201, [3]),
    ]
    assert d.late() == []


def test_sliding_window_closes_one_ms_after_its_inclusive_end() -> None:
    d = _driver(Sliding(10), Count())
    d.send("k", {}, timestamp_ms=100)  # window [90, 100]
    d.send("k", {}, timestamp_ms=100)  # stream time 100: still open
    assert _out(d) == []
    d.send("x", {}, timestamp_ms=101)  # 100 + 1 + grace 0 <= 101: closes
    assert _out(d) == [("k", 90, 100, 2)]


def test_sliding_grace_and_late_records() -> None:
    d = _driver(Sliding(10, grace_ms=5))  # a window [s, e] closes at e + 1 + 5
    d.send("k", {"v": 1}, timestamp_ms=100)  # [90, 100], closes at 106
    d.send("x", {"v": 0}, timestamp_ms=105)
    # Its own window [85, 95] closed at 101, so it is late; but it joins [90, 100],
    # and its right window [96, 106] holds the record at 100.
    d.send("k", {"v": 2}, timestamp_ms=95)
    d.send("x", {"v": 0}, timestamp_ms=106)
    assert _out(d) == [("k", 90, 100, [1, 2])]
    d.send("k", {"v": 3}, timestamp_ms=98)  # own window closed at 104; joins [96, 106]
    d.send("k", {"v": 4}, timestamp_ms=80)  # 80 + 10 + 1 + 5 <= 106: late for every window
    assert _late(d) == [("k", 95), ("k", 98), ("k", 80)]
    d.send("x", {"v": 0}, timestamp_ms=1000)
    assert [e for e in _out(d) if e[0] == "k"] == [
        ("k", 90, 100, [1, 2]),
        ("k", 96, 106, [1, 3]),  # right window of 95
        ("k", 99, 109, [1]),  # right window of 98; [101, 111] holds nothing: not created
    ]


#: Kafka Streams' own expectations for records with t < size ("early" records), from
#: streams/src/test/.../kstream/internals/KStreamSlidingWindowAggregateTest.java
#: (apache/kafka, the emit-final cases): (size, grace, records as (value, t),
#: window start -> the values aggregated in it, in arrival order).
KAFKA_EARLY_CASES = {
    "testEarlyRecordsSmallInput": (
        50, 0, [(1, 0), (2, 5), (3, 6), (4, 3), (5, 13), (6, 10), (7, 70)],
        {0: [1, 2, 3, 4, 5, 6], 1: [2, 3, 4, 5, 6], 4: [2, 3, 5, 6], 6: [3, 5, 6],
         7: [5, 6], 11: [5]},
    ),
    "testEarlyRecordsRepeatedInput": (
        5, 0, [(1, 0), (2, 2), (3, 4), (4, 0), (5, 2), (6, 2), (7, 0), (8, 7)],
        {0: [1, 2, 3, 4, 5, 6, 7], 1: [2, 3, 5, 6]},
    ),
    "testEarlyRecordsLargeInput": (
        10, 1, [(1, 0), (3, 5), (4, 6), (2, 3), (6, 13), (5, 10), (7, 4), (8, 2), (9, 15)],
        {0: [1, 3, 4, 2], 1: [3, 4, 2], 3: [3, 4, 2, 6, 5, 7]},
    ),
}


@pytest.mark.parametrize("case", sorted(KAFKA_EARLY_CASES))
def test_sliding_early_records_as_kafka_streams(case: str) -> None:
    """Records with t < size go in the window [0, size], never one with a negative
    start; the engine and the reference both give Kafka Streams' own results."""
    size, grace, records, expected = KAFKA_EARLY_CASES[case]
    d = _driver(Sliding(size, grace_ms=grace))
    for v, t in records:
        d.send("A", {"v": v}, timestamp_ms=t)
    got = {start: value for _, start, end, value in _out(d) if end == start + size}
    assert got == expected
    assert len(_out(d)) == len(expected)
    ref = run_reference(RefWindow("sliding", size, grace=grace),
                        [(b"A", t, v) for v, t in records], list)
    assert {start: value for _, start, _, value in ref.emissions} == expected


def test_sliding_record_before_size_has_window_from_zero() -> None:
    d = _driver(Sliding(10_000), Count())
    d.send("k", {}, timestamp_ms=3_000)  # Kafka Streams: [0, 10000], not [-7000, 3000]
    d.send("k", {}, timestamp_ms=9_000)
    d.send("x", {}, timestamp_ms=10_000)  # [0, 10000] is still open at stream time 10000
    assert _out(d) == []
    d.send("k", {}, timestamp_ms=10_001)  # closes it; the left window of 10001 opens
    d.send("x", {}, timestamp_ms=30_000)
    assert [e for e in _out(d) if e[0] == "k"] == [
        ("k", 0, 10_000, 2),
        ("k", 1, 10_001, 3),  # left window of 10001
        ("k", 3_001, 13_001, 2),  # right window of 3000: 9000 and 10001
        ("k", 9_001, 19_001, 1),  # right window of 9000
    ]
    assert d.late() == []


# -- tumbling ------------------------------------------------------------------------------


def test_tumbling_grace_and_late_records() -> None:
    d = _driver(Tumbling(10_000, grace_ms=2_000), Count())
    for t in (1_000, 5_000, 11_000):
        d.send("u", {}, timestamp_ms=t)
    d.send("u", {}, timestamp_ms=9_000)  # stream time 11000 < 10000 + 2000: in time
    assert _out(d) == []
    d.send("u", {}, timestamp_ms=12_000)  # closes [0, 10000)
    assert _out(d) == [("u", 0, 10_000, 3)]
    d.send("u", {}, timestamp_ms=9_500)  # its window is gone: late
    assert _late(d) == [("u", 9_500)]
    assert d.late()[0].stream_time_ms == 12_000
    d.send("v", {}, timestamp_ms=25_000)
    assert _out(d) == [("u", 0, 10_000, 3), ("u", 10_000, 20_000, 2)]
    assert len(d.late()) == 1


def test_tumbling_without_grace_closes_at_window_end() -> None:
    d = _driver(Tumbling(10), Sum("v"))
    d.send("a", {"v": 1}, timestamp_ms=0)
    d.send("b", {"v": 2}, timestamp_ms=9)
    d.send("a", {"v": 3}, timestamp_ms=9)
    assert _out(d) == []
    d.send("a", {"v": 4}, timestamp_ms=10)  # end (exclusive) reached: closes [0, 10)
    assert _out(d) == [("a", 0, 10, 4), ("b", 0, 10, 2)]
    d.send("b", {"v": 5}, timestamp_ms=9)
    assert _late(d) == [("b", 9)]


def test_results_are_ordered_by_close_time_then_key() -> None:
    d = _driver(Tumbling(10, grace_ms=100), Count())
    for key, t in (("z", 1), ("a", 2), ("m", 15), ("b", 12), ("a", 3)):
        d.send(key, {}, timestamp_ms=t)
    d.send("q", {}, timestamp_ms=200)
    assert _out(d) == [
        ("a", 0, 10, 2),
        ("z", 0, 10, 1),
        ("b", 10, 20, 1),
        ("m", 10, 20, 1),
    ]


# -- hopping -------------------------------------------------------------------------------


def test_hopping_record_is_in_size_over_advance_windows() -> None:
    d = _driver(Hopping(10, 5))
    d.send("k", {"v": 1}, timestamp_ms=7)  # [0, 10) and [5, 15)
    d.send("k", {"v": 2}, timestamp_ms=3)  # [0, 10) is open; [-5, 5) closed at 5: late
    d.send("k", {"v": 3}, timestamp_ms=12)  # [5, 15) and [10, 20)
    assert _late(d) == [("k", 3)]
    d.send("x", {"v": 0}, timestamp_ms=100)
    assert [e for e in _out(d) if e[0] == "k"] == [
        ("k", 0, 10, [1, 2]),
        ("k", 5, 15, [1, 3]),
        ("k", 10, 20, [3]),
    ]


def test_hopping_grace_keeps_windows_open() -> None:
    d = _driver(Hopping(60_000, 10_000, grace_ms=5_000), Count())
    d.send("k", {}, timestamp_ms=59_000)  # windows starting 0, 10000, ..., 50000
    d.send("k", {}, timestamp_ms=64_000)  # [0, 60000) closes at 65000: still open
    d.send("k", {}, timestamp_ms=55_000)  # all six of its windows are open
    assert _out(d) == []
    assert d.late() == []
    d.send("k", {}, timestamp_ms=65_000)
    assert _out(d) == [("k", 0, 60_000, 2)]


# -- session ----------------------------------------------------------------------------


def test_session_chains_within_gap_inclusive() -> None:
    d = _driver(Session(10))
    d.send("s", {"v": 1}, timestamp_ms=0)
    d.send("s", {"v": 2}, timestamp_ms=5)
    d.send("s", {"v": 3}, timestamp_ms=15)  # exactly gap after 5: same session
    d.send("s", {"v": 4}, timestamp_ms=26)  # 11 after 15: a new one
    # [0, 15] closes at 15 + 10 + 1 = 26
    assert _out(d) == [("s", 0, 15, [1, 2, 3])]
    d.send("x", {"v": 0}, timestamp_ms=37)
    assert _out(d)[1:] == [("s", 26, 26, [4])]


def test_session_bridge_merges_two_sessions() -> None:
    d = _driver(Session(10, grace_ms=50), Count())
    d.send("m", {}, timestamp_ms=100)
    d.send("m", {}, timestamp_ms=120)  # 20 apart: two sessions (both open thanks to grace)
    assert d.task().open_windows() == 2
    d.send("m", {}, timestamp_ms=110)  # within 10 of both: merges them
    assert d.task().open_windows() == 1
    d.send("x", {}, timestamp_ms=1_000)
    assert _out(d)[0] == ("m", 100, 120, 3)


def test_session_grace_and_late_records() -> None:
    d = _driver(Session(10, grace_ms=20), Count())
    d.send("s", {}, timestamp_ms=100)
    d.send("x", {}, timestamp_ms=130)  # [100,100] closes at 100 + 10 + 1 + 20 = 131
    d.send("s", {}, timestamp_ms=95)  # in time: extends the session to [95, 100]
    d.send("s", {}, timestamp_ms=80)  # new session [80,80], closes at 111 <= 130: late
    assert _late(d) == [("s", 80)]
    d.send("x", {}, timestamp_ms=131)
    assert _out(d) == [("s", 95, 100, 2)]


# -- durations ----------------------------------------------------------------------------


def test_timedelta_durations() -> None:
    assert Tumbling(timedelta(minutes=1)).size_ms == 60_000
    hop = Hopping(timedelta(hours=1), timedelta(minutes=5), grace_ms=timedelta(seconds=30))
    assert (hop.size_ms, hop.advance_ms, hop.grace_ms) == (3_600_000, 300_000, 30_000)
    assert Sliding(timedelta(seconds=5)).size_ms == 5_000
    session = Session(timedelta(minutes=30), grace_ms=timedelta(milliseconds=1))
    assert (session.gap_ms, session.grace_ms) == (1_800_000, 1)
    assert Tumbling(timedelta(seconds=1)) == Tumbling(1_000)


def test_timedelta_with_a_fraction_of_a_millisecond_is_refused() -> None:
    with pytest.raises(ConfigError, match="whole number of milliseconds"):
        Tumbling(timedelta(microseconds=1_500))
