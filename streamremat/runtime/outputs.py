"""Turning a batch's results, dead letters and late records into Kafka records,
and sending them in per-partition batches (one await per batch, not per record).

Where the native extension is built, the worker's results with the default
output (``to_sendables``) skip the per-record objects: a slice
of results is encoded in one call (``streamremat_native.encode_results``: keys,
values byte-identical to orjson's, murmur2 of each key) into a ``ResultRun``,
and ``BatchSender`` lays that out as whole Kafka record batches per partition
(``EncodedResults.batches``), handed to aiokafka's accumulator as it takes its
own ``BatchBuilder`` (``producer.send_batch``). A slice it can't encode exactly
(an int past 64 bits, a custom output) goes the Python way, which also finds
the results that fail.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from itertools import groupby
from operator import attrgetter
from typing import Any, NamedTuple, cast

import orjson
from aiokafka.partitioner import DefaultPartitioner

from streamremat.core import fastpath
from streamremat.core.aggregators import Aggregator, Composite, Count, Max, Mean, Min, Sum
from streamremat.core.closing import FixedSlice
from streamremat.core.operator import Operator
from streamremat.core.output import default_json_option, serialize_results
from streamremat.core.records import BatchOutput, FailedResult, SourceRecord, WindowResult

_partitioner = DefaultPartitioner()
#: False: results go the Python way even where the extension is built (the
#: benchmarks' A/B of the output path alone; ``STREAMREMAT_NATIVE=0`` turns off all)
native_results = True
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


class ResultRun(NamedTuple):
    """Results for ``topic`` encoded natively (``streamremat_native.EncodedResults``):
    no Python object per result; ``BatchSender`` sends them as whole record batches."""

    topic: str
    encoded: Any


#: What ``BatchSender`` sends: records, and runs of natively encoded results.
Sendable = OutRecord | ResultRun

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


#: Whether this orjson writes floats as the native encoder does (orjson 3.13's
#: layout; older ones wrote ``1e16`` where it writes ``1e+16``): else no native
#: encoding at all, so the sink's bytes never depend on the extension.
_FLOATS_AS_NATIVE = orjson.dumps([1e16, 1e-7, 1e-5, 1e15, 5e-324, -0.0, 0.1]) == (
    b"[1e+16,1e-7,0.00001,1000000000000000.0,5e-324,-0.0,0.1]")


def encode_natively(op: Operator, results: Sequence[WindowResult]) -> ResultRun | None:
    """``results`` for ``op``'s sink in one native call, or None where the Python
    path must encode them (no extension, a custom output or serde, a value it
    does not write exactly as orjson). A slice of a closed tumbling/hopping
    window of built-in aggregations is encoded from its accumulators, its
    results never built (``FixedSlice.encoded``)."""
    native = fastpath.native_module
    if (native is None or not fastpath.native_enabled or not native_results
            or not _FLOATS_AS_NATIVE or not hasattr(native, "encode_accumulators")):
        return None
    option = default_json_option(op)
    if option is None:
        return None
    if type(results) is FixedSlice:
        shape = _accumulator_shape(op.aggregator)
        if shape is not None:
            kinds, names, order = shape

            def encode(s: FixedSlice) -> Any:
                if s.rows is not None:  # the native table's rows: from their numbers
                    return s.rows.encode(s.start, s.end, kinds, names, order)
                return native.encode_accumulators(s.keys, s.accs, s.start, s.end, kinds,
                                                  names, order)

            encoded = results.encoded(encode)
            if encoded is not None:
                return ResultRun(op.sink, encoded)
    rows = results if type(results) is list else list(results)
    encoded = native.encode_results(rows, option == orjson.OPT_SORT_KEYS)
    return None if encoded is None else ResultRun(op.sink, encoded)


#: the aggregations whose result ``encode_accumulators`` writes from the accumulator
_NATIVE_KINDS: dict[type, str] = {Count: "count", Sum: "sum", Min: "min", Max: "max",
                                  Mean: "mean"}


def _accumulator_shape(agg: Aggregator) -> tuple[list[str], list[str] | None, list[int]] | None:
    """(kind per aggregation, the names in the order they are written or None for
    a lone one, the accumulator index of each name) for ``encode_accumulators``;
    None where a result needs its aggregation's own ``result`` (a subclass, a
    sketch, ...). Names are written sorted, as ``default_json_option`` encodes."""
    if type(agg) is Composite:
        kinds = [_NATIVE_KINDS.get(type(p)) for p in agg.parts]
        if any(k is None for k in kinds):
            return None
        order = sorted(range(len(agg.names)), key=lambda i: agg.names[i])
        return ([cast(str, k) for k in kinds], [agg.names[i] for i in order], order)
    kind = _NATIVE_KINDS.get(type(agg))
    return None if kind is None else ([kind], None, [0])


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


def to_sendables(op: Operator, source_partition: int, out: BatchOutput) -> list[Sendable]:
    """``to_records`` of a task's output for ``BatchSender`` alone: its results as
    one natively encoded ``ResultRun`` where they can be (``encode_natively``),
    then the rest as records. A caller that reads or changes the records (the
    faust bridge adds headers) takes ``to_records``."""
    run = encode_natively(op, out.results) if out.results else None
    if run is None:
        return cast(list[Sendable], to_records(op, source_partition, out))
    rest = BatchOutput(dead_letters=out.dead_letters, late=out.late, failed=out.failed)
    return [run, *to_records(op, source_partition, rest)]


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


#: What goes to one (topic, partition), in order: runs of records, and record
#: batches built natively (``streamremat_native.RecordBatch``).
_Pieces = list[list[OutRecord] | Any]


class BatchSender:
    """Sends records through one producer in per-(topic, partition) batches."""

    def __init__(self, producer: Any) -> None:
        self.producer = producer
        self._partitions: dict[str, list[int]] = {}
        #: per topic, key -> partition: murmur2 is pure Python (~15 us a key), and a
        #: repartition stage sends every record while keys repeat
        self._by_key: dict[str, dict[bytes, int]] = {}
        self._native_spec: tuple[int, bool] | bool | None = False  # False: not probed yet

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

    def native_batches(self) -> tuple[int, bool] | None:
        """(batch size, transactional) of the batches aiokafka's producer builds,
        for native record batches in their place; None where they can't stand
        in for them: compression, serializers, or not aiokafka's accumulator."""
        if self._native_spec is False:
            producer = self.producer
            acc = getattr(producer, "_message_accumulator", None)
            spec = None
            if (acc is not None and getattr(acc, "_compression_type", None) == 0
                    and getattr(producer, "_key_serializer", 0) is None
                    and getattr(producer, "_value_serializer", 0) is None
                    and type(getattr(acc, "_batch_size", None)) is int):
                txn = getattr(acc, "_txn_manager", None)
                spec = (acc._batch_size,
                        txn is not None and txn.transactional_id is not None)
            self._native_spec = spec
        return cast(tuple[int, bool] | None, self._native_spec)

    async def send(self, records: Sequence[Sendable]) -> list[asyncio.Future[Any]]:
        """Queue every record; return the delivery futures (await them to be sure).

        Records come in runs of one topic (a task's results, then its dead letters):
        each run is split by partition with the key cache looked up in C (``map``),
        so a record costs a dict lookup and an append until its batch is built. A
        ``ResultRun`` is split natively, into whole record batches."""
        grouped: dict[tuple[str, int], _Pieces] = {}
        for topic, run in groupby(records, _topic):
            parts = self._partitions.get(topic) or await self._partitions_of(topic)
            # ResultRun has 2 fields, OutRecord 5: ``len`` tells them apart in C.
            for width, items in groupby(run, len):
                if width == 2:
                    for item in items:
                        self._split_encoded(topic, parts, cast(ResultRun, item).encoded, grouped)
                else:
                    self._split(topic, parts, cast(list[OutRecord], list(items)), grouped)
        futures = []
        producer = self.producer
        for (topic, partition), pieces in grouped.items():
            for piece in pieces:
                if type(piece) is not list:  # a native record batch: as it is
                    futures.append(await producer.send_batch(piece, topic, partition=partition))
                    continue
                batch = producer.create_batch()
                append = batch.append
                for rec in piece:
                    if append(key=rec.key, value=rec.value, timestamp=rec.timestamp_ms,
                              headers=rec.headers) is None:
                        futures.append(await producer.send_batch(batch, topic, partition=partition))
                        batch = producer.create_batch()
                        append = batch.append
                        append(key=rec.key, value=rec.value, timestamp=rec.timestamp_ms,
                               headers=rec.headers)
                futures.append(await producer.send_batch(batch, topic, partition=partition))
        return futures

    def _split_encoded(self, topic: str, parts: list[int], encoded: Any,
                       grouped: dict[tuple[str, int], _Pieces]) -> None:
        spec = self.native_batches()
        if spec is None:  # aiokafka builds the batches: records, as the Python path
            keys, values, times = encoded.columns()
            self._split(topic, parts, [OutRecord(topic, k, v, t, [])
                                       for k, v, t in zip(keys, values, times, strict=True)],
                        grouped)
            return
        batch_size, transactional = spec
        for index, batch in encoded.batches(len(parts), batch_size, transactional):
            grouped.setdefault((topic, parts[index]), []).append(batch)

    def _split(self, topic: str, parts: list[int], recs: list[OutRecord],
               grouped: dict[tuple[str, int], _Pieces]) -> None:
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
                pieces = grouped.setdefault((topic, partition), [])
                if pieces and type(pieces[-1]) is list:
                    pieces[-1].extend(bucket)
                else:
                    pieces.append(bucket)
