"""Owners of one source partition, in-process, for take-over tests.

Each ``Owner`` is a real ``PartitionRunner`` on the real broker, as a worker runs
it, with its own transactional producer (the worker's transactional id, so a new
owner fences the last), its own consumer and its own local RocksDB (a separate
machine). The test decides when each owner processes, commits and checkpoints,
so interleavings that a real cluster produces by chance are forced on purpose.
The expected output comes from the brute-force reference, not from the engine.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import GroupCoordinatorNotAvailableError

from streamremat import Count, Operator, Sum, Tumbling
from streamremat.core.topology import compile_app
from streamremat.metrics.sensor import Sensor
from streamremat.runtime.kafka import ProducerRecord, consume_all
from streamremat.runtime.partition import PartitionRunner, Phase
from streamremat.runtime.scheduling import CheckpointScheduler
from streamremat.runtime.settings import CheckpointSettings, WorkerSettings
from streamremat.state.base import CheckpointStore
from streamremat.state.rocksdb import RocksDBCheckpointStore
from tests.unit.reference import RefWindow, run_reference

HOUR_MS = 3_600_000


def hour_operator(source: str) -> Operator:
    """Count and sum per key in one-hour windows: every test record stays in one
    open window until the closing record, so the state carries everything."""
    return Operator(name="sums", source=source, sink=f"{source}-out", window=Tumbling(HOUR_MS),
                    aggregate={"n": Count(), "total": Sum("x")})


def records(keys: Sequence[bytes], base_ms: int) -> list[ProducerRecord]:
    """One record per key (value ``x`` = its index) in the window at ``base_ms``, then
    one record an hour later that closes that window."""
    out = [ProducerRecord(k, orjson.dumps({"x": i}), base_ms + i, 0) for i, k in enumerate(keys)]
    out.append(ProducerRecord(b"closer", orjson.dumps({"x": 0}), base_ms + HOUR_MS + 1, 0))
    return out


def expected_results(sent: Sequence[ProducerRecord]) -> collections.Counter[Any]:
    """What the sink must hold, from the brute-force reference."""
    ref = run_reference(
        RefWindow("tumbling", size=HOUR_MS),
        [(r.key or b"", r.timestamp_ms or 0, orjson.loads(r.value or b"")["x"]) for r in sent],
        lambda xs: (len(xs), sum(xs)),
    )
    return collections.Counter((k, s, e, v) for k, s, e, v in ref.emissions)


async def sink_results(bootstrap: str, sink: str) -> collections.Counter[Any]:
    got: collections.Counter[Any] = collections.Counter()
    for r in await consume_all(bootstrap, sink, isolation_level="read_committed"):
        value = orjson.loads(r.value or b"")
        got[(r.key, value["start_ms"], value["end_ms"],
             (value["value"]["n"], value["value"]["total"]))] += 1
    return got


def settings(bootstrap: str, state_dir: Path) -> WorkerSettings:
    # Checkpoints happen when the test says, never on their own; a chain turns
    # full only when the test wants it (the whole tiny state is dirty every time).
    return WorkerSettings(bootstrap_servers=bootstrap, state_dir=str(state_dir),
                          session_timeout_ms=6_000,
                          checkpoints=CheckpointSettings(policy="fixed", interval_s=3600,
                                                         full_after_delta_ratio=100.0))


@dataclass
class Owner:
    runner: PartitionRunner
    producer: Any
    consumer: Any
    admin: Any
    local: RocksDBCheckpointStore
    replica: CheckpointStore | None

    @classmethod
    async def take_over(cls, bootstrap: str, op: Operator, group: str, state_dir: Path,
                        replica: CheckpointStore | None,
                        retention_s: float | None = None,
                        transaction_timeout_ms: int = 60_000) -> Owner:
        """Fence the previous owner (init_transactions) and recover the partition
        (``retention_s``: its source's, as the worker reads it from the topic).
        The owner closes ``replica`` when it closes."""
        tp = TopicPartition(op.source, 0)
        s = settings(bootstrap, state_dir)
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap,
                                    transactional_id=f"{group}.{tp.topic}.{tp.partition}",
                                    enable_idempotence=True, acks="all",
                                    transaction_timeout_ms=transaction_timeout_ms)
        await producer.start()
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                    enable_auto_commit=False, isolation_level="read_committed")
        await consumer.start()
        consumer.assign([tp])
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        local = RocksDBCheckpointStore(state_dir / "ck.rocksdb")
        runner = PartitionRunner(tp, compile_app(op).stages, settings=s, group_id=group,
                                 producer=producer, local=local, replica=replica,
                                 scheduler=CheckpointScheduler(s.checkpoints), sensor=Sensor(),
                                 retention_s=retention_s)

        async def fetch_committed(tp: TopicPartition) -> tuple[int | None, str]:
            for _ in range(100):  # a fresh broker creates the offsets topic on first use
                try:
                    offsets = await admin.list_consumer_group_offsets(group, partitions=[tp])
                    break
                except GroupCoordinatorNotAvailableError:
                    await asyncio.sleep(0.2)
            found = offsets.get(tp)
            if found is None or found.offset < 0:
                return None, ""
            return int(found.offset), str(found.metadata or "")

        await runner.recover(consumer, fetch_committed)
        return cls(runner, producer, consumer, admin, local, replica)

    async def run_to(self, offset: int) -> None:
        """Process (replay, then live) up to ``offset`` and commit."""
        runner, tp = self.runner, self.runner.tp
        while runner.position < offset:
            batch = await self.consumer.getmany(tp, timeout_ms=200)
            fetched = [m for m in batch.get(tp, ()) if m.offset < offset]
            if fetched:
                runner.process(fetched)
            else:
                runner.reached_replay_end(await self.consumer.position(tp))
            if runner.phase is Phase.LIVE:
                await runner.flush()
        self.consumer.seek(tp, runner.position)
        assert runner.phase is Phase.LIVE, f"still {runner.phase} at {offset}"
        assert await runner.commit(self.consumer)

    async def checkpoint(self, timeout_s: float = 30.0) -> None:
        """Write a checkpoint and wait for its replica write."""
        await self.runner.checkpoint()
        await self.runner.drain_replica(timeout_s)

    async def close(self) -> None:
        await self.runner.close()  # stops the producer
        await self.consumer.stop()
        await self.admin.close()
        await self.local.close()
        if self.replica is not None:
            await self.replica.close()
