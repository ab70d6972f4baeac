"""The replica heals after it was unreachable at restore time.

The replica lives on a broker of its own, frozen (SIGSTOP: every request times
out, as behind a network partition) while the new owner restores, and thawed
later: the owner must restore from its local checkpoint,
write checkpoints that the replica accepts once it is back (above the epoch of
frames it could not see), go back to deltas, and a later owner must restore
the right state from the replica.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from streamremat.dev.broker import BrokerConfig, DevBroker, free_port_pair
from streamremat.runtime.checkpointing import seq_epoch
from streamremat.runtime.kafka import TopicSpec, create_topics, produce
from streamremat.state.frame import FrameKind, TaskId
from streamremat.state.kafka import KafkaCheckpointConfig, KafkaCheckpointStore
from tests.integration.owners import (
    HOUR_MS,
    Owner,
    expected_results,
    hour_operator,
    records,
    sink_results,
)


@dataclass
class _Broker:
    bootstrap: str
    pid: int

    def freeze(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        os.kill(self.pid, signal.SIGCONT)


@pytest.fixture
async def replica_broker(tmp_path: Path) -> AsyncIterator[_Broker]:
    broker = DevBroker(BrokerConfig(port=free_port_pair(), data_dir=tmp_path / "replica-kafka",
                                    heap_mb=512, stop_with_parent=True))
    status = await asyncio.to_thread(broker.start)
    assert status.pid is not None
    handle = _Broker(status.bootstrap, status.pid)
    try:
        yield handle
    finally:
        handle.thaw()  # a stopped JVM ignores SIGTERM until it runs again
        await asyncio.to_thread(broker.stop)


async def _wait_readable(open_store: Any, task: TaskId, timeout_s: float = 60.0) -> None:
    """Until the thawed broker serves reads of the replica partition again."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            store = await open_store()
            try:
                await store.load(task)
                return
            finally:
                await store.close()
        except Exception:
            assert time.monotonic() < deadline, "the replica's broker did not come back"
            await asyncio.sleep(0.5)


async def test_replica_unreachable_at_restore_heals_when_it_is_back(
    kafka_bootstrap: str, new_topic: Any, tmp_path: Path, replica_broker: _Broker
) -> None:
    source = new_topic(1, {"retention.ms": "-1"})
    op = hour_operator(source)
    task = TaskId(op.name, source, 0)
    await create_topics(kafka_bootstrap, [TopicSpec(op.sink, 1)])
    group = f"heal-{uuid.uuid4().hex[:8]}"
    keys = [b"k%d" % (i % 7) for i in range(400)]
    sent = records(keys, (int(time.time() * 1000) // HOUR_MS - 3) * HOUR_MS)
    await produce(kafka_bootstrap, source, sent)
    replica_at = replica_broker.bootstrap
    # Short timeouts: the restore gives up on the stopped broker within seconds.
    cfg = KafkaCheckpointConfig(partitions=1, request_timeout_ms=3_000, load_timeout_s=5)

    async def replica() -> KafkaCheckpointStore:
        store = await KafkaCheckpointStore.open(replica_at, f"{group}-ck", cfg)
        await store.ensure_topic()
        return store

    # A on machine 1, then B on machine 2: the replica's newest frames are B's.
    a = await Owner.take_over(kafka_bootstrap, op, group, tmp_path / "m1", await replica())
    for offset in (100, 150):
        await a.run_to(offset)
        await a.checkpoint()
    await a.close()
    b = await Owner.take_over(kafka_bootstrap, op, group, tmp_path / "m2", await replica())
    for offset in (200, 210, 220, 230, 240):
        await b.run_to(offset)
        await b.checkpoint()
    b_last = b.runner.checkpointer.chains[0].next_seq - 1
    await b.close()

    # C on machine 1 again, with the replica unreachable: restores from local.
    c_replica = await replica()
    replica_broker.freeze()
    c = await Owner.take_over(kafka_bootstrap, op, group, tmp_path / "m1", c_replica)
    report = c.runner.report
    assert report is not None and report.source == "rocksdb" and report.checkpoint_offset == 150
    assert any("kafka checkpoint store failed" in note for note in report.notes), report.notes
    await c.run_to(260)
    await c.checkpoint(timeout_s=15)

    replica_broker.thaw()
    await _wait_readable(replica, task)
    for offset in (270, 280, 290, 300):
        await c.run_to(offset)
        await c.checkpoint()
    c_last = c.runner.checkpointer.chains[0].next_seq - 1
    local_point = await c.local.load(task)
    await c.close()
    print(f"B's last replica seq {b_last:#x}, C's last seq {c_last:#x}")
    assert seq_epoch(c_last) > seq_epoch(b_last)
    # Healed: local checkpoints are deltas again, and the replica has C's newest.
    assert local_point is not None and local_point.last.kind is FrameKind.DELTA
    fresh = await replica()
    try:
        point = await fresh.load(task)
    finally:
        await fresh.close()
    assert point is not None and (point.offset, point.seq) == (300, c_last)

    # D on a new machine restores from the replica and finishes the stream.
    d = await Owner.take_over(kafka_bootstrap, op, group, tmp_path / "m3", await replica())
    assert d.runner.report is not None and d.runner.report.source == "kafka"
    await d.run_to(len(sent))
    await d.close()
    assert await sink_results(kafka_bootstrap, op.sink) == expected_results(sent)
