"""Poison in user code and result encoding goes to the dead letters, in the engine and
the TestDriver alike: the rest of the output is exactly the brute-force reference's."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from streamremat import Count, Hopping, Operator, Session, Sliding, Sum, Tumbling
from streamremat.core.records import Record
from streamremat.core.task import Task
from streamremat.testing import TestDriver
from tests.unit.poison_support import BIG, PriceTotal
from tests.unit.reference import RefWindow, run_reference

WINDOWS: dict[str, tuple[Any, RefWindow]] = {
    "tumbling": (Tumbling(100), RefWindow("tumbling", 100)),
    "hopping": (Hopping(100, 50), RefWindow("hopping", 100, 50)),
    "sliding": (Sliding(100), RefWindow("sliding", 100)),
    "session": (Session(30), RefWindow("session", 30)),
}


def _times(n: int) -> list[int]:
    return [i * 7 + (i % 5) * 3 for i in range(n)]


def _emitted(driver: TestDriver) -> list[tuple[Any, int, int, Any]]:
    return [(e.key, e.start_ms, e.end_ms, e.value) for e in driver.emitted()]


@pytest.mark.parametrize("kind", sorted(WINDOWS))
def test_raising_add_dead_letters_the_record_and_nothing_else_changes(kind: str) -> None:
    window, ref_window = WINDOWS[kind]
    op = Operator(name="p", source="in", sink="out", window=window, aggregate=PriceTotal())
    driver = TestDriver(op)
    clean = []
    for i, t in enumerate(_times(120)):
        value = {"i": i} if i % 17 == 5 else {"i": i, "price": i % 9}
        driver.send(f"k{i % 3}", value, timestamp_ms=t)
        if "price" in value:
            clean.append((orjson.dumps(f"k{i % 3}"), t, value["price"]))
        if i == 60:
            driver.checkpoint()
            driver.crash()
            driver.recover()  # replay must not dead-letter them again
    ref = run_reference(ref_window, clean, sum)
    assert _emitted(driver) == [(orjson.loads(k), s, e, v) for k, s, e, v in ref.emissions]
    dead = driver.dead_letters()
    assert [orjson.loads(d.value or b"")["i"] for d in dead] == [
        i for i in range(120) if i % 17 == 5
    ]
    assert {(d.stage, d.reason) for d in dead} == {("aggregate", "KeyError: 'price'")}


def test_overflowing_sum_dead_letters_its_window_at_output() -> None:
    op = Operator(name="s", source="in", sink="out", window=Tumbling(100),
                  aggregate={"n": Count(), "total": Sum("x")})
    driver = TestDriver(op)
    records = [("a", 10, 1), ("b", 20, BIG), ("b", 30, BIG), ("a", 40, 2), ("b", 50, BIG),
               ("a", 150, 3), ("b", 160, 4), ("a", 300, 0)]
    for key, t, x in records:
        driver.send(key, {"x": x}, timestamp_ms=t)
    ref = run_reference(
        RefWindow("tumbling", 100),
        [(orjson.dumps(k), t, x) for k, t, x in records],
        lambda xs: {"n": len(xs), "total": sum(xs)},
    )
    fits = [(orjson.loads(k), s, e, v) for k, s, e, v in ref.emissions if v["total"] < 2**64]
    assert _emitted(driver) == fits and len(fits) == len(ref.emissions) - 1
    for e in driver.emitted():  # the driver serialized what the worker sends
        assert orjson.loads(e.output) == {"start_ms": e.start_ms, "end_ms": e.end_ms,
                                          "value": e.value}
    [dead] = driver.dead_letters()
    assert (dead.stage, dead.key, dead.window, dead.offset) == ("output", b'"b"', (0, 100), None)
    assert "Integer exceeds 64-bit range" in dead.reason
    assert dead.value == repr({"n": 3, "total": 3 * BIG}).encode()


def test_output_gets_undecodable_keys_as_text() -> None:
    op = Operator(
        name="u", source="in", sink="out", window=Tumbling(100), aggregate=Count(),
        output=lambda key, start, end, n: {"user": key, "start": start, "clicks": n},
    )
    driver = TestDriver(op)
    for i, t in enumerate([5, 15, 25, 120, 250]):
        driver.send(b"user-%04d" % (i % 2), {}, timestamp_ms=t)  # not JSON, as loadgen's
    driver.send(b"\xff\xfe", {}, timestamp_ms=260)
    driver.send(b"user-0000", {}, timestamp_ms=400)
    assert [(e.key, orjson.loads(e.output)) for e in driver.emitted()] == [
        ("user-0000", {"user": "user-0000", "start": 0, "clicks": 2}),
        ("user-0001", {"user": "user-0001", "start": 0, "clicks": 1}),
        ("user-0001", {"user": "user-0001", "start": 100, "clicks": 1}),
        ("user-0000", {"user": "user-0000", "start": 200, "clicks": 1}),
        ("\\xff\\xfe", {"user": "\\xff\\xfe", "start": 200, "clicks": 1}),
    ]
    assert driver.dead_letters() == []


@pytest.mark.parametrize("stage", ["output", "result", "merge"])
def test_raising_output_result_or_merge_dead_letters_the_window(stage: str) -> None:
    class Fragile(PriceTotal):
        def result(self, acc: int) -> int:
            if stage == "result" and acc == 13:
                raise ValueError("unlucky")
            return acc

        def merge(self, a: int, b: int) -> int:
            if stage == "merge" and a + b == 13:
                raise ValueError("unlucky")
            return a + b

    def output(key: Any, start: int, end: int, total: int) -> Any:
        if stage == "output" and total == 13:
            raise ValueError("unlucky")
        return total

    # Sliding windows merge at close, so every stage can fail there.
    op = Operator(name="f", source="in", sink="out", window=Sliding(10), aggregate=Fragile(),
                  output=output)
    driver = TestDriver(op)
    for t, price in [(100, 6), (105, 7), (130, 1), (200, 0)]:
        driver.send("k", {"price": price}, timestamp_ms=t)
    assert [(e.start_ms, e.value) for e in driver.emitted()] == [(90, 6), (101, 7), (120, 1)]
    [dead] = driver.dead_letters()
    assert (dead.window, dead.reason) == ((95, 105), "ValueError: unlucky")
    assert dead.stage == ("output" if stage == "output" else "result")


def test_raising_encode_skips_the_checkpoint_and_recovery_stays_exact() -> None:
    refused: list[int] = []

    class NoEncode(PriceTotal):
        def encode(self, acc: int) -> bytes:
            if acc > 20:
                refused.append(acc)
                raise OverflowError("too big for my format")
            return orjson.dumps(acc)

    op = Operator(name="e", source="in", sink="out", window=Tumbling(100), aggregate=NoEncode())
    clean, faulty = TestDriver(op), TestDriver(op)
    for i, t in enumerate(_times(60)):
        for d in (clean, faulty):
            d.send(f"k{i % 2}", {"price": i % 11}, timestamp_ms=t)
        if i % 9 == 0:  # some of these find a window over 20 and are skipped
            faulty.checkpoint()
        if i % 13 == 12:
            faulty.crash()
            faulty.recover()
    assert refused, "no checkpoint was skipped: the test would prove nothing"
    assert faulty.emitted() == clean.emitted() and clean.emitted()


@pytest.mark.parametrize("kind", sorted(WINDOWS))
def test_a_raising_add_mid_batch_gives_what_one_by_one_gives(kind: str) -> None:
    """The fold has no per-record error handling on its common path; a batch where
    an add raises resumes after that record, with the same stream time, results
    and state as records fed one at a time."""
    op = Operator(name="p", source="in", sink="out", window=WINDOWS[kind][0],
                  aggregate=PriceTotal())
    records = [
        # A poison record ahead of stream time must not move it (nor make others late).
        Record(b'"k%d"' % (i % 3), orjson.dumps({"i": i} if i % 11 == 4 else
                                                {"i": i, "price": i % 7}),
               t + (500 if i % 11 == 4 else 0), i)
        for i, t in enumerate(_times(90))
    ]
    single, batched = Task(op), Task(op)
    one = [single.process([r]) for r in records]
    many = [batched.process(records[i : i + 30]) for i in range(0, 90, 30)]
    assert [r for o in many for r in o.results] == [r for o in one for r in o.results]
    assert [d.record.offset for o in many for d in o.dead_letters] == [
        d.record.offset for o in one for d in o.dead_letters] == [
        i for i in range(90) if i % 11 == 4]
    # each with the stream time at it (a poison record's time aside), not its batch's end
    assert [(x.record.offset, x.stream_time_ms) for o in many for x in o.late] == [
        (x.record.offset, x.stream_time_ms) for o in one for x in o.late]
    assert batched.snapshot(full=True) == single.snapshot(full=True)
