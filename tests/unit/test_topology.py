"""Compiling an App into stages, and the TestDriver running them: re-keying through a
repartition topic, operators that feed operators, dead letters and late records at
the stage where they arise."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from streamremat import JSON, App, ConfigError, Count, Operator, Sum, TopK, Tumbling
from streamremat.core.topology import StageKind, compile_app, repartition_topic
from streamremat.testing import Emission, TestDriver


def revenue(**kw: Any) -> Operator:
    """The README's operator."""
    return Operator(
        name="revenue-per-shop", source="orders", sink="revenue-per-shop-minute",
        window=Tumbling(timedelta(minutes=1), grace_ms=5_000),
        aggregate={"orders": Count(), "revenue": Sum("amount")},
        key_by=lambda order: order["shop"], **kw,
    ).filter(lambda order: order["amount"] > 0)


def _readme_run(op: Operator, partitions: int) -> list[Emission]:
    driver = TestDriver(App("shops", [op]), partitions=partitions)
    driver.send(None, {"shop": "north", "amount": 12}, timestamp_ms=1_000, partition=0)
    driver.send(None, {"shop": "north", "amount": 30}, timestamp_ms=20_000,
                partition=partitions - 1)
    driver.checkpoint()
    driver.crash()
    driver.recover()
    for p in range(partitions):  # stream time passes 65 s, on every partition
        driver.send(None, {"shop": "north", "amount": 5}, timestamp_ms=70_000, partition=p)
    return driver.emitted()


@pytest.mark.parametrize("partitions", [1, 2, 3, 4])
def test_readme_example_gives_one_result_per_shop_and_minute(partitions: int) -> None:
    got = _readme_run(revenue(), partitions)
    assert [(e.key, e.start_ms, e.end_ms, e.value) for e in got] == [
        ("north", 0, 60_000, {"orders": 2, "revenue": 42})
    ]


def test_co_partitioned_skips_the_repartition_topic_and_its_risk_shows() -> None:
    """Declared co-partitioned although it is not: each source partition folds its own
    copy of the key (the documented risk)."""
    got = _readme_run(revenue(co_partitioned=True), 2)
    assert sorted(e.value["revenue"] for e in got) == [12, 30]
    assert [s.kind for s in compile_app(revenue(co_partitioned=True)).stages] == [
        StageKind.WINDOW
    ]


def test_record_key_operator_has_no_repartition_stage() -> None:
    op = Operator(name="clicks", source="c", sink="c-out", window=Tumbling(1_000),
                  aggregate=Count())
    topology = compile_app(App("a", [op]))
    assert [(s.name, s.kind, s.source) for s in topology.stages] == [
        ("clicks", StageKind.WINDOW, "c")
    ]
    assert not topology.repartition_topics


def test_rekeyed_operator_is_two_stages() -> None:
    topology = compile_app(App("shops", [revenue()]))
    rep, win = topology.stages
    topic = repartition_topic("shops", "revenue-per-shop")
    assert topic == "streamremat-shops-revenue-per-shop-repartition"
    assert (rep.kind, rep.source, rep.target) == (StageKind.REPARTITION, "orders", topic)
    assert (win.kind, win.source, win.operator.key_by, win.operator.steps) == (
        StageKind.WINDOW, topic, None, ()
    )
    # Dead letters of both stages go to the user operator's topic.
    assert win.operator.dead_letter_topic == rep.operator.dead_letter_topic == (
        "orders.revenue-per-shop.dlq"
    )
    assert topology.external_sources == ["orders"]
    assert topology.internal == {topic}


def _clicks_and_top(top_key_by: Any = None) -> App:
    clicks = Operator(
        name="clicks-per-user", source="clicks", sink="clicks-per-user-minute",
        window=Tumbling(60_000), aggregate=Count(), key_by=lambda c: c["user"],
        output=lambda user, start, end, n: {"user": user, "team": user[0], "n": n},
    )
    top = Operator(
        name="top-users", source=clicks.sink, sink="top-users-hour",
        window=Tumbling(3_600_000), aggregate=TopK(2, of="user", weight="n"),
        key_by=top_key_by,
    )
    return App("site", [top, clicks])  # any order: the topology sorts them


def _clicks(driver: TestDriver, partitions: int) -> None:
    users = ["ann", "bob", "ann", "cid", "ann", "bob", "abe"]
    for i, user in enumerate(users):
        driver.send(None, {"user": user}, timestamp_ms=1_000 * i, partition=i % partitions)
    if partitions > 1:
        driver.checkpoint()
        driver.crash()
        driver.send(None, {"user": "bob"}, timestamp_ms=10_000, partition=0)
        driver.recover()
    else:
        driver.send(None, {"user": "bob"}, timestamp_ms=10_000, partition=0)
    # Close the minute on every partition, then the hour downstream.
    for p in range(partitions):
        for user in ("ann", "bob", "cid", "abe", "dan", "eve"):
            driver.send(None, {"user": user}, timestamp_ms=3_700_000, partition=p)
    for p in range(partitions):
        for user in ("ann", "bob", "cid", "abe", "dan", "eve"):
            driver.send(None, {"user": user}, timestamp_ms=7_400_000, partition=p)


@pytest.mark.parametrize("partitions", [1, 4])
def test_chained_operator_reads_the_upstream_results(partitions: int) -> None:
    app = _clicks_and_top(top_key_by=lambda r: r["team"])
    assert [s.name for s in compile_app(app).stages] == [
        "clicks-per-user.repartition", "clicks-per-user", "top-users.repartition", "top-users"
    ]
    driver = TestDriver(app, partitions=partitions)
    _clicks(driver, partitions)
    minute = sorted((e.key, e.value) for e in driver.emitted()
                    if e.operator == "clicks-per-user" and e.end_ms == 60_000)
    assert minute == [("abe", 1), ("ann", 3), ("bob", 3), ("cid", 1)]
    hour = sorted((e.key, e.start_ms, e.value) for e in driver.emitted()
                  if e.operator == "top-users" and e.end_ms == 3_600_000)
    assert hour == [("a", 0, [("ann", 3), ("abe", 1)]), ("b", 0, [("bob", 3)]),
                    ("c", 0, [("cid", 1)])]


def test_chained_operator_keyed_by_record_key_does_not_repartition() -> None:
    app = _clicks_and_top()
    stages = compile_app(app).stages
    assert [(s.name, s.kind) for s in stages][-1] == ("top-users", StageKind.WINDOW)
    assert stages[-1].source == "clicks-per-user-minute"


def test_dead_letters_and_late_records_at_the_stage_where_they_arise() -> None:
    op = Operator(name="rev", source="orders", sink="out", window=Tumbling(10),
                  aggregate=Sum("amount"), key_by=lambda o: o["shop"], late_topic="late")
    driver = TestDriver(op, partitions=2)
    driver.send(None, b"{not json", timestamp_ms=1, partition=1)     # stage 1: value
    driver.send(None, {"amount": 1}, timestamp_ms=1, partition=0)    # stage 1: key
    driver.send(None, {"shop": "n"}, timestamp_ms=2, partition=1)    # stage 2: aggregate
    driver.send(None, {"shop": "n", "amount": 3}, timestamp_ms=50, partition=0)
    driver.send(None, {"shop": "n", "amount": 4}, timestamp_ms=5, partition=1)  # late
    stages = [(d.stage, d.operator) for d in driver.dead_letters()]
    assert stages == [("value", "rev"), ("key", "rev"), ("aggregate", "rev")]
    p = driver.dead_letters()[2].partition
    assert driver.dead_letters()[2].key == JSON.dumps("n")  # the repartition record
    [late] = driver.late()
    assert (late.key, late.timestamp_ms, late.stream_time_ms, late.partition) == (
        JSON.dumps("n"), 5, 50, p
    )


def test_cycles_and_shared_sinks_are_refused() -> None:
    a = Operator(name="a", source="x", sink="y", window=Tumbling(1), aggregate=Count())
    b = Operator(name="b", source="y", sink="x", window=Tumbling(1), aggregate=Count())
    with pytest.raises(ConfigError, match="cycle: a -> b -> a"):
        compile_app(App("c", [a, b]))
    c = Operator(name="c", source="z", sink="y", window=Tumbling(1), aggregate=Count())
    with pytest.raises(ConfigError, match="both write sink 'y'"):
        compile_app(App("c", [a, c]))
    with pytest.raises(ConfigError, match="repartition_partitions"):
        Operator(name="d", source="z", sink="w", window=Tumbling(1), aggregate=Count(),
                 repartition_partitions=0)
