"""Operator configuration errors, bad input to the dead letters, and refused restores."""

from __future__ import annotations

from typing import Any

import pytest

from streamremat import (
    App,
    ConfigError,
    Count,
    Hopping,
    Operator,
    Session,
    Sliding,
    Sum,
    TopK,
    Tumbling,
)
from streamremat.core.exceptions import StateFormatError
from streamremat.core.records import Record
from streamremat.core.task import Task
from streamremat.testing import TestDriver


def _op(**overrides: Any) -> Operator:
    fields: dict[str, Any] = {
        "name": "op",
        "source": "in",
        "sink": "out",
        "window": Tumbling(10),
        "aggregate": Count(),
    }
    fields.update(overrides)
    return Operator(**fields)


# -- window parameters ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: Tumbling(-1), r"Tumbling size_ms must be > 0 ms, got -1"),
        (lambda: Tumbling(0), r"Tumbling size_ms must be > 0 ms, got 0"),
        (lambda: Tumbling(10, grace_ms=-5), r"Tumbling grace_ms must be >= 0 ms, got -5"),
        (lambda: Hopping(0, 0), r"Hopping size_ms must be > 0"),
        (lambda: Hopping(10, 0), r"Hopping advance_ms must be > 0"),
        (lambda: Hopping(10, 20), r"advance_ms=20 is larger than size_ms=10.*advance_ms <= size"),
        (lambda: Hopping(10, 5, grace_ms=-1), r"Hopping grace_ms must be >= 0"),
        (lambda: Sliding(0), r"Sliding size_ms must be > 0"),
        (lambda: Sliding(10, grace_ms=-1), r"Sliding grace_ms must be >= 0"),
        (lambda: Session(-3), r"Session gap_ms must be > 0"),
        (lambda: Session(10, grace_ms=-1), r"Session grace_ms must be >= 0"),
        (lambda: Tumbling(1.5), r"int milliseconds or a timedelta, got 1.5"),  # type: ignore[arg-type]
        (lambda: Tumbling("10s"), r"int milliseconds or a timedelta"),  # type: ignore[arg-type]
        (lambda: Tumbling(True), r"int milliseconds or a timedelta"),
    ],
)
def test_bad_window_parameters(make: Any, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        make()


def test_config_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        Tumbling(0)


# -- operator and app --------------------------------------------------------------------


def test_unknown_value_field_is_named() -> None:
    with pytest.raises(
        ConfigError, match=r"unknown value field\(s\) 'amount'.*\['price', 'user'\]"
    ):
        _op(aggregate=Sum("amount"), value_fields=["user", "price"])
    with pytest.raises(ConfigError, match=r"'ts'"):
        _op(aggregate=Count(), timestamp_by="ts", value_fields=["user"])
    with pytest.raises(ConfigError, match=r"'weight'"):
        _op(aggregate={"top": TopK(3, of="user", weight="weight")}, value_fields=["user"])
    # known fields pass
    _op(aggregate={"s": Sum("price")}, timestamp_by="ts", value_fields=["price", "ts"])


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"source": "bad topic"}, r"source topic 'bad topic' is not valid"),
        ({"sink": ""}, r"sink topic '' is not valid"),
        ({"sink": "x" * 250}, r"sink topic .* is not valid"),
        ({"source": "in/out"}, r"source topic 'in/out' is not valid"),
        ({"late_topic": "late!"}, r"late_topic 'late!' is not valid"),
        ({"sink": "in"}, r"source and sink must differ"),
        ({"name": "has space"}, r"operator name 'has space' must be"),
        ({"name": ""}, r"operator name '' must be"),
        ({"window": 10}, r"window must be Tumbling, Hopping, Sliding or Session"),
        ({"aggregate": "count"}, r"is not an aggregation.*Count\(\)"),
        ({"aggregate": {}}, r"at least one entry"),
        ({"timestamp_by": ""}, r"timestamp_by field must not be empty"),
    ],
)
def test_bad_operator_config(overrides: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        _op(**overrides)


def test_empty_field_names_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"Sum: field name must not be empty"):
        Sum("")
    with pytest.raises(ConfigError, match=r"TopK weight: expected a field name or a callable"):
        TopK(3, weight=5)  # type: ignore[arg-type]


def test_duplicate_operator_names_in_an_app() -> None:
    with pytest.raises(ConfigError, match=r"app 'shop' already has an operator 'op'"):
        App("shop", [_op(), _op(sink="other")])
    app = App("shop", [_op()])
    with pytest.raises(ConfigError, match="already has an operator"):
        app.add(_op(source="elsewhere"))


def test_bad_app_name() -> None:
    with pytest.raises(ConfigError, match=r"app name 'my app' must be"):
        App("my app")


# -- bad input goes to the dead letters; the operator keeps going ---------------------------


def _dead(driver: TestDriver) -> list[tuple[int, str, str]]:
    return [(d.offset, d.stage, d.reason) for d in driver.dead_letters()]


def test_bad_records_go_to_dead_letters_and_processing_continues() -> None:
    op = _op(aggregate={"n": Count(), "total": Sum("amount")}, timestamp_by="ts")
    d = TestDriver(op)
    d.send("u", {"amount": 1, "ts": 1}, timestamp_ms=None)  # offset 0: fine
    d.send(None, {"amount": 2, "ts": 2}, timestamp_ms=None)  # 1: no key
    d.send("u", b"{not json", timestamp_ms=None)  # 2: malformed JSON
    d.send("u", {"amount": 3}, timestamp_ms=None)  # 3: no timestamp field
    d.send("u", {"amount": "x", "ts": 3}, timestamp_ms=None)  # 4: Sum of a string
    d.send("u", {"amount": 4, "ts": "soon"}, timestamp_ms=None)  # 5: bad timestamp
    d.send("u", {"amount": 5, "ts": -1}, timestamp_ms=None)  # 6: negative timestamp
    d.send("u", None, timestamp_ms=None)  # 7: no value
    d.send("u", {"amount": 6, "ts": 4}, timestamp_ms=None)  # 8: fine
    d.send("v", {"amount": 0, "ts": 10}, timestamp_ms=None)  # closes [0, 10)

    dead = _dead(d)
    assert [(o, s) for o, s, _ in dead] == [
        (1, "key"),
        (2, "value"),
        (3, "timestamp"),
        (4, "aggregate"),
        (5, "timestamp"),
        (6, "timestamp"),
        (7, "value"),
    ]
    reasons = dict((o, r) for o, _, r in dead)
    assert "no key" in reasons[1]
    assert "JSONDecodeError" in reasons[2]
    assert "ts" in reasons[3]
    assert "expected a number, got str" in reasons[4]
    assert "int of milliseconds" in reasons[5]
    assert "negative timestamp" in reasons[6]
    assert "no value" in reasons[7]
    # the bad Sum left the Count untouched too: a record counts fully or not at all
    assert [(e.key, e.value) for e in d.emitted()] == [("u", {"n": 2, "total": 7})]
    assert d.dead_letters()[1].value == b"{not json"


def test_record_without_a_kafka_timestamp_is_dead_lettered() -> None:
    d = TestDriver(_op())
    d.send("u", {}, timestamp_ms=None)
    d.send("u", {}, timestamp_ms=5)
    assert [(o, s) for o, s, _ in _dead(d)] == [(0, "timestamp")]
    assert d.task().open_windows() == 1


def test_user_map_and_filter_that_raise_are_dead_lettered() -> None:
    def boom(value: dict[str, Any]) -> dict[str, Any]:
        if value["n"] == 2:
            raise RuntimeError("map exploded")
        return value

    def picky(value: dict[str, Any]) -> bool:
        return 10 // value["n"] > 1  # n == 0 raises ZeroDivisionError

    op = _op(aggregate=Sum("n")).map(boom).filter(picky)
    d = TestDriver(op)
    for t, n in enumerate([1, 2, 0, 3, 9]):  # 9 is filtered out (10 // 9 == 1)
        d.send("k", {"n": n}, timestamp_ms=t)
    d.send("k", {"n": 1}, timestamp_ms=10)
    assert [(o, s) for o, s, _ in _dead(d)] == [(1, "step"), (2, "step")]
    assert "RuntimeError: map exploded" in _dead(d)[0][2]
    assert "ZeroDivisionError" in _dead(d)[1][2]
    assert [e.value for e in d.emitted()] == [4]


def test_key_by_that_raises_is_dead_lettered() -> None:
    op = _op(key_by=lambda v: v["user"])
    d = TestDriver(op)
    d.send(None, {"user": "a"}, timestamp_ms=1)
    d.send(None, {"nobody": 1}, timestamp_ms=2)
    d.send(None, {"user": "a"}, timestamp_ms=10)
    assert [(o, s) for o, s, _ in _dead(d)] == [(1, "key")]
    assert [(e.key, e.value) for e in d.emitted()] == [("a", 1)]


# -- restore refuses foreign state -----------------------------------------------------------


def _snapshot_of(op: Operator) -> bytes:
    task = Task(op)
    task.process([Record(b'"k"', b'{"x": 1}', 5, 0)])
    return task.snapshot(full=True)


@pytest.mark.parametrize(
    "other",
    [
        _op(window=Tumbling(20)),
        _op(window=Hopping(10, 5)),
        _op(window=Tumbling(10, grace_ms=1)),
        _op(window=Session(10)),
        _op(window=Sliding(10)),
        _op(aggregate=Sum("x")),
        _op(aggregate={"n": Count()}),
    ],
    ids=["size", "hopping", "grace", "session", "sliding", "aggregation", "dict"],
)
def test_restore_refuses_state_of_another_window_or_aggregation(other: Operator) -> None:
    payload = _snapshot_of(_op())
    with pytest.raises(StateFormatError, match="different window or aggregation"):
        Task.restore(other, 0, [payload])
    assert Task.restore(_op(), 0, [payload]).snapshot(full=True) == payload


def test_restore_refuses_garbage_and_bad_chains() -> None:
    op = _op()
    full = _snapshot_of(op)
    with pytest.raises(StateFormatError):
        Task.restore(op, 0, [b"nonsense"])
    with pytest.raises(StateFormatError, match="version"):
        Task.restore(op, 0, [full[:3] + b"\x63" + full[4:]])
    with pytest.raises(StateFormatError, match="one full snapshot, then deltas"):
        Task.restore(op, 0, [full, full])
    with pytest.raises(StateFormatError, match="nothing to restore"):
        Task.restore(op, 0, [])
    with pytest.raises(StateFormatError):
        Task.restore(op, 0, [full[:-2]])
