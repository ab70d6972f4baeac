"""The worker in-process on the real broker: output, dead letters, late records,
retention gaps, tune. Outputs are checked against the brute-force reference
(``tests/expect.py``), never against the engine."""

from __future__ import annotations

import asyncio
import collections
import time
from typing import Any

import orjson
import pytest
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from streamremat import App, Count, Operator, Sum, Tumbling
from streamremat.runtime.explain import explain_app, format_explanations
from streamremat.runtime.kafka import ProducerRecord, consume_all, end_offsets, produce
from streamremat.runtime.outputs import (
    H_LATE_REASON,
    H_OPERATOR,
    H_REASON,
    H_SOURCE,
    H_STAGE,
)
from streamremat.runtime.settings import (
    CheckpointSettings,
    GapPolicy,
    Guarantee,
    WorkerSettings,
)
from streamremat.runtime.worker import Worker
from tests.expect import Expected, RefOperator, expected_output, results_of, rows_as_produced
from tests.integration.group_offsets import committed_total
from tests.integration.timing import LONG_SESSION_MS
from tests.unit.reference import RefWindow

PARTITIONS = 2


def _operator(source: str, sink: str) -> Operator:
    return Operator(
        name="agg", source=source, sink=sink, window=Tumbling(1_000),
        aggregate={"n": Count(), "total": Sum("x")},
    )


def _records(n: int, base_ms: int, bad_every: int = 0) -> list[ProducerRecord]:
    out = []
    for i in range(n):
        value = orjson.dumps({"x": i % 7})
        if bad_every and i % bad_every == 0:
            value = b"{not json" if i % 2 else orjson.dumps({"y": 1})
        out.append(ProducerRecord(b"k%d" % (i % 13), value, base_ms + i * 10, i % PARTITIONS))
    return out


def _count_sum(values: list[dict[str, Any]]) -> dict[str, int]:
    return {"n": len(values), "total": sum(v["x"] for v in values)}


def _reference(op: Operator, records: list[ProducerRecord], window: RefWindow) -> Expected:
    """The reference's output for ``records`` produced in this order to a fresh topic."""
    ref_op = RefOperator(op.name, op.source, op.sink, window, ("x",), _count_sum)
    return expected_output(ref_op, rows_as_produced(records))


def _expected(op: Operator, records: list[ProducerRecord]) -> collections.Counter[Any]:
    return _reference(op, records, RefWindow("tumbling", 1_000)).results


async def _sink_results(bootstrap: str, sink: str) -> collections.Counter[Any]:
    records = await consume_all(bootstrap, sink, isolation_level="read_committed")
    return results_of((r.key, r.value) for r in records)


async def _run_until_committed(worker: Worker, bootstrap: str, topic: str,
                               timeout_s: float = 60) -> int:
    task = asyncio.create_task(worker.run(handle_signals=False))
    target = sum((await end_offsets(bootstrap, topic)).values())
    deadline = time.monotonic() + timeout_s
    try:
        while await committed_total(bootstrap, worker.group_id, topic, PARTITIONS) < target:
            assert not task.done(), f"worker stopped early with {task.result()}"
            assert time.monotonic() < deadline, "worker did not catch up in time"
            await asyncio.sleep(0.2)
    finally:
        worker.stop()
    return await asyncio.wait_for(task, 60)


def _settings(bootstrap: str, tmp_path: Any, **kw: Any) -> WorkerSettings:
    checkpoints = kw.pop("checkpoints", CheckpointSettings(policy="fixed", interval_s=0.5))
    return WorkerSettings(bootstrap_servers=bootstrap, state_dir=str(tmp_path / "state"),
                          commit_interval_s=0.2, session_timeout_ms=LONG_SESSION_MS,
                          checkpoints=checkpoints, **kw)


@pytest.mark.parametrize("guarantee", [Guarantee.EXACTLY_ONCE, Guarantee.AT_LEAST_ONCE])
async def test_output_and_dead_letters(kafka_bootstrap: str, new_topic: Any, tmp_path: Any,
                                       guarantee: Guarantee) -> None:
    source = new_topic(PARTITIONS, {"retention.ms": "-1"})
    op = _operator(source, f"{source}-out")
    records = _records(3_000, int(time.time() * 1000) - 60_000, bad_every=97)
    await produce(kafka_bootstrap, source, records)
    worker = Worker(App(f"w-{source}", [op]),
                    _settings(kafka_bootstrap, tmp_path, guarantee=guarantee))
    assert await _run_until_committed(worker, kafka_bootstrap, source) == 0

    assert await _sink_results(kafka_bootstrap, op.sink) == _expected(op, records)
    dead = await consume_all(kafka_bootstrap, op.dead_letter_topic)
    bad = [r for i, r in enumerate(records) if i % 97 == 0]
    assert sorted(r.value for r in dead) == sorted(r.value for r in bad)
    stages = _reference(op, records, RefWindow("tumbling", 1_000)).dead_letters
    for r in dead:
        headers = dict(r.headers)
        assert headers[H_STAGE].decode() == stages[headers[H_SOURCE].decode()]
        assert headers[H_REASON]


async def test_restart_restores_and_tune_explains(kafka_bootstrap: str, new_topic: Any,
                                                  tmp_path: Any) -> None:
    source = new_topic(PARTITIONS, {"retention.ms": "-1"})
    op = _operator(source, f"{source}-out")
    app = App(f"t-{source}", [op])
    base = int(time.time() * 1000) - 60_000
    first, second = _records(2_000, base), _records(2_000, base + 20_000)
    await produce(kafka_bootstrap, source, first)
    settings = _settings(kafka_bootstrap, tmp_path, checkpoints=CheckpointSettings(
        policy="adaptive", min_interval_s=0.5, max_interval_s=2, rto_s=60))
    assert await _run_until_committed(Worker(app, settings), kafka_bootstrap, source) == 0
    await produce(kafka_bootstrap, source, second)
    assert await _run_until_committed(Worker(app, settings), kafka_bootstrap, source) == 0

    # Offsets of the second batch follow the first in each partition.
    assert await _sink_results(kafka_bootstrap, op.sink) == _expected(op, first + second)

    rows = await explain_app(app, settings)
    assert len(rows) == PARTITIONS
    assert all(row.decision is not None for row in rows)
    text = format_explanations(rows)
    assert "active bound" in text and "recovery if a failure happened now: predicted" in text


async def test_late_records_go_to_the_late_topic_saying_who_and_why(
    kafka_bootstrap: str, new_topic: Any, tmp_path: Any
) -> None:
    """Out-of-order records late for their window reach ``late_topic`` once each,
    with headers naming the operator, the source record and the reason."""
    source = new_topic(PARTITIONS, {"retention.ms": "-1"})
    op = Operator(
        name="late-agg", source=source, sink=f"{source}-out", window=Tumbling(1_000, grace_ms=50),
        aggregate={"n": Count(), "total": Sum("x")}, late_topic=f"{source}-late",
    )
    base = int(time.time() * 1000) - 60_000
    records = _records(2_000, base)
    # Every 25th record is 700 ms behind: late whenever that crosses a closed window.
    records = [r._replace(timestamp_ms=(r.timestamp_ms or 0) - 700) if i % 25 == 0 else r
               for i, r in enumerate(records)]
    await produce(kafka_bootstrap, source, records)
    assert await _run_until_committed(Worker(App(f"l-{source}", [op]),
                                             _settings(kafka_bootstrap, tmp_path)),
                                      kafka_bootstrap, source) == 0

    want = _reference(op, records, RefWindow("tumbling", 1_000, grace=50))
    assert await _sink_results(kafka_bootstrap, op.sink) == want.results
    late = await consume_all(kafka_bootstrap, f"{source}-late", isolation_level="read_committed")
    assert len(want.late) > 10
    got = collections.Counter(dict(r.headers)[H_SOURCE].decode() for r in late)
    assert got == collections.Counter(want.late)
    for r in late:
        headers = dict(r.headers)
        assert headers[H_OPERATOR] == b"late-agg"
        reason = headers[H_LATE_REASON].decode()
        assert reason.startswith(f"late: event time {r.timestamp_ms} ms, stream time "), reason
        assert "(grace 50 ms)" in reason, reason


async def _delete_records(bootstrap: str, topic: str, before: dict[int, int]) -> None:
    from aiokafka.admin.records_to_delete import RecordsToDelete

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.delete_records(
            {TopicPartition(topic, p): RecordsToDelete(o) for p, o in before.items()}
        )
    finally:
        await admin.close()


@pytest.mark.parametrize("policy", [GapPolicy.FAIL, GapPolicy.RESET])
async def test_retention_gap(kafka_bootstrap: str, new_topic: Any, tmp_path: Any,
                             policy: GapPolicy, caplog: pytest.LogCaptureFixture) -> None:
    source = new_topic(PARTITIONS, {"retention.ms": "-1"})
    op = _operator(source, f"{source}-out")
    app = App(f"g-{source}", [op])
    base = int(time.time() * 1000) - 60_000
    await produce(kafka_bootstrap, source, _records(1_000, base))
    settings = _settings(kafka_bootstrap, tmp_path, on_retention_gap=policy,
                         checkpoints=CheckpointSettings(policy="fixed", interval_s=3600,
                                                        replicate=False))
    assert await _run_until_committed(Worker(app, settings), kafka_bootstrap, source) == 0
    # Retention "deletes" records the checkpoints (taken at the clean stop) still need.
    await produce(kafka_bootstrap, source, _records(1_000, base + 20_000))
    ends = await end_offsets(kafka_bootstrap, source)
    await _delete_records(kafka_bootstrap, source, {p: ends[p] - 100 for p in ends})

    worker = Worker(app, settings)
    if policy is GapPolicy.FAIL:
        code = await asyncio.wait_for(worker.run(handle_signals=False), 60)
        assert code == 2
        assert any(source in r.getMessage() and "below the log start offset" in r.getMessage()
                   for r in caplog.records)
    else:
        assert await _run_until_committed(worker, kafka_bootstrap, source) == 0
        assert any("retention gap: skipping offsets" in r.getMessage() for r in caplog.records)
