"""``BatchSender`` on the real broker: every record lands in the partition the Java
client's partitioner (murmur2) gives its key, keyless ones in the first partition,
in the order they were handed over per partition, whatever the runs of topics."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

from streamremat.runtime.client import KafkaClientConfig
from streamremat.runtime.kafka import consume_all
from streamremat.runtime.lifecycle import start_producer
from streamremat.runtime.outputs import BatchSender, OutRecord, partition_for

PARTITIONS = 4


async def test_records_land_in_their_keys_partitions_in_order(
    kafka_bootstrap: str, new_topic: Any
) -> None:
    topics = [new_topic(partitions=PARTITIONS), new_topic(partitions=2)]
    rng = random.Random(7)
    # Recent timestamps: records from 1970 are past the broker's retention, and its
    # cleaner may delete them before they are read back (CI read 0 of 1,492 once).
    base_ms = int(time.time() * 1000) - 60_000
    sent: list[OutRecord] = []
    for i in range(3000):
        # runs of one topic of random length, as a batch's results and dead letters
        topic = topics[(i // rng.randint(1, 40)) % 2]
        key = None if rng.random() < 0.05 else b'"k%d"' % rng.randrange(500)
        sent.append(OutRecord(topic, key, b"%d" % i, base_ms + i, [("h", b"%d" % i)]))
    producer = await start_producer(KafkaClientConfig(bootstrap_servers=kafka_bootstrap))
    try:
        sender = BatchSender(producer)
        # twice: the second time every key's partition comes from the cache
        half = len(sent) // 2
        for chunk in (sent[:half], sent[half:]):
            await asyncio.gather(*await sender.send(chunk))
    finally:
        await producer.stop()

    for topic, partitions in zip(topics, (PARTITIONS, 2), strict=True):
        got = await consume_all(kafka_bootstrap, topic)
        expected = [r for r in sent if r.topic == topic]
        assert len(got) == len(expected)
        for p in range(partitions):
            want = [(r.key, r.value, r.timestamp_ms, tuple(r.headers)) for r in expected
                    if partition_for(r.key, partitions) == p]
            have = [(r.key, r.value, r.timestamp_ms, r.headers) for r in got if r.partition == p]
            assert have == want, (topic, p)
