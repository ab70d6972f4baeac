"""docs/records.md and the defaults in docs/tuning.md say what the code does: the
examples run, and every header, stage, record shape, topic name and default the
pages state is read from (or produced by) the code here."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson
import pytest

from streamremat import (
    RAW,
    STRING,
    App,
    ApproxQuantiles,
    Collect,
    Count,
    Mean,
    Median,
    Operator,
    Quantiles,
    Sum,
    TopK,
    Tumbling,
)
from streamremat.core.records import BatchOutput, LateRecord, Record
from streamremat.core.task import Task
from streamremat.core.topology import repartition_topic
from streamremat.runtime.outputs import (
    H_LATE_REASON,
    H_OPERATOR,
    H_REASON,
    H_SOURCE,
    H_STAGE,
    H_WINDOW,
    partition_for,
    to_records,
)
from streamremat.runtime.scheduling import tuner_config
from streamremat.runtime.settings import CheckpointSettings, WorkerSettings
from streamremat.testing import TestDriver
from streamremat.tuning import TunerConfig
from streamremat.tuning.simulate import SIMULATION_PRIOR_MTBF_S

ROOT = Path(__file__).resolve().parents[2]
RECORDS = (ROOT / "docs" / "records.md").read_text()
TUNING = (ROOT / "docs" / "tuning.md").read_text()


def _section(title: str) -> str:
    return RECORDS.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def _table_first_column(text: str) -> list[str]:
    return re.findall(r"^\| `([^`]+)` \|", text, flags=re.M)


def test_examples_run_as_written() -> None:
    blocks = re.findall(r"```python\n(.*?)```", RECORDS, flags=re.S)
    assert len(blocks) == 2
    for block in blocks:
        exec(compile(block, "docs/records.md", "exec"), {})


def test_header_names_are_the_code_s() -> None:
    assert _table_first_column(_section("Dead letters")) == [H_STAGE, H_REASON, H_OPERATOR,
                                                            H_SOURCE]
    assert _table_first_column(_section("Late records")) == [H_LATE_REASON, H_OPERATOR, H_SOURCE]
    assert _table_first_column(_section("Failed windows")) == [H_STAGE, H_REASON, H_OPERATOR,
                                                              H_SOURCE, H_WINDOW]


def _dead_letter_stages(driver: TestDriver) -> list[str]:
    return [d.stage for d in driver.dead_letters()]


def test_every_documented_dead_letter_stage_happens_for_the_documented_cause() -> None:
    row = next(line for line in _section("Dead letters").splitlines()
               if line.startswith(f"| `{H_STAGE}`"))
    stages = re.sub(r"\([^)]*\)", "", row.split("where it failed:", 1)[1])  # drop the why
    documented = re.findall(r"`(\w+)`", stages)
    assert documented == ["value", "step", "key", "timestamp", "aggregate", "repartition"]

    def boom(value: Any) -> Any:
        raise RuntimeError("user step failed")

    base = dict(name="op", source="in", sink="out", window=Tumbling(1_000),
                aggregate={"n": Count(), "total": Sum("x")})
    plain = TestDriver(Operator(**base))  # type: ignore[arg-type]
    plain.send(b"k", b"not json", timestamp_ms=1)
    plain.send(None, {"x": 1}, timestamp_ms=1)
    plain.send(b"k", {"y": 1}, timestamp_ms=1)
    assert _dead_letter_stages(plain) == ["value", "key", "aggregate"]
    step = TestDriver(Operator(**base).filter(boom))  # type: ignore[arg-type]
    step.send(b"k", {"x": 1}, timestamp_ms=1)
    assert _dead_letter_stages(step) == ["step"]
    stamped = TestDriver(Operator(**base, timestamp_by="at"))  # type: ignore[arg-type]
    stamped.send(b"k", {"x": 1, "at": "noon"}, timestamp_ms=1)
    stamped.send(b"k", {"x": 1, "at": -5}, timestamp_ms=1)
    assert _dead_letter_stages(stamped) == ["timestamp", "timestamp"]
    # A mapped value that JSON cannot encode fails in the repartition stage.
    rekeyed = TestDriver(App("a", [Operator(**base, key_by=lambda v: v["x"])  # type: ignore[arg-type]
                                   .map(lambda v: {**v, "bad": {1, 2}})]))
    rekeyed.send(b"k", {"x": 1}, timestamp_ms=1)
    assert _dead_letter_stages(rekeyed) == ["repartition"]


def _sink_record(op: Operator, records: list[Record]) -> Any:
    out = Task(op, 0).process(records)
    (result,) = [r for r in to_records(op, 0, out) if r.topic == op.sink]
    return result


def test_default_output_record_matches_the_documented_example() -> None:
    """The TopK example's value, byte for byte (sorted keys), key, timestamp, headers."""
    example = re.search(r"writes\nthe value `(\{.*?\})`", RECORDS, flags=re.S)
    assert example is not None
    op = Operator(name="pages", source="clicks", sink="pages-out", window=Tumbling(60_000),
                  aggregate={"clicks": Count(), "top": TopK(2, of="page")})
    pages = ["/a", "/b", "/a"]
    records = [Record(b"user-1", orjson.dumps({"page": p}), 1_000 * (i + 1), i)
               for i, p in enumerate(pages)]
    records.append(Record(b"user-1", orjson.dumps({"page": "/c"}), 61_000, 3))
    rec = _sink_record(op, records)
    assert rec.value == example.group(1).replace(", ", ",").replace(": ", ":").encode()
    assert rec.key == b"user-1"  # the source key, unchanged
    assert rec.timestamp_ms == 60_000  # end_ms
    assert rec.headers == []


def test_key_by_keys_are_json_encoded_with_the_quotes() -> None:
    driver = TestDriver(App("a", [Operator(name="op", source="in", sink="out",
                                           window=Tumbling(1_000), aggregate=Count(),
                                           key_by=lambda v: v["shop"])]))
    driver.send(b"x", {"shop": "north"}, timestamp_ms=1)
    repartition = repartition_topic("a", "op")
    assert [r.key for r in driver.topic_log(repartition)] == [b'"north"']
    assert "`streamremat-<app>-<operator>-repartition`" in _section("Topics the worker creates")


def test_value_shapes_per_aggregation() -> None:
    op = Operator(name="op", source="in", sink="out", window=Tumbling(1_000),
                  aggregate={"n": Count(), "mean": Mean("x"), "all": Collect("x")})
    records = [Record(b"k", orjson.dumps({"x": x}), t, i)
               for i, (x, t) in enumerate([(1, 10), (2, 20), (9, 2_000)])]
    value = orjson.loads(_sink_record(op, records).value)["value"]
    assert value == {"n": 2, "mean": 1.5, "all": [1, 2]}
    assert isinstance(value["mean"], float)
    quantiles = Operator(name="op", source="in", sink="out", window=Tumbling(1_000),
                         aggregate={"q": Quantiles("x", [0.0, 0.5]), "med": Median("x"),
                                    "aq": ApproxQuantiles("x", [1.0])})
    value = orjson.loads(_sink_record(quantiles, records).value)["value"]
    assert value == {"q": [1, 1.5], "med": 1.5, "aq": [2.0]}


def test_custom_output_gets_the_key_decoded_with_key_serde() -> None:
    """The example's comment: key b"user-0096", timestamp 60000, that value."""
    note = re.search(r"key (b\"user-0096\"), timestamp (\d+), value\n# (\{.*?\})\n", RECORDS)
    assert note is not None
    op = Operator(name="clicks-per-user", source="clicks", sink="clicks-per-user-minute",
                  window=Tumbling(60_000), aggregate=Count(), key_serde=STRING,
                  output=lambda user, start_ms, end_ms, n: {"user": user, "minute": start_ms,
                                                            "clicks": n})
    records = [Record(b"user-0096", b'{"page": "/a"}', t, i)
               for i, t in enumerate((1_000, 2_000, 61_000))]
    rec = _sink_record(op, records)
    assert (rec.key, rec.timestamp_ms, rec.value) == (
        b"user-0096", int(note.group(2)), note.group(3).encode())
    raw = Operator(name="r", source="clicks", sink="o", window=Tumbling(60_000),
                   aggregate=Count(), key_serde=RAW, output=lambda k, s, e, n: [repr(k), n])
    assert orjson.loads(_sink_record(raw, records).value) == ["b'user-0096'", 2]


def test_results_are_partitioned_by_murmur2_of_the_key() -> None:
    from aiokafka.partitioner import murmur2

    for key in (b"user-0096", b'"north"', b"k1"):
        for n in (1, 3, 4, 12):
            assert partition_for(key, n) == (murmur2(key) & 0x7FFFFFFF) % n


def test_late_reason_header_has_the_documented_form() -> None:
    template = re.search(r"`(late: event time T ms[^`]*)`", _section("Late records"))
    assert template is not None
    pattern = re.escape(template.group(1))
    for name in ("T", "S", "G"):
        pattern = pattern.replace(rf"\ {name}\ ms", r"\ \d+\ ms")
    op = Operator(name="op", source="in", sink="out", window=Tumbling(1_000, grace_ms=7),
                  aggregate=Count(), late_topic="late")
    src = Record(b"k", b"{}", 5, 42)
    out = BatchOutput(late=[LateRecord(src, 5, 2_000)])
    (rec,) = to_records(op, 3, out)
    headers = dict(rec.headers)
    assert re.fullmatch(pattern, headers[H_LATE_REASON].decode()), headers
    assert "event time 5 ms, stream time 2000 ms (grace 7 ms)" in headers[H_LATE_REASON].decode()
    assert headers[H_OPERATOR] == b"op" and headers[H_SOURCE] == b"in/3/42"
    assert (rec.topic, rec.key, rec.value, rec.timestamp_ms) == ("late", b"k", b"{}", 5)


def test_topic_and_group_names() -> None:
    app = App("shop", [Operator(name="op", source="orders", sink="o", window=Tumbling(1_000),
                                aggregate=Count())])
    section = _section("Topics the worker creates")
    assert app.operators["op"].dead_letter_topic == "orders.op.dlq"
    assert "default `<source>.<operator>.dlq`" in section
    assert app.checkpoint_topic == "streamremat-shop-checkpoints"
    assert "`streamremat-<app>-checkpoints`" in section
    assert app.group_id == "streamremat-shop" and "default\n`streamremat-<app>`" in section


@pytest.mark.parametrize("prose, value", [
    ("default MTBF {:g} h", TunerConfig().prior_mtbf_s / 3600),
    ("the\nsimulator below uses {:g} h", SIMULATION_PRIOR_MTBF_S / 3600),
    ("decay with a {:g} h half-life", TunerConfig().failure_half_life_s / 3600),
    ("with a {:g} h half-life sees a *rise*", TunerConfig().failure_fast_half_life_s / 3600),
    ("The prior is `a0 = {:g}`", TunerConfig().prior_failures),
    ("(15 s in `TunerConfig`", None),
])
def test_tuning_doc_prose_defaults(prose: str, value: float | None) -> None:
    """The defaults docs/tuning.md states in its text (the flag table is checked in
    test_cli_settings.py) come from the code."""
    if value is None:
        assert prose in TUNING and TunerConfig().prior_downtime_s == 15.0
        return
    assert prose.format(value) in TUNING


def test_worker_prior_downtime_is_session_timeout_plus_2_s() -> None:
    detect_s = WorkerSettings(worker_id="w").session_timeout_ms / 1000
    assert tuner_config(CheckpointSettings(), detect_s).prior_downtime_s == detect_s + 2.0
    assert "the worker uses the session timeout + 2 s" in TUNING
    assert "before any recovery is the session timeout plus 2 s" in TUNING
