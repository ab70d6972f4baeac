"""While one partition writes a checkpoint, the worker's other partitions go on:
only the checkpointing partition is paused (as Kafka Streams does), and the
output is still exactly the reference's.

The checkpoint of partition 0 is held at its local write (a gate around the real
RocksDB store's ``append``, as a large checkpoint's encode and synced write would
hold it for seconds); meanwhile partition 1 must process and commit new records.
Before, the worker's loop awaited each checkpoint write, so no partition moved
until it was done."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from streamremat import App
from streamremat.runtime.kafka import ProducerRecord, end_offsets, produce
from streamremat.runtime.settings import CheckpointSettings
from streamremat.runtime.worker import Worker
from streamremat.state.frame import CheckpointFrame
from streamremat.state.kafka import KafkaCheckpointStore
from streamremat.state.rocksdb import RocksDBCheckpointStore
from tests.integration.test_worker import _expected, _operator, _settings, _sink_results


def _rows(n: int, base_ms: int, partition: int, first: int = 0) -> list[ProducerRecord]:
    return [ProducerRecord(b"k%d" % (i % 13), orjson.dumps({"x": i % 7}),
                           base_ms + i * 10, partition) for i in range(first, first + n)]


async def _committed(bootstrap: str, group: str, tp: TopicPartition) -> int:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                                enable_auto_commit=False)
    await consumer.start()
    try:
        return await consumer.committed(tp) or 0
    finally:
        await consumer.stop()


@pytest.mark.timeout(300)
async def test_other_partitions_go_on_while_one_writes_a_checkpoint(
    kafka_bootstrap: str, new_topic: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    source = new_topic(2, {"retention.ms": "-1"})
    op = _operator(source, f"{source}-out")
    base = int(time.time() * 1000) - 600_000
    first = _rows(500, base, 0) + _rows(500, base, 1)
    await produce(kafka_bootstrap, source, first)

    held, release = asyncio.Event(), asyncio.Event()
    real_append = RocksDBCheckpointStore.append

    async def gated(self: RocksDBCheckpointStore, frame: CheckpointFrame) -> None:
        if frame.task.partition == 0 and not release.is_set():
            held.set()
            await release.wait()
        await real_append(self, frame)

    monkeypatch.setattr(RocksDBCheckpointStore, "append", gated)
    worker = Worker(App(f"w-{source}", [op]), _settings(
        kafka_bootstrap, tmp_path, checkpoints=CheckpointSettings(
            policy="fixed", interval_s=0.5, replicate=False)))
    task = asyncio.create_task(worker.run(handle_signals=False))
    p1 = TopicPartition(source, 1)
    second: list[ProducerRecord] = []
    try:
        await asyncio.wait_for(held.wait(), 60)  # partition 0's checkpoint is writing
        second = _rows(300, base + 5_000, 1, first=500)
        await produce(kafka_bootstrap, source, second)
        target = (await end_offsets(kafka_bootstrap, source))[1]
        deadline = time.monotonic() + 30
        while await _committed(kafka_bootstrap, worker.group_id, p1) < target:
            assert not task.done(), f"worker stopped early with {task.result()}"
            assert time.monotonic() < deadline, (
                "partition 1 did not commit its new records while partition 0 checkpointed")
            await asyncio.sleep(0.2)
        assert not release.is_set() and held.is_set()  # still held all along
    finally:
        release.set()
        await asyncio.sleep(1.0)  # partition 0's checkpoint lands, it resumes
        worker.stop()
    assert await asyncio.wait_for(task, 60) == 0
    assert await _sink_results(kafka_bootstrap, op.sink) == _expected(op, first + second)


@pytest.mark.timeout(300)
async def test_a_checkpoint_proven_before_a_process_stop_is_not_written_after_it(
    kafka_bootstrap: str, new_topic: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Two operators: partition 0's checkpoint writes one task, then its second one
    is held; meanwhile the whole process stands still past the session timeout (a
    blocking sleep on the loop, as a SIGSTOP would). The held write must not land
    afterwards: the partition may be another worker's by then."""
    source = new_topic(1, {"retention.ms": "-1"})
    ops = [_operator(source, f"{source}-out"),
           dataclasses.replace(_operator(source, f"{source}-out2"), name="agg2")]
    await produce(kafka_bootstrap, source, _rows(300, int(time.time() * 1000) - 600_000, 0))
    held, release = asyncio.Event(), asyncio.Event()
    written: list[str] = []
    real_append = RocksDBCheckpointStore.append

    async def gated(self: RocksDBCheckpointStore, frame: CheckpointFrame) -> None:
        if frame.task.operator == "agg" and not release.is_set():
            held.set()
            await release.wait()
        await real_append(self, frame)
        written.append(frame.task.operator)

    monkeypatch.setattr(RocksDBCheckpointStore, "append", gated)
    settings = _settings(kafka_bootstrap, tmp_path, checkpoints=CheckpointSettings(
        policy="fixed", interval_s=0.5, replicate=False))
    worker = Worker(App(f"w-{source}", ops), settings)
    task = asyncio.create_task(worker.run(handle_signals=False))
    try:
        await asyncio.wait_for(held.wait(), 60)
        time.sleep(settings.session_timeout_ms / 1000 + 1.0)  # the process stands still
        written.clear()
        release.set()
        # The held frame (of agg) lands; agg2's, proven before the stop, does not. (A
        # later checkpoint, after a new commit, may write agg2 again.) Both happen
        # within milliseconds, but a loaded machine may take seconds: wait for them.
        deadline = time.monotonic() + 30
        while not written or "not written: the event loop stood still" not in caplog.text:
            assert time.monotonic() < deadline, (written, caplog.text[-3000:])
            await asyncio.sleep(0.05)
        assert written[:1] == ["agg"] and written[1:2] != ["agg2"], written
        assert f"agg2:{source}:0: checkpoint at offset" in caplog.text
        assert "not written: the event loop stood still past the session timeout" in caplog.text
    finally:
        release.set()
        worker.stop()
    assert await asyncio.wait_for(task, 60) in (0, 1)


@pytest.mark.timeout(300)
async def test_a_checkpoint_whose_write_spans_a_process_stop_is_not_replicated(
    kafka_bootstrap: str, new_topic: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The process stands still past the session timeout while a checkpoint is being
    written locally (after the ownership check before the write; a SIGSTOP during
    the fsync did so in the zombie fault test): the frame must not reach the
    replica, where the partition may be another worker's by then."""
    source = new_topic(1, {"retention.ms": "-1"})
    op = _operator(source, f"{source}-out")
    await produce(kafka_bootstrap, source, _rows(300, int(time.time() * 1000) - 600_000, 0))
    stalled: list[int] = []
    replicated: list[int] = []
    real_append = RocksDBCheckpointStore.append
    real_replicate = KafkaCheckpointStore.append

    async def stalling(self: RocksDBCheckpointStore, frame: CheckpointFrame) -> None:
        await real_append(self, frame)
        if not stalled and not frame.clean:
            stalled.append(frame.seq)
            time.sleep(settings.session_timeout_ms / 1000 + 1.0)  # the process stands still

    async def recorded(self: KafkaCheckpointStore, frame: CheckpointFrame) -> None:
        await real_replicate(self, frame)
        replicated.append(frame.seq)

    monkeypatch.setattr(RocksDBCheckpointStore, "append", stalling)
    monkeypatch.setattr(KafkaCheckpointStore, "append", recorded)
    settings = _settings(kafka_bootstrap, tmp_path, checkpoints=CheckpointSettings(
        policy="fixed", interval_s=0.5, replicate=True))
    worker = Worker(App(f"w-{source}", [op]), settings)
    task = asyncio.create_task(worker.run(handle_signals=False))
    try:
        deadline = time.monotonic() + 60
        # Until a later checkpoint was replicated: the stalled one would have been first.
        while not (stalled and any(seq > stalled[0] for seq in replicated)):
            assert not task.done() and time.monotonic() < deadline, (stalled, replicated)
            await asyncio.sleep(0.1)
    finally:
        worker.stop()
    assert await asyncio.wait_for(task, 60) in (0, 1)
    assert stalled[0] not in replicated, (stalled, replicated)
    assert f"checkpoint seq {stalled[0]} at offset" in caplog.text
    assert ("kept locally only: the event loop stood still past the session timeout while it "
            "was written") in caplog.text
