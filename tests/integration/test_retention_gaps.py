"""Retention gaps at restart and during a replay, worker in-process on the real broker.

Records are removed with admin DeleteRecords. Under ``--on-retention-gap=fail``
the worker exits 2 with an error naming the topic, partition and both offsets,
and commits nothing more; under ``reset`` it logs the exact range it skipped,
counts it in ``streamremat_retention_gap_offsets_total`` and goes on. The sink
is compared with the brute-force reference over the records the worker could
still read (``tests/integration/gaps_support.py``).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer, TopicPartition
from prometheus_client import CollectorRegistry

from streamremat import App, Count, Operator, Sum, Tumbling
from streamremat.metrics.prometheus import PrometheusSensor
from streamremat.runtime.kafka import produce
from streamremat.runtime.settings import CheckpointSettings, GapPolicy, WorkerSettings
from streamremat.runtime.worker import Worker
from tests.integration.gaps_support import (
    committed,
    delete_records,
    emitted_after,
    make_records,
    read_sink,
    reference_emissions,
)

pytestmark = pytest.mark.timeout(240)

OPERATOR = "sums"


def _app(source: str) -> App:
    op = Operator(name=OPERATOR, source=source, sink=f"{source}-out", window=Tumbling(1_000),
                  aggregate={"n": Count(), "total": Sum("x")})
    return App(f"gap-{source}", [op])


#: Every run stops cleanly (it leaves the group), so no test waits for a session to
#: expire. A short one let a loaded machine's stall (heartbeats starved, a blocked loop)
#: evict a worker while it recovered: its partition was assigned again and recovered
#: twice, and the second recovery saw the deleted records as a restart gap instead of
#: the replay's (CI failed so once).
SESSION_TIMEOUT_MS = 30_000


def _settings(bootstrap: str, state_dir: Path, policy: GapPolicy = GapPolicy.FAIL,
              **kw: Any) -> WorkerSettings:
    # No checkpoint but the clean stop's (interval 1 h), none in Kafka: each test
    # decides which checkpoint a run finds by its state dir.
    checkpoints = CheckpointSettings(policy="fixed", interval_s=3600, replicate=False)
    return WorkerSettings(bootstrap_servers=bootstrap, state_dir=str(state_dir),
                          commit_interval_s=0.2, session_timeout_ms=SESSION_TIMEOUT_MS,
                          on_retention_gap=policy, checkpoints=checkpoints, **kw)


class Metrics:
    def __init__(self, app: App) -> None:
        self.registry = CollectorRegistry()
        self.sensor = PrometheusSensor(app.name, registry=self.registry)
        self.app = app.name

    def value(self, name: str) -> float | None:
        labels = {"app": self.app, "operator": OPERATOR, "partition": "0"}
        sample: float | None = self.registry.get_sample_value(name, labels)
        return sample


async def _run_until(worker: Worker, topic: str, target: int,
                     before_stop: Callable[[], None] = lambda: None) -> int:
    """Run ``worker`` until the group committed ``target`` on partition 0; stop it."""
    bootstrap = worker.settings.bootstrap_servers
    task = asyncio.create_task(worker.run(handle_signals=False))
    deadline = time.monotonic() + 60
    try:
        while (await committed(bootstrap, worker.group_id, topic) or 0) < target:
            assert not task.done(), f"worker stopped early with {task.result()}"
            assert time.monotonic() < deadline, "worker did not catch up in time"
            await asyncio.sleep(0.2)
        before_stop()  # series of a task go away when it is revoked
    finally:
        worker.stop()
    return await asyncio.wait_for(task, 60)


def _messages(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(r.getMessage() for r in caplog.records)


class DeletesAfterLogStartRead(Worker):
    """Runs DeleteRecords (for real) right after recovery read the log start and
    before it seeks: the replay's first fetch is then below the new log start."""

    delete_before: int | None = None

    async def _fetch_committed(self, tp: TopicPartition) -> tuple[int | None, str]:
        if self.delete_before is not None:
            await delete_records(self.settings.bootstrap_servers, tp.topic, self.delete_before)
            self.delete_before = None
        return await super()._fetch_committed(tp)


@pytest.mark.parametrize("policy", [GapPolicy.FAIL, GapPolicy.RESET])
async def test_checkpoint_falls_below_the_log_start_during_replay(
    kafka_bootstrap: str, new_topic: Any, tmp_path: Path, policy: GapPolicy,
    caplog: pytest.LogCaptureFixture,
) -> None:
    source = new_topic(1, {"retention.ms": "-1"})
    app = _app(source)
    records = make_records(1_800, int(time.time() * 1000) - 60_000, seed=7)
    # State dir a: a checkpoint at 600. State dir b: rebuilt from 0, committed 1200.
    await produce(kafka_bootstrap, source, records[:600])
    assert await _run_until(Worker(app, _settings(kafka_bootstrap, tmp_path / "a")),
                            source, 600) == 0
    await produce(kafka_bootstrap, source, records[600:1200])
    assert await _run_until(Worker(app, _settings(kafka_bootstrap, tmp_path / "b")),
                            source, 1200) == 0
    await produce(kafka_bootstrap, source, records[1200:])
    # Back on a: replay [600, 1200) from its checkpoint, while [600, 900) is deleted.
    metrics = Metrics(app)
    worker = DeletesAfterLogStartRead(app, _settings(kafka_bootstrap, tmp_path / "a", policy),
                                      metrics.sensor)
    worker.delete_before = 900
    caplog.clear()
    caplog.set_level(logging.INFO, logger="streamremat.worker")  # shown when it fails
    if policy is GapPolicy.FAIL:
        code = await asyncio.wait_for(worker.run(handle_signals=False), 60)
        assert code == 2, _messages(caplog)
        assert (f"{source}[0]: the next offset to read (replaying) 600 is below the log start "
                "offset 900" in _messages(caplog)), _messages(caplog)
        assert await committed(kafka_bootstrap, worker.group_id, source) == 1200, (
            _messages(caplog))
        expected = Counter(reference_emissions(records[:1200]))
    else:
        skipped: list[float | None] = []
        assert await _run_until(worker, source, 1800, lambda: skipped.append(
            metrics.value("streamremat_retention_gap_offsets_total"))) == 0
        assert skipped == [300.0]
        assert (f"{source}[0]: retention gap: skipping offsets [600, 900) (300 records)"
                in _messages(caplog)), _messages(caplog)
        # Runs a and b emitted the failure-free results up to 1200; run three's state
        # lacks [600, 900) and emits what closes after offset 1200.
        expected = Counter(reference_emissions(records[:1200]))
        expected += emitted_after(records[:600] + records[900:], 900)
    got = await read_sink(kafka_bootstrap, f"{source}-out")
    assert sum(expected.values()) > 50
    assert got == expected, _messages(caplog)


@pytest.mark.parametrize("policy", [GapPolicy.FAIL, GapPolicy.RESET])
async def test_restart_without_checkpoint_when_committed_offset_is_below_log_start(
    kafka_bootstrap: str, new_topic: Any, tmp_path: Path, policy: GapPolicy,
    caplog: pytest.LogCaptureFixture,
) -> None:
    source = new_topic(1, {"retention.ms": "-1"})
    app = _app(source)
    records = make_records(1_200, int(time.time() * 1000) - 60_000, seed=8)
    await produce(kafka_bootstrap, source, records[:600])
    assert await _run_until(Worker(app, _settings(kafka_bootstrap, tmp_path / "a")),
                            source, 600) == 0
    await produce(kafka_bootstrap, source, records[600:])
    await delete_records(kafka_bootstrap, source, 900)
    # A new machine (no checkpoint anywhere): records [600, 900) were never processed.
    metrics = Metrics(app)
    worker = Worker(app, _settings(kafka_bootstrap, tmp_path / "b", policy), metrics.sensor)
    caplog.clear()
    if policy is GapPolicy.FAIL:
        assert await asyncio.wait_for(worker.run(handle_signals=False), 60) == 2
        assert (f"{source}[0]: committed offset (no usable checkpoint) 600 is below the log "
                "start offset 900" in _messages(caplog)), _messages(caplog)
        assert await committed(kafka_bootstrap, worker.group_id, source) == 600
        expected = Counter(reference_emissions(records[:600]))
    else:
        skipped: list[float | None] = []
        assert await _run_until(worker, source, 1200, lambda: skipped.append(
            metrics.value("streamremat_retention_gap_offsets_total"))) == 0
        assert skipped == [300.0]
        assert (f"{source}[0]: retention gap: skipping offsets [600, 900) (300 records)"
                in _messages(caplog)), _messages(caplog)
        expected = Counter(reference_emissions(records[:600]))
        expected += Counter(reference_emissions(records[900:]))
    got = await read_sink(kafka_bootstrap, f"{source}-out")
    assert sum(expected.values()) > 20
    assert got == expected


async def test_new_group_starts_at_the_log_start_and_says_so(
    kafka_bootstrap: str, new_topic: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    """Not a gap: the group never committed anything, so nothing was skipped."""
    caplog.set_level(logging.INFO, logger="streamremat.worker")
    source = new_topic(1, {"retention.ms": "-1"})
    app = _app(source)
    records = make_records(600, int(time.time() * 1000) - 60_000, seed=9)
    await produce(kafka_bootstrap, source, records)
    await delete_records(kafka_bootstrap, source, 200)
    metrics = Metrics(app)
    skipped: list[float | None] = []
    worker = Worker(app, _settings(kafka_bootstrap, tmp_path / "a"), metrics.sensor)
    assert await _run_until(worker, source, 600, lambda: skipped.append(
        metrics.value("streamremat_retention_gap_offsets_total"))) == 0
    text = _messages(caplog)
    assert (f"{source}[0]: recovered: checkpoint offset None, committed offset none (new group, "
            "from offset 200), replayed 0 records" in text), text
    assert "retention gap" not in text
    assert skipped == [0.0]
    assert await read_sink(kafka_bootstrap, f"{source}-out") == Counter(
        reference_emissions(records[200:]))


async def _produce_transactions(bootstrap: str, topic: str, records: list[Any],
                                size: int, abort: set[int]) -> tuple[list[Any], int]:
    """``records`` in transactions of ``size``, aborting the ``abort``-th ones; return
    the committed records and the offset after the last committed one."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5,
                                transactional_id=f"source-{uuid.uuid4().hex[:8]}")
    await producer.start()
    kept, after = [], 0
    try:
        for n, i in enumerate(range(0, len(records), size)):
            chunk = records[i:i + size]
            await producer.begin_transaction()
            futures = [await producer.send(topic, r.value, key=r.key, partition=0,
                                           timestamp_ms=r.timestamp_ms) for r in chunk]
            sent = await asyncio.gather(*futures)
            if n in abort:
                await producer.abort_transaction()
            else:
                await producer.commit_transaction()
                kept.extend(chunk)
                after = sent[-1].offset + 1
    finally:
        await producer.stop()
    return kept, after


async def test_transaction_markers_and_aborted_records_are_no_gap(
    kafka_bootstrap: str, new_topic: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    """A transactional source skips an offset per commit marker and every aborted
    record. Small batches start past the position again and again, live and in a
    replay; under the default ``fail`` none of it is a gap."""
    source = new_topic(1, {"retention.ms": "-1"})
    app = _app(source)
    records = make_records(1_200, int(time.time() * 1000) - 60_000, seed=14)
    kept1, k1 = await _produce_transactions(kafka_bootstrap, source, records[:600], 70, {2})
    assert await _run_until(Worker(app, _settings(kafka_bootstrap, tmp_path / "a",
                                                  max_batch_records=50)), source, k1) == 0
    # A new machine: rebuilt from offset 0, a replay over markers and aborted records;
    # then transactions arrive while it is live, each fetched after its marker.
    worker = Worker(app, _settings(kafka_bootstrap, tmp_path / "b", max_batch_records=50))
    task = asyncio.create_task(worker.run(handle_signals=False))
    try:
        kept2, k2 = await _produce_transactions(kafka_bootstrap, source, records[600:], 70,
                                                {1, 5})
        deadline = time.monotonic() + 60
        while (await committed(kafka_bootstrap, worker.group_id, source) or 0) < k2:
            assert not task.done(), f"worker stopped with {task.result()}\n{_messages(caplog)}"
            assert time.monotonic() < deadline, _messages(caplog)
            await asyncio.sleep(0.2)
    finally:
        worker.stop()
    assert await asyncio.wait_for(task, 60) == 0
    text = _messages(caplog)
    assert "retention gap" not in text and "below the log start" not in text, text
    expected = Counter(reference_emissions(kept1 + kept2))
    assert sum(expected.values()) > 50
    assert await read_sink(kafka_bootstrap, f"{source}-out") == expected
