"""A zombie's late checkpoint never mixes into the new owner's chain in the replica.

Each owner commits its seq epoch (offset metadata) before its first checkpoint,
and a new owner starts above the committed epoch, which a fenced owner can no
longer raise: so two owners never share a seq space, even when the zombie's
frames were not visible yet when its successor took over.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

from streamremat.runtime.checkpointing import EPOCH_BITS, owner_epoch, seq_epoch
from streamremat.runtime.kafka import TopicSpec, create_topics, produce
from streamremat.state.base import CheckpointStore
from streamremat.state.chain import RestorePoint
from streamremat.state.frame import CheckpointFrame, TaskId
from streamremat.state.kafka import KafkaCheckpointConfig, KafkaCheckpointStore
from tests.integration.owners import (
    HOUR_MS,
    Owner,
    expected_results,
    hour_operator,
    records,
    sink_results,
)


def test_owner_epoch_is_above_the_committed_and_every_visible_epoch() -> None:
    assert owner_epoch(0, None) == 0
    assert owner_epoch(1, None) == owner_epoch(7, None) == 1
    assert owner_epoch((1 << EPOCH_BITS) + 3, None) == 2
    # The committed epoch wins when the stores show less (late or unreachable frames).
    assert owner_epoch(7, 1) == 2
    assert owner_epoch(0, 4) == 5
    assert owner_epoch((5 << EPOCH_BITS) + 1, 2) == 6
    assert seq_epoch((6 << EPOCH_BITS) + 9) == 6


class _FrozenReplica(CheckpointStore):
    """The zombie's replica: its writes wait until it thaws, as under SIGSTOP."""

    name = "kafka"

    def __init__(self, store: KafkaCheckpointStore) -> None:
        self.store = store
        self.held = asyncio.Event()
        self.thawed = asyncio.Event()

    async def append(self, frame: CheckpointFrame) -> None:
        self.held.set()
        await self.thawed.wait()
        await self.store.append(frame)

    async def load(self, task: TaskId) -> RestorePoint | None:
        return await self.store.load(task)

    async def prune(self, task: TaskId, keep: int) -> int:
        return await self.store.prune(task, keep)

    async def last_seq(self, task: TaskId) -> int | None:
        return await self.store.last_seq(task)

    async def close(self) -> None:
        await self.store.close()


async def test_a_zombies_late_full_does_not_mix_into_the_next_owners_chain(
    kafka_bootstrap: str, new_topic: Any, tmp_path: Path
) -> None:
    """A owns the partition; B takes over, commits, and its replica write is queued
    when it freezes; C takes over, writes a full and a delta; B thaws and its full
    lands. D restores from the replica: its output must be the reference's."""
    source = new_topic(1, {"retention.ms": "-1"})
    op = hour_operator(source)
    await create_topics(kafka_bootstrap, [TopicSpec(op.sink, 1)])
    replica_topic = new_topic(1, {"cleanup.policy": "compact"})
    cfg = KafkaCheckpointConfig(partitions=1)
    group = f"zombie-{uuid.uuid4().hex[:8]}"
    # Records 400..499 touch every key, 500..549 only k0: a mix of B's full (at 400)
    # and C's delta (at 550) would miss 400..499 for the other keys.
    keys = [b"k0" if 500 <= i < 550 else b"k%d" % (i % 10) for i in range(600)]
    base = (int(time.time() * 1000) // HOUR_MS - 3) * HOUR_MS
    sent = records(keys, base)
    await produce(kafka_bootstrap, source, sent)

    async def replica() -> KafkaCheckpointStore:
        return await KafkaCheckpointStore.open(kafka_bootstrap, replica_topic, cfg)

    a = await Owner.take_over(kafka_bootstrap, op, group, tmp_path / "a", await replica())
    await a.run_to(200)
    await a.checkpoint()
    await a.run_to(300)
    await a.checkpoint()
    await a.close()

    frozen = _FrozenReplica(await replica())
    b = await Owner.take_over(kafka_bootstrap, op, group, tmp_path / "b", frozen)
    await b.run_to(400)
    await b.runner.checkpoint()  # local now; the replica write is queued ...
    await asyncio.wait_for(frozen.held.wait(), 10)  # ... and B freezes

    c = await Owner.take_over(kafka_bootstrap, op, group, tmp_path / "c", await replica())
    assert c.runner.report is not None and c.runner.report.checkpoint_offset == 300
    await c.run_to(500)
    await c.checkpoint()
    await c.run_to(550)
    await c.checkpoint()
    c_seqs = [chain.next_seq - 1 for chain in c.runner.checkpointer.chains]
    await c.close()

    frozen.thawed.set()  # B thaws: its late full reaches the replica
    await b.runner.drain_replica(30)
    b_seqs = [chain.next_seq - 1 for chain in b.runner.checkpointer.chains]
    await b.close()
    print(f"zombie B wrote seq {b_seqs}, owner C up to seq {c_seqs}")
    assert seq_epoch(b_seqs[0]) < seq_epoch(c_seqs[0])

    d = await Owner.take_over(kafka_bootstrap, op, group, tmp_path / "d", await replica())
    report = d.runner.report
    assert report is not None and report.source == "kafka" and report.checkpoint_offset == 550
    await d.run_to(len(sent))
    await d.close()
    assert await sink_results(kafka_bootstrap, op.sink) == expected_results(sent)
