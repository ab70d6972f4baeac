"""The Kafka checkpoint replica on a real broker.

The whole store contract (``tests/unit/test_state_contract.py``) runs again
here with the ``harness`` fixture overridden, plus what only Kafka has: topic
creation, chunking, partial writes, tombstones, choosing local vs replica.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from streamremat.runtime.kafka import delete_topics, topic_config, topic_partitions
from streamremat.state import (
    CheckpointStoreUnavailable,
    KafkaCheckpointConfig,
    KafkaCheckpointStore,
    RocksDBCheckpointStore,
    TaskId,
    encode_frame,
    newest_restore_point,
)
from streamremat.state.kafka import _message_key, corrupt_latest_replica, split_frame
from tests.unit.test_state_contract import *  # noqa: F403  (the shared contract)
from tests.unit.test_state_contract import TASK, Harness, delta, full

NewTopic = Callable[..., str]
# Fixtures run on the session loop (pyproject); clients must stay on one loop.
pytestmark = pytest.mark.asyncio(loop_scope="session")
COMPACT = {"cleanup.policy": "compact"}
# Small chunks make every contract frame > 2 chunks' worth of code paths cheap to hit.
SMALL_CHUNKS = KafkaCheckpointConfig(partitions=2, chunk_size_bytes=200_000)


class KafkaHarness(Harness):
    def __init__(self, bootstrap: str, topic: str, config: KafkaCheckpointConfig) -> None:
        self.bootstrap, self.topic, self.config = bootstrap, topic, config

    async def start(self) -> None:
        self.store: KafkaCheckpointStore = await KafkaCheckpointStore.open(
            self.bootstrap, self.topic, self.config
        )

    async def corrupt(self, task: TaskId, seq: int | None = None) -> int:
        return await corrupt_latest_replica(self.store, task, seq)

    async def reopen(self) -> None:
        await self.store.close()
        await self.start()


@pytest.fixture
async def harness(kafka_bootstrap: str, new_topic: NewTopic) -> AsyncIterator[KafkaHarness]:
    h = KafkaHarness(kafka_bootstrap, new_topic(partitions=2, config=COMPACT), SMALL_CHUNKS)
    await h.start()
    yield h
    await h.store.close()


async def test_ensure_topic_creates_a_compacted_topic(kafka_bootstrap: str) -> None:
    topic = f"state-ensure-{uuid.uuid4().hex[:8]}"
    config = KafkaCheckpointConfig(partitions=3)
    store = await KafkaCheckpointStore.open(kafka_bootstrap, topic, config)
    try:
        await store.ensure_topic()
        await store.ensure_topic()  # idempotent
        assert await topic_partitions(kafka_bootstrap, topic) == [0, 1, 2]
        described = await topic_config(kafka_bootstrap, topic)
        assert described["cleanup.policy"] == "compact"
        assert described["min.compaction.lag.ms"] == str(config.min_compaction_lag_ms)
        await store.append(full(1))
        assert (await store.load(TASK)) is not None
    finally:
        await store.close()
        await delete_topics(kafka_bootstrap, [topic])


async def test_ensure_topic_refuses_another_partition_count(
    kafka_bootstrap: str, new_topic: NewTopic
) -> None:
    topic = new_topic(partitions=2, config=COMPACT)
    store = await KafkaCheckpointStore.open(
        kafka_bootstrap, topic, KafkaCheckpointConfig(partitions=4)
    )
    try:
        with pytest.raises(CheckpointStoreUnavailable, match="partitions=2"):
            await store.ensure_topic()
    finally:
        await store.close()


async def test_large_frame_is_chunked_under_the_broker_limit(
    kafka_bootstrap: str, new_topic: NewTopic
) -> None:
    topic = new_topic(partitions=1, config=COMPACT)
    store = await KafkaCheckpointStore.open(kafka_bootstrap, topic)  # default ~900 KB chunks
    try:
        payload = os.urandom(2_300_000)
        await store.append(full(1, payload))
        point = await store.load(TASK)
        assert point is not None and point.chain[0].payload == payload
        scan = await store._scan(TASK)
        assert sorted(scan.chunks[1]) == [0, 1, 2]
    finally:
        await store.close()


async def test_partial_frame_is_skipped(harness: KafkaHarness) -> None:
    await harness.append_all(full(1), delta(2, 1))
    # a writer that died after the first chunk of a 3-chunk frame
    blob = encode_frame(full(3, os.urandom(500_000)), compress_min_bytes=None)
    chunks = split_frame(blob, SMALL_CHUNKS.chunk_size_bytes)
    assert len(chunks) == 3
    producer = AIOKafkaProducer(bootstrap_servers=harness.bootstrap, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(
            harness.topic, chunks[0], key=_message_key(TASK, 3, 0), partition=TASK.partition % 2
        )
    finally:
        await producer.stop()
    await harness.reopen()
    point = await harness.store.load(TASK)
    assert point is not None and point.seq == 2
    assert "chunk 1 of 3 missing" in point.fallbacks[0]
    assert point.next_seq == 4


async def test_prune_writes_tombstones_that_readers_honour(harness: KafkaHarness) -> None:
    big = os.urandom(450_000)  # 3 chunks: every chunk key must be tombstoned
    await harness.append_all(full(1, big), delta(2, 1), full(3), delta(4, 3))
    assert await harness.store.prune(TASK, keep=1) == 2
    await harness.reopen()  # a fresh reader sees only what survived
    scan = await harness.store._scan(TASK)
    assert sorted(scan.chunks) == [3, 4]


async def test_newest_restore_point_prefers_the_more_advanced_store(
    harness: KafkaHarness, tmp_path: Path
) -> None:
    local = RocksDBCheckpointStore(tmp_path / "state")
    try:
        for frame in (full(1), delta(2, 1)):
            await local.append(frame)
            await harness.store.append(frame)
        await harness.store.append(delta(3, 1))  # local lost its newest (e.g. new machine)
        choice = await newest_restore_point(TASK, local, harness.store)
        assert choice.source == "kafka" and choice.point is not None
        assert choice.point.seq == 3 and choice.next_seq == 4

        await local.append(delta(3, 1))
        choice = await newest_restore_point(TASK, local, harness.store)
        assert choice.source == "rocksdb"  # tie: local wins
    finally:
        await local.close()


async def test_newest_restore_point_survives_an_unreachable_replica(
    harness: KafkaHarness, tmp_path: Path
) -> None:
    local = RocksDBCheckpointStore(tmp_path / "state")
    try:
        await local.append(full(1))
        await harness.store.close()  # the replica's clients are gone
        choice = await newest_restore_point(TASK, local, harness.store, replica_timeout_s=5)
        assert choice.source == "rocksdb" and choice.point is not None
        assert any("kafka checkpoint store failed" in note for note in choice.notes)
    finally:
        await local.close()
        await harness.start()  # so the fixture can close it
