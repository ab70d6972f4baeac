"""``BatchSender`` on the real broker: every record lands in the partition the Java
client's partitioner (murmur2) gives its key, keyless ones in the first partition,
in the order they were handed over per partition, whatever the runs of topics;
results encoded natively too, in a transaction."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import pytest

from streamremat.core.records import WindowResult
from streamremat.runtime.client import KafkaClientConfig
from streamremat.runtime.kafka import consume_all
from streamremat.runtime.lifecycle import start_producer
from streamremat.runtime.outputs import BatchSender, OutRecord, ResultRun, Sendable, partition_for

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


async def test_native_result_runs_land_as_records_would_in_a_transaction(
    kafka_bootstrap: str, new_topic: Any
) -> None:
    """Results encoded natively (``ResultRun``) between plain records of the same
    topic and of another: after the commit, every partition holds the records a
    Python ``to_records`` would have sent, in the order handed over; the runs of
    an aborted transaction are never read."""
    native = pytest.importorskip("streamremat_native")
    sink, dlq = new_topic(partitions=PARTITIONS), new_topic(partitions=2)
    rng = random.Random(11)
    base_ms = int(time.time() * 1000) - 60_000
    sent: list[Sendable] = []
    expected: list[OutRecord] = []
    for i in range(40):
        if i % 3 == 0:  # a plain record of each topic between the runs
            for topic in (sink, dlq):
                rec = OutRecord(topic, b'"p%d"' % i, b"%d" % i, base_ms + i, [("h", b"x")])
                sent.append(rec)
                expected.append(rec)
        results = [WindowResult(b'"k%d"' % rng.randrange(5000), base_ms, base_ms + i,
                                {"n": rng.randrange(9), "total": rng.random()})
                   for _ in range(rng.randrange(1, 600))]
        encoded = native.encode_results(results, False)
        sent.append(ResultRun(sink, encoded))
        keys, values, times = encoded.columns()
        expected += [OutRecord(sink, k, v, t, []) for k, v, t in zip(keys, values, times,
                                                                     strict=True)]
    producer = await start_producer(KafkaClientConfig(bootstrap_servers=kafka_bootstrap),
                                    transactional_id=f"native-runs-{base_ms}")
    try:
        sender = BatchSender(producer)
        assert sender.native_batches() == (256 * 1024, True)
        await producer.begin_transaction()
        await asyncio.gather(*await sender.send([ResultRun(sink, native.encode_results(
            [WindowResult(b'"aborted"', 0, base_ms, 1)], False))]))
        await producer.abort_transaction()
        await producer.begin_transaction()
        half = len(sent) // 2
        for chunk in (sent[:half], sent[half:]):
            await asyncio.gather(*await sender.send(chunk))
        await producer.commit_transaction()
    finally:
        await producer.stop()

    for topic, partitions in ((sink, PARTITIONS), (dlq, 2)):
        got = await consume_all(kafka_bootstrap, topic)
        want_topic = [r for r in expected if r.topic == topic]
        assert len(got) == len(want_topic)
        for p in range(partitions):
            want = [(r.key, r.value, r.timestamp_ms, tuple(r.headers)) for r in want_topic
                    if partition_for(r.key, partitions) == p]
            have = [(r.key, r.value, r.timestamp_ms, r.headers) for r in got if r.partition == p]
            assert have == want, (topic, p)
