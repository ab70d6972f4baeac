"""Turning a batch's results, dead letters and late records into Kafka records,
and sending them in per-partition batches (one await per batch, not per record)."""

from __future__ import annotations

import asyncio
from itertools import groupby
from operator import attrgetter
from typing import Any, NamedTuple, cast

from aiokafka.partitioner import DefaultPartitioner

from streamremat.core import fastpath
from streamremat.core.operator import Operator
from streamremat.core.output import serialize_results
from streamremat.core.records import BatchOutput, FailedResult, SourceRecord, WindowResult

_partitioner = DefaultPartitioner()
#: keys per topic whose partition ``BatchSender`` remembers (then it starts over)
_KEY_CACHE = 100_000

#: Header names on dead-letter records (the original headers come first).
H_STAGE = "streamremat.error.stage"
H_REASON = "streamremat.error.reason"
H_OPERATOR = "streamremat.operator"
H_SOURCE = "streamremat.source"  # "topic/partition/offset" ("topic/partition" for a window)
H_WINDOW = "streamremat.window"  # "start_ms,end_ms" of a window that failed into the DLQ
#: On late records (with H_OPERATOR and H_SOURCE): why the operator did not take it.
H_LATE_REASON = "streamremat.late.reason"


class OutRecord(NamedTuple):
    topic: str
    key: bytes | None
    value: bytes | None
    timestamp_ms: int | None
    headers: list[tuple[str, bytes]]


_topic = attrgetter("topic")
_key = attrgetter("key")


def _headers(record: SourceRecord) -> list[tuple[str, bytes]]:
    return list(record.headers or ())


def partition_for(key: bytes | None, partitions: int) -> int:
    """The partition Kafka's default partitioner (murmur2) gives ``key``; keyless
    records go to partition 0, as ``BatchSender`` sends them."""
    if key is None:
        return 0
    return partition_indexes([key], partitions)[0]


def partition_indexes(keys: list[bytes], partitions: int) -> list[int]:
    """Per key, the index among a topic's sorted partitions that Kafka's default
    partitioner gives it (``toPositive(murmur2(key)) % partitions``, as the Java
    client): in one native call where the extension is built (aiokafka's murmur2
    is pure Python, ~15 us a key), else aiokafka's own partitioner."""
    native = fastpath.native_module
    if native is not None and fastpath.native_enabled:
        return cast(list[int], native.partition_indexes(keys, partitions))
    parts = list(range(partitions))
    return [int(_partitioner(key, parts, parts)) for key in keys]


def to_records(
    op: Operator,
    source_partition: int,
    out: BatchOutput,
    forward_to: str | None = None,
    serialized: list[tuple[WindowResult, bytes]] | None = None,
) -> list[OutRecord]:
    """Serialize one task's batch output for the sink, dead-letter and late topics,
    and a repartition stage's forwards for ``forward_to``.

    A result that can't be serialized is added to ``out.failed`` (stage ``output``)
    and goes to the dead letters with the windows that failed earlier. A caller that
    serialized the results already (``serialize_results``) passes them."""
    records: list[OutRecord] = []
    if out.forwards and forward_to is not None:
        records.extend(
            OutRecord(forward_to, f.key, f.value, f.timestamp_ms, _headers(f.record))
            for f in out.forwards
        )
    if out.results:
        if serialized is None:
            serialized = serialize_results(op, out.results, out.failed)
        sink = op.sink
        records.extend(OutRecord(sink, r.key, value, r.end_ms, []) for r, value in serialized)
    for d in out.dead_letters:
        src = d.record
        headers = [
            *_headers(src),
            (H_STAGE, d.stage.encode()),
            (H_REASON, d.reason.encode("utf-8", "replace")[:4000]),
            (H_OPERATOR, op.name.encode()),
            (H_SOURCE, f"{op.source}/{source_partition}/{src.offset}".encode()),
        ]
        records.append(
            OutRecord(op.dead_letter_topic, src.key, src.value, src.timestamp, headers)
        )
    for f in out.failed:
        records.append(_failed_window(op, source_partition, f))
    if op.late_topic is not None:
        # Several operators may share one late topic: say which one refused the record.
        grace, name = op.window.grace_ms, op.name.encode()
        for late in out.late:
            src = late.record
            reason = (
                f"late: event time {late.timestamp_ms} ms, stream time {late.stream_time_ms} ms"
                f" (grace {grace} ms); a window of the record had closed"
            )
            headers = [
                *_headers(src),
                (H_LATE_REASON, reason.encode()),
                (H_OPERATOR, name),
                (H_SOURCE, f"{op.source}/{source_partition}/{src.offset}".encode()),
            ]
            records.append(OutRecord(op.late_topic, src.key, src.value, src.timestamp, headers))
    return records


def _failed_window(op: Operator, source_partition: int, f: FailedResult) -> OutRecord:
    """A window that failed into the dead letters: its key, the result's ``repr``
    as the value (when there is a result), where and why in the headers."""
    value = None if f.value is None else repr(f.value).encode("utf-8", "replace")[:100_000]
    headers = [
        (H_STAGE, f.stage.encode()),
        (H_REASON, f.reason.encode("utf-8", "replace")[:4000]),
        (H_OPERATOR, op.name.encode()),
        (H_SOURCE, f"{op.source}/{source_partition}".encode()),
        (H_WINDOW, f"{f.start_ms},{f.end_ms}".encode()),
    ]
    return OutRecord(op.dead_letter_topic, f.key, value, f.end_ms, headers)


class BatchSender:
    """Sends records through one producer in per-(topic, partition) batches."""

    def __init__(self, producer: Any) -> None:
        self.producer = producer
        self._partitions: dict[str, list[int]] = {}
        #: per topic, key -> partition: murmur2 is pure Python (~15 us a key), and a
        #: repartition stage sends every record while keys repeat
        self._by_key: dict[str, dict[bytes, int]] = {}

    async def _partitions_of(self, topic: str) -> list[int]:
        parts = self._partitions.get(topic)
        if parts is None:
            parts = sorted(await self.producer.partitions_for(topic))
            self._partitions[topic] = parts
        return parts

    def _key_cache(self, topic: str) -> dict[bytes, int]:
        cache = self._by_key.get(topic)
        if cache is None or len(cache) > _KEY_CACHE:
            cache = self._by_key[topic] = {}
        return cache

    async def send(self, records: list[OutRecord]) -> list[asyncio.Future[Any]]:
        """Queue every record; return the delivery futures (await them to be sure).

        Records come in runs of one topic (a task's results, then its dead letters):
        each run is split by partition with the key cache looked up in C (``map``),
        so a record costs a dict lookup and an append until its batch is built."""
        grouped: dict[tuple[str, int], list[OutRecord]] = {}
        for topic, run in groupby(records, _topic):
            recs = list(run)
            parts = self._partitions.get(topic) or await self._partitions_of(topic)
            cache = self._key_cache(topic)
            found: list[int | None] = list(map(cache.get, map(_key, recs)))
            missing = [i for i, partition in enumerate(found) if partition is None]
            if missing:
                keyed = [i for i in missing if recs[i].key is not None]
                # Same partitioner as the Java client (murmur2), so keys land where
                # Kafka Streams or any other producer would put them; keys new to
                # the cache in one batch call (a large closing brings many).
                new_keys = [cast(bytes, recs[i].key) for i in keyed]
                indexes = partition_indexes(new_keys, len(parts))
                for i, key, index in zip(keyed, new_keys, indexes, strict=True):
                    found[i] = cache[key] = parts[index]
                for i in missing:
                    if recs[i].key is None:
                        found[i] = parts[0]
            buckets: list[list[OutRecord]] = [[] for _ in range(max(parts) + 1)]
            adds = [bucket.append for bucket in buckets]
            for rec, partition in zip(recs, cast(list[int], found), strict=True):
                adds[partition](rec)
            for partition, bucket in enumerate(buckets):
                if bucket:
                    grouped.setdefault((topic, partition), []).extend(bucket)
        futures = []
        producer = self.producer
        for (topic, partition), recs in grouped.items():
            batch = producer.create_batch()
            append = batch.append
            for rec in recs:
                if append(key=rec.key, value=rec.value, timestamp=rec.timestamp_ms,
                          headers=rec.headers) is None:
                    futures.append(await producer.send_batch(batch, topic, partition=partition))
                    batch = producer.create_batch()
                    append = batch.append
                    append(key=rec.key, value=rec.value, timestamp=rec.timestamp_ms,
                           headers=rec.headers)
            futures.append(await producer.send_batch(batch, topic, partition=partition))
        return futures
