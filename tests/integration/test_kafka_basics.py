"""The dev broker and the Kafka helpers against a real broker, transactions included."""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Callable

from aiokafka import AIOKafkaProducer

from streamremat.runtime.kafka import (
    ProducerRecord,
    TopicSpec,
    beginning_offsets,
    consume_all,
    create_topics,
    delete_topics,
    end_offsets,
    list_topics,
    produce,
    topic_config,
    topic_partitions,
)

NewTopic = Callable[..., str]


async def test_produce_consume_roundtrip(kafka_bootstrap: str, new_topic: NewTopic) -> None:
    topic = new_topic(partitions=3)
    sent = [
        ProducerRecord(
            key=f"k{i}".encode(),
            value=f"v{i}".encode(),
            timestamp_ms=1_700_000_000_000 + i,
            partition=i % 3,
            headers=[("n", str(i).encode())],
        )
        for i in range(300)
    ]
    assert await produce(kafka_bootstrap, topic, sent) == 300

    got = await consume_all(kafka_bootstrap, topic)

    assert len(got) == 300
    by_key = {r.key: r for r in got}
    for rec in sent:
        back = by_key[rec.key]
        assert (back.value, back.timestamp_ms, back.partition) == (
            rec.value,
            rec.timestamp_ms,
            rec.partition,
        )
        assert back.headers == tuple(rec.headers)
    for pid in range(3):  # per-partition order is production order
        offsets = [r.offset for r in got if r.partition == pid]
        assert offsets == list(range(100))
    assert await end_offsets(kafka_bootstrap, topic) == {0: 100, 1: 100, 2: 100}
    assert await beginning_offsets(kafka_bootstrap, topic) == {0: 0, 1: 0, 2: 0}


async def test_the_test_broker_keeps_records_stamped_in_1970(
        kafka_bootstrap: str, new_topic: NewTopic, broker_up_since: float) -> None:
    """Tests stamp records from 1970 on; the dev broker's default time retention
    (168 h, checked every 5 s from 30 s after its start) deleted them between
    produce and read-back (CI read 0 of 300 once). Past two retention checks, every
    record is still there."""
    if os.environ.get("STREAMREMAT_BOOTSTRAP"):
        return  # a broker of your own: its retention is yours (see conftest)
    topic = new_topic()
    sent = [(b"k", b"v", 1_000 + i, 0, ()) for i in range(50)]
    assert await produce(kafka_bootstrap, topic, sent) == 50
    # Kafka's LogManager runs the first retention check 30 s after start-up, then
    # every log.retention.check.interval.ms (5 s): wait past two checks.
    first_check_in = 30 - (time.monotonic() - broker_up_since)
    await asyncio.sleep(max(first_check_in, 0) + 11)
    assert await beginning_offsets(kafka_bootstrap, topic) == {0: 0}
    assert [r.timestamp_ms for r in await consume_all(kafka_bootstrap, topic)] == [
        1_000 + i for i in range(50)]


async def test_plain_tuples_and_null_keys(kafka_bootstrap: str, new_topic: NewTopic) -> None:
    topic = new_topic()
    await produce(kafka_bootstrap, topic, [(None, b"a", None, None, ()), (b"k", None, 5, 0, ())])

    got = await consume_all(kafka_bootstrap, topic)

    assert [(r.key, r.value) for r in got] == [(None, b"a"), (b"k", None)]
    assert got[1].timestamp_ms == 5


async def test_topic_admin_is_idempotent(kafka_bootstrap: str) -> None:
    name = f"admin-{uuid.uuid4().hex[:8]}"
    spec = TopicSpec(name, partitions=2, config={"retention.ms": "3600000"})

    assert await create_topics(kafka_bootstrap, [spec]) == [name]
    assert await create_topics(kafka_bootstrap, [spec]) == []
    assert await topic_partitions(kafka_bootstrap, name) == [0, 1]
    config = await topic_config(kafka_bootstrap, name)
    assert config["retention.ms"] == "3600000"
    assert config["cleanup.policy"] == "delete"

    await delete_topics(kafka_bootstrap, [name])
    await delete_topics(kafka_bootstrap, [name])  # already gone: no error
    assert name not in await list_topics(kafka_bootstrap)


async def test_read_committed_hides_aborted_transaction(
    kafka_bootstrap: str, new_topic: NewTopic
) -> None:
    topic = new_topic()
    producer = AIOKafkaProducer(
        bootstrap_servers=kafka_bootstrap, transactional_id=f"tx-{uuid.uuid4().hex}"
    )
    await producer.start()
    try:
        async with producer.transaction():
            for i in range(3):
                await producer.send_and_wait(topic, f"committed-{i}".encode(), key=b"c")
        await producer.begin_transaction()
        for i in range(2):
            # send_and_wait: the aborted records really reach the log before the abort
            await producer.send_and_wait(topic, f"aborted-{i}".encode(), key=b"a")
        await producer.abort_transaction()
    finally:
        await producer.stop()

    committed = await consume_all(kafka_bootstrap, topic, isolation_level="read_committed")
    everything = await consume_all(kafka_bootstrap, topic, isolation_level="read_uncommitted")

    assert [r.value for r in committed] == [b"committed-0", b"committed-1", b"committed-2"]
    assert [r.value for r in everything] == [
        b"committed-0",
        b"committed-1",
        b"committed-2",
        b"aborted-0",
        b"aborted-1",
    ]
