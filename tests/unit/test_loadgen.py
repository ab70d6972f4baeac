"""`streamremat loadgen`: the records it makes feed the ready-made operators as intended."""

from __future__ import annotations

import json
from collections import Counter

import orjson
import pytest

from operators import clicks, sessions, top_products
from streamremat.cli import build_parser
from streamremat.core.records import Record
from streamremat.core.task import Task
from streamremat.dev.loadgen import (
    DEFAULT_TOPICS,
    HEADER,
    LoadgenConfig,
    RecordGenerator,
    backfill_records,
)
from streamremat.runtime.outputs import OutRecord

NOW = 1_750_000_000_000  # any current-looking time: generation takes it as an argument


def source_records(records: list[OutRecord]) -> list[Record]:
    return [
        Record(r.key, r.value, r.timestamp_ms, offset=i, headers=tuple(r.headers))
        for i, r in enumerate(records)
    ]


def tag(record: OutRecord) -> bytes | None:
    return dict(record.headers).get(HEADER)


@pytest.mark.parametrize("kind", ["clicks", "sessions", "orders"])
def test_same_seed_same_records(kind: str) -> None:
    a = RecordGenerator(kind, "t", keys=50, bad_ratio=0.1, late_ratio=0.1, seed=7)
    b = RecordGenerator(kind, "t", keys=50, bad_ratio=0.1, late_ratio=0.1, seed=7)
    assert a.batch(500, NOW) == b.batch(500, NOW)
    c = RecordGenerator(kind, "t", keys=50, bad_ratio=0.1, late_ratio=0.1, seed=8)
    assert a.batch(100, NOW) != c.batch(100, NOW)


def test_clicks_shape_and_keys() -> None:
    gen = RecordGenerator("clicks", "clicks", keys=20, seed=1)
    records = gen.batch(2000, NOW)
    users = set()
    for r in records:
        value = json.loads(r.value or b"")
        assert set(value) == {"user", "url", "device"}
        assert r.key == value["user"].encode()  # keyed by user: one user, one partition
        assert r.timestamp_ms == NOW and r.headers == [] and r.topic == "clicks"
        users.add(value["user"])
    assert len(users) == 20


def test_orders_shape_keyed_by_category_with_fixed_prices() -> None:
    gen = RecordGenerator("orders", "orders", keys=30, seed=1)
    price_of: dict[str, float] = {}
    category_of: dict[str, str] = {}
    for r in gen.batch(3000, NOW):
        value = json.loads(r.value or b"")
        assert set(value) == {"product", "price", "quantity", "category"}
        assert r.key == value["category"].encode()
        assert value["quantity"] >= 1 and value["price"] > 0
        assert price_of.setdefault(value["product"], value["price"]) == value["price"]
        assert category_of.setdefault(value["product"], value["category"]) == value["category"]
    assert len(price_of) == 30


def test_sessions_users_click_in_bursts_then_go_quiet() -> None:
    gen = RecordGenerator("sessions", "clicks", keys=200, seed=3)
    users = [json.loads(r.value or b"")["user"] for r in gen.batch(5000, NOW)]
    assert len(set(users)) > 40  # users rotate through the active set
    # Few users are active at a time (bursts), unlike clicks' uniform spread.
    plain = RecordGenerator("clicks", "clicks", keys=200, seed=3)
    uniform = [json.loads(r.value or b"")["user"] for r in plain.batch(5000, NOW)]
    assert len(set(users[1000:1200])) < 45 < len(set(uniform[1000:1200]))


@pytest.mark.parametrize("kind", ["clicks", "sessions", "orders"])
def test_ratios_of_bad_and_late_records(kind: str) -> None:
    gen = RecordGenerator(kind, "t", keys=100, bad_ratio=0.1, late_ratio=0.05,
                          late_by_ms=300_000, seed=11)
    records = gen.batch(20_000, NOW)
    tags = Counter(b"bad" if (t := tag(r)) and t.startswith(b"bad:") else t for r in records)
    assert 0.08 < tags[b"bad"] / len(records) < 0.12
    assert 0.035 < tags[b"late"] / len(records) < 0.065
    for r in records:
        if tag(r) == b"late":
            assert r.timestamp_ms == NOW - 300_000
        else:
            assert r.timestamp_ms == NOW
    shapes = {tag(r) for r in records if (tag(r) or b"").startswith(b"bad:")}
    assert len(shapes) >= 3  # several kinds of malformed input, not one


@pytest.mark.parametrize(
    ("kind", "operator"),
    [("clicks", clicks.operator), ("sessions", sessions.operator),
     ("orders", top_products.operator)],
)  # fmt: skip
def test_the_operator_accepts_good_records_and_dead_letters_bad_ones(
    kind: str, operator: object
) -> None:
    gen = RecordGenerator(kind, DEFAULT_TOPICS[kind], keys=50, bad_ratio=0.2, seed=5)
    records = gen.batch(2000, NOW)
    bad = sum(1 for r in records if tag(r))
    task = Task(operator, 0)  # type: ignore[arg-type]
    out = task.process(source_records(records))
    assert len(out.dead_letters) == bad > 0
    assert {d.stage for d in out.dead_letters} >= {"value", "key"} or kind == "orders"
    assert task.open_windows() > 0


def test_late_records_are_late_for_the_clicks_operator() -> None:
    gen = RecordGenerator("clicks", "clicks", keys=10, late_ratio=0.1, seed=2)
    warmup = RecordGenerator("clicks", "clicks", keys=10, seed=3).batch(10, NOW)
    records = warmup + gen.batch(1000, NOW)
    late = sum(1 for r in records if tag(r) == b"late")
    task = Task(clicks.operator, 0)
    out = task.process(source_records(records))
    assert len(out.late) == late > 0


def test_backfill_spreads_timestamps_and_closes_windows() -> None:
    gen = RecordGenerator("clicks", "clicks", keys=10, seed=1)
    records = backfill_records(gen, 1300, NOW, 130_000)
    stamps = [r.timestamp_ms or 0 for r in records]
    assert stamps == sorted(stamps)
    assert stamps[0] == NOW - 130_000 and NOW - 1000 < stamps[-1] < NOW
    task = Task(clicks.operator, 0)
    out = task.process(source_records(records))
    assert out.results  # at least one minute window closed: results come out at once
    assert backfill_records(gen, 0, NOW, 1000) == []


def test_values_are_compact_json() -> None:
    r = RecordGenerator("clicks", "clicks", keys=1, seed=1).next(NOW)
    assert r.value == orjson.dumps(orjson.loads(r.value or b""))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"kind": "nope"}, {"rate": -1}, {"events": -1}, {"keys": 0}, {"partitions": 0},
        {"bad_ratio": 1.5}, {"late_ratio": -0.1}, {"bad_ratio": 0.6, "late_ratio": 0.6},
        {"backfill_s": 10, "rate": 0},
    ],
)  # fmt: skip
def test_config_rejects_nonsense(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        LoadgenConfig(bootstrap="x:1", topic="t", **kwargs)  # type: ignore[arg-type]


def test_cli_flags() -> None:
    args = build_parser().parse_args(
        ["loadgen", "--kind", "orders", "--rate", "50", "--events", "10", "--keys", "5",
         "--partitions", "3", "--bad-ratio", "0.1", "--late-ratio", "0.2", "--late-by", "60",
         "--backfill", "30", "--seed", "1", "--bootstrap", "k:9092"]
    )  # fmt: skip
    assert args.command == "loadgen"
    assert (args.kind, args.rate, args.events, args.keys, args.partitions) == (
        "orders", 50.0, 10, 5, 3
    )  # fmt: skip
    assert (args.bad_ratio, args.late_ratio, args.late_by, args.backfill) == (0.1, 0.2, 60, 30)
    defaults = build_parser().parse_args(["loadgen"])
    assert defaults.topic is None and defaults.events is None  # topic from kind; unbounded
