"""Turning a batch's results, dead letters and late records into Kafka records,
and sending them in per-partition batches (one await per batch, not per record)."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any, NamedTuple

import orjson
from aiokafka.partitioner import DefaultPartitioner

from streamremat.core.aggregators import (
    Aggregator,
    Composite,
    Count,
    DistinctCount,
    Max,
    Mean,
    Min,
    Sum,
)
from streamremat.core.operator import Operator, default_output
from streamremat.core.records import BatchOutput, SourceRecord
from streamremat.core.serdes import JSON

_partitioner = DefaultPartitioner()
#: keys per topic whose partition ``BatchSender`` remembers (then it starts over)
_KEY_CACHE = 100_000

#: Header names on dead-letter records (the original headers come first).
H_STAGE = "streamremat.error.stage"
H_REASON = "streamremat.error.reason"
H_OPERATOR = "streamremat.operator"
H_SOURCE = "streamremat.source"  # "topic/partition/offset"
#: On late records (with H_OPERATOR and H_SOURCE): why the operator did not take it.
H_LATE_REASON = "streamremat.late.reason"


class OutRecord(NamedTuple):
    topic: str
    key: bytes | None
    value: bytes | None
    timestamp_ms: int | None
    headers: list[tuple[str, bytes]]


def _headers(record: SourceRecord) -> list[tuple[str, bytes]]:
    return list(record.headers or ())


def partition_for(key: bytes | None, partitions: int) -> int:
    """The partition Kafka's default partitioner (murmur2) gives ``key``; keyless
    records go to partition 0, as ``BatchSender`` sends them."""
    if key is None:
        return 0
    parts = list(range(partitions))
    return int(_partitioner(key, parts, parts))


#: built-in aggregators whose result is a number, a string or None, never a container
_SCALAR_RESULT = (Count, Sum, Min, Max, Mean, DistinctCount)


def _default_json_option(agg: Aggregator) -> int | None:
    """The orjson option that encodes ``{"end_ms", "start_ms", "value"}`` (built in
    that order) to the same bytes as ``JSON.dumps`` of the default output, cheaper
    (sorting and non-str keys cost about 0.6 us a result); None: only JSON.dumps is."""
    if type(agg) in _SCALAR_RESULT:
        return 0
    if (type(agg) is Composite and all(type(n) is str for n in agg.names)
            and all(type(p) in _SCALAR_RESULT for p in agg.parts)):
        return 0 if list(agg.names) == sorted(agg.names) else orjson.OPT_SORT_KEYS
    return None


def to_records(
    op: Operator, source_partition: int, out: BatchOutput, forward_to: str | None = None
) -> list[OutRecord]:
    """Serialize one task's batch output for the sink, dead-letter and late topics,
    and a repartition stage's forwards for ``forward_to``."""
    records: list[OutRecord] = []
    if out.forwards and forward_to is not None:
        records.extend(
            OutRecord(forward_to, f.key, f.value, f.timestamp_ms, _headers(f.record))
            for f in out.forwards
        )
    option = None
    if out.results and op.output is default_output and op.output_serde is JSON:
        option = _default_json_option(op.aggregator)
    if option is not None:
        dumps_opt, sink = orjson.dumps, op.sink
        records.extend(
            OutRecord(sink, r.key, dumps_opt(
                {"end_ms": r.end_ms, "start_ms": r.start_ms, "value": r.value}, option=option,
            ), r.end_ms, [])
            for r in out.results
        )
    elif out.results:
        dumps, fmt, key_loads = op.output_serde.dumps, op.output, op.key_serde.loads
        default = fmt is default_output
        for r in out.results:
            # The default formatter ignores the key: don't decode it for nothing.
            key = None if default else key_loads(r.key)
            value = dumps(fmt(key, r.start_ms, r.end_ms, r.value))
            records.append(OutRecord(op.sink, r.key, value, r.end_ms, []))
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

    async def send(self, records: list[OutRecord]) -> list[asyncio.Future[Any]]:
        """Queue every record; return the delivery futures (await them to be sure)."""
        grouped: dict[tuple[str, int], list[OutRecord]] = defaultdict(list)
        for rec in records:
            key, topic = rec.key, rec.topic
            cache = self._by_key.get(topic)
            if cache is None or len(cache) > _KEY_CACHE:
                cache = self._by_key[topic] = {}
            partition = cache.get(key) if key is not None else None
            if partition is None:
                parts = self._partitions.get(topic) or await self._partitions_of(topic)
                if key is None:
                    partition = parts[0]
                else:
                    # Same partitioner as the Java client (murmur2), so keys land where
                    # Kafka Streams or any other producer would put them.
                    partition = cache[key] = _partitioner(key, parts, parts)
            grouped[(topic, partition)].append(rec)
        futures = []
        producer = self.producer
        for (topic, partition), recs in grouped.items():
            batch = producer.create_batch()
            for rec in recs:
                if batch.append(
                    key=rec.key, value=rec.value, timestamp=rec.timestamp_ms, headers=rec.headers
                ) is None:
                    futures.append(await producer.send_batch(batch, topic, partition=partition))
                    batch = producer.create_batch()
                    batch.append(
                        key=rec.key, value=rec.value, timestamp=rec.timestamp_ms,
                        headers=rec.headers,
                    )
            futures.append(await producer.send_batch(batch, topic, partition=partition))
        return futures
