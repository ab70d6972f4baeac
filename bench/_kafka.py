"""Shared helpers for benchmarks on a real broker.

* ``bench_broker``: ``--bootstrap`` / ``$STREAMREMAT_BOOTSTRAP`` if given, else a
  dev broker on free ports with its data under the bench's work dir, stopped at
  the end (only if this process started it).
* ``produce_fast``: bulk produce pre-partitioned records with ``send_batch``
  (one await per producer batch, not per record): ~10x faster than ``send``.
* ``read_to_end``: raw aiokafka consumption of a whole topic (the ceiling).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from streamremat.dev.broker import BrokerConfig, DevBroker, free_port_pair

#: (key, value, timestamp_ms) of one record of one partition
Row = tuple[bytes, bytes, int]


@asynccontextmanager
async def bench_broker(bootstrap: str | None, work_dir: Path) -> AsyncIterator[str]:
    """Yield a bootstrap address; start (and finally stop) a dev broker if none given."""
    bootstrap = bootstrap or os.environ.get("STREAMREMAT_BOOTSTRAP")
    if bootstrap:
        yield bootstrap
        return
    port = free_port_pair()
    broker = DevBroker(
        BrokerConfig(port=port, data_dir=work_dir / f"broker-{port}", stop_with_parent=True)
    )
    status = await asyncio.to_thread(broker.start)
    try:
        yield status.bootstrap
    finally:
        if status.started_now:
            await asyncio.to_thread(broker.stop)


async def produce_fast(
    bootstrap: str, topic: str, by_partition: Mapping[int, Iterable[Row]]
) -> int:
    """Send every partition's rows in order, in full producer batches; return the count."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, linger_ms=5,
        max_batch_size=512 * 1024, max_request_size=4 * 1024 * 1024,
    )
    await producer.start()
    count = 0
    futures: list[Any] = []
    try:
        for partition, rows in by_partition.items():
            batch = producer.create_batch()
            for key, value, ts in rows:
                if batch.append(key=key, value=value, timestamp=ts) is None:
                    futures.append(await producer.send_batch(batch, topic, partition=partition))
                    batch = producer.create_batch()
                    batch.append(key=key, value=value, timestamp=ts)
                count += 1
                if len(futures) >= 64:
                    await asyncio.gather(*futures)
                    futures.clear()
            futures.append(await producer.send_batch(batch, topic, partition=partition))
        await asyncio.gather(*futures)
    finally:
        await producer.stop()
    return count


def consumer_settings() -> dict[str, Any]:
    """The fetch settings the worker's consumer uses (streamremat/runtime/worker.py)."""
    return {
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        "isolation_level": "read_committed",
        "fetch_max_bytes": 16 * 1024 * 1024,
        "max_partition_fetch_bytes": 4 * 1024 * 1024,
    }


async def read_to_end(
    bootstrap: str, topic: str, partitions: Sequence[int], ends: dict[int, int],
    *, max_records: int | None, timeout_s: float = 600.0,
) -> tuple[int, float]:
    """Raw consumption: count records up to ``ends``; return (records, seconds).

    No group, read_committed, ``getmany`` batches, nothing decoded. The clock
    starts after the client connected and was assigned, at the first fetch.
    """
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                **consumer_settings())
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in partitions]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        remaining = {tp for tp in tps if ends[tp.partition] > 0}
        count = 0
        started = time.perf_counter()
        deadline = time.monotonic() + timeout_s
        while remaining:
            if time.monotonic() > deadline:
                raise TimeoutError(f"raw read of {topic!r} not done after {timeout_s} s")
            batches = await consumer.getmany(timeout_ms=100, max_records=max_records)
            for tp, records in batches.items():
                count += len(records)
                if records[-1].offset + 1 >= ends[tp.partition]:
                    remaining.discard(tp)
        return count, time.perf_counter() - started
    finally:
        await consumer.stop()


def dir_bytes(path: Path) -> int:
    """Total size of the files under ``path`` (0 if it doesn't exist)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with suppress(OSError):
                total += os.path.getsize(os.path.join(root, name))
    return total
