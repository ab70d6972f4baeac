"""Small typed helpers over aiokafka: topics, offsets, bulk produce, read-to-end.

Used by tests, the worker and benchmarks. Every helper opens and closes its own
client, so each call is self-contained; hot paths should hold their own clients.
Each takes a bootstrap string (plaintext) or a ``KafkaClientConfig`` (security
and options), so the same helpers work on a secured cluster.

Topics are created only through ``create_topics``: it resolves each topic's
replication factor (``Replication``: ``min(3, brokers)`` and
``min.insync.replicas = min(2, RF)`` unless configured) and warns about an
existing topic replicated less than asked.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import for_code
from aiokafka.protocol.metadata import MetadataRequest

from streamremat.runtime.client import KafkaClientConfig

IsolationLevel = Literal["read_committed", "read_uncommitted"]
#: Where a helper connects: a plaintext bootstrap string, or the full client config.
Target = str | KafkaClientConfig
Headers = Sequence[tuple[str, bytes]]

# Kafka protocol error codes we tolerate in idempotent admin calls.
_NO_ERROR = 0
_UNKNOWN_TOPIC = 3
_TOPIC_EXISTS = 36
_INVALID_REPLICATION_FACTOR = 38
_RF_HINT = "; lower --replication-factor to at most the number of brokers"
_PRODUCE_WINDOW = 20_000  # sends in flight before we wait for acks


class KafkaAdminError(RuntimeError):
    """The broker rejected an admin request; ``code`` is Kafka's error code, if any."""

    NOT_AUTHORIZED = 29  # TOPIC_AUTHORIZATION_FAILED

    def __init__(self, message: str, code: int | None = None) -> None:
        if code == self.NOT_AUTHORIZED:
            message += " (not authorized: an ACL is missing for this user)"
        super().__init__(message)
        self.code = code


log = logging.getLogger("streamremat.kafka")


@dataclass(frozen=True)
class TopicSpec:
    """A topic to create. ``replication_factor`` ``None``: ``create_topics``'s
    ``Replication`` decides (``min(3, brokers)`` by default)."""

    name: str
    partitions: int = 1
    config: Mapping[str, str] = field(default_factory=dict)
    replication_factor: int | None = None


@dataclass(frozen=True)
class Replication:
    """How topics the worker creates are replicated.

    ``factor`` ``None``: ``min(3, brokers)``; ``min_insync`` ``None``:
    ``min(2, factor)``, so one broker may be down while ``acks=all`` writes go on.
    """

    factor: int | None = None
    min_insync: int | None = None

    def __post_init__(self) -> None:
        if self.factor is not None and self.factor < 1:
            raise ValueError(f"--replication-factor must be >= 1, got {self.factor}")
        if self.min_insync is not None and self.min_insync < 1:
            raise ValueError(f"--min-insync-replicas must be >= 1, got {self.min_insync}")
        if self.factor and self.min_insync and self.min_insync > self.factor:
            raise ValueError(
                f"--min-insync-replicas {self.min_insync} is above --replication-factor "
                f"{self.factor}: no write could ever succeed"
            )

    def resolve(self, brokers: int, asked: int | None = None) -> tuple[int, int]:
        """(replication factor, min.insync.replicas) on a cluster of ``brokers``."""
        factor = asked or self.factor or max(1, min(3, brokers))
        return factor, min(self.min_insync or 2, factor)


class ProducerRecord(NamedTuple):
    """What ``produce`` sends. A plain 5-tuple of the same shape works too."""

    key: bytes | None
    value: bytes | None
    timestamp_ms: int | None = None
    partition: int | None = None
    headers: Headers = ()


RecordTuple = tuple[bytes | None, bytes | None, int | None, int | None, Headers]


class ConsumedRecord(NamedTuple):
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int
    headers: tuple[tuple[str, bytes], ...]


@asynccontextmanager
async def admin_client(bootstrap: Target) -> AsyncIterator[Any]:
    admin = AIOKafkaAdminClient(
        **KafkaClientConfig.of(bootstrap).admin_kwargs(request_timeout_ms=30_000)
    )
    await admin.start()
    try:
        yield admin
    finally:
        await admin.close()


async def cluster_ready(bootstrap: Target, timeout_s: float = 5.0) -> bool:
    """True if the broker answers a metadata request with at least one broker."""
    try:
        async with asyncio.timeout(timeout_s), admin_client(bootstrap) as admin:
            cluster: dict[str, Any] = await admin.describe_cluster()
            return bool(cluster.get("brokers"))
    except Exception:  # any failure just means "not ready yet"
        return False


async def create_topics(
    bootstrap: Target,
    specs: Sequence[TopicSpec],
    *,
    wait_s: float = 30.0,
    replication: Replication | None = None,
) -> list[str]:
    """Create topics that don't exist yet; return the names created now.

    1. Count the brokers; each spec's replication factor is its own, else
       ``replication``'s (default ``min(3, brokers)``), and ``min.insync.replicas``
       ``min(2, RF)`` unless the spec's config sets it.
    2. Create those not listed yet (so a user without CREATE runs on topics made
       for it); one that appeared meanwhile is fine, any other error raises.
    3. For the topics that existed, log a warning naming each one replicated
       less than asked (its data would not survive the loss of a broker).
    4. Wait until every requested topic has a leader for each partition, so
       producing right after this returns works.
    """
    if not specs:
        return []
    policy = replication or Replication()
    async with admin_client(bootstrap) as admin:
        brokers = len((await admin.describe_cluster()).get("brokers") or ()) or 1
        asked: dict[str, int] = {}
        new = []
        for s in specs:
            factor, min_insync = policy.resolve(brokers, s.replication_factor)
            asked[s.name] = factor
            config = {"min.insync.replicas": str(min_insync), **s.config}
            new.append(NewTopic(s.name, s.partitions, factor, topic_configs=config))
        listed = set(await admin.list_topics())
        existing = [t.name for t in new if t.name in listed]
        new = [t for t in new if t.name not in listed]
        response = await admin.create_topics(new) if new else None
        created: list[str] = []
        for name, code, message in _topic_errors(response) if response else ():
            if code == _NO_ERROR:
                created.append(name)
            elif code == _TOPIC_EXISTS:
                existing.append(name)
            else:
                raise KafkaAdminError(
                    f"create topic {name!r} (replication factor {asked.get(name)}, "
                    f"{brokers} brokers) failed: error {code} {message}"
                    + (_RF_HINT if code == _INVALID_REPLICATION_FACTOR else ""),
                    code,
                )
        await _warn_underreplicated(admin, {n: asked[n] for n in existing if n in asked})
        await _wait_for_leaders(admin, {s.name: s.partitions for s in specs}, wait_s)
    return created


async def _warn_underreplicated(admin: Any, asked: Mapping[str, int]) -> None:
    if not asked:
        return
    for item in await admin.describe_topics(list(asked)):
        if item["error_code"] != _NO_ERROR or not item["partitions"]:
            continue
        factor = min(len(p["replicas"]) for p in item["partitions"])
        if factor < asked[item["topic"]]:
            log.warning(
                "topic %r exists with replication factor %d, below the %d asked "
                "(--replication-factor): losing a broker can lose its records; raise it "
                "with kafka-reassign-partitions",
                item["topic"], factor, asked[item["topic"]],
            )


async def delete_topics(bootstrap: Target, names: Sequence[str]) -> None:
    """Delete topics; topics that don't exist are ignored."""
    if not names:
        return
    async with admin_client(bootstrap) as admin:
        response = await admin.delete_topics(list(names))
        for name, code, message in _topic_errors(response):
            if code not in (_NO_ERROR, _UNKNOWN_TOPIC):
                raise KafkaAdminError(f"delete topic {name!r} failed: error {code} {message}", code)


async def list_topics(bootstrap: Target) -> list[str]:
    async with admin_client(bootstrap) as admin:
        names: list[str] = await admin.list_topics()
        return sorted(names)


async def topic_partitions(bootstrap: Target, topic: str) -> list[int]:
    """Sorted partition ids of ``topic``; KafkaAdminError if it doesn't exist."""
    async with admin_client(bootstrap) as admin:
        described = await admin.describe_topics([topic])
    for item in described:
        if item["topic"] == topic:
            code = item["error_code"]
            if code == _UNKNOWN_TOPIC:
                raise KafkaAdminError(f"topic {topic!r} does not exist", code)
            if code != _NO_ERROR:
                raise KafkaAdminError(
                    f"topic {topic!r}: {for_code(code).__name__} (error {code})", code
                )
            return sorted(p["partition"] for p in item["partitions"])
    raise KafkaAdminError(f"topic {topic!r} not found")


async def topic_config(bootstrap: Target, topic: str) -> dict[str, str]:
    """The broker-side effective config of ``topic`` (e.g. ``retention.ms``)."""
    async with admin_client(bootstrap) as admin:
        responses = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    result: dict[str, str] = {}
    for response in responses:
        for resource in response.to_object()["resources"]:
            if resource["resource_name"] != topic:
                continue
            if resource["error_code"] != _NO_ERROR:
                raise KafkaAdminError(
                    f"describe config of {topic!r}: error {resource['error_code']} "
                    f"{resource['error_message']}",
                    resource["error_code"],
                )
            for entry in resource["config_entries"]:
                if entry["config_value"] is not None:
                    result[entry["config_names"]] = entry["config_value"]
    return result


def retention_s(config: dict[str, str]) -> float | None:
    """A topic's time retention in seconds (of ``topic_config``); None when unlimited
    or unknown."""
    try:
        ms = int(config.get("retention.ms", "-1"))
    except ValueError:
        return None
    return None if ms < 0 else ms / 1000


async def end_offsets(
    bootstrap: Target, topic: str, isolation_level: IsolationLevel = "read_uncommitted"
) -> dict[int, int]:
    """Per partition, the offset the next record will get (the LSO under read_committed)."""
    async with _consumer(bootstrap, isolation_level) as consumer:
        tps = _tps(topic, await topic_partitions(bootstrap, topic))
        offsets: dict[TopicPartition, int] = await consumer.end_offsets(tps)
    return {tp.partition: off for tp, off in offsets.items()}


async def beginning_offsets(bootstrap: Target, topic: str) -> dict[int, int]:
    """Per partition, the earliest retained offset."""
    async with _consumer(bootstrap, "read_uncommitted") as consumer:
        tps = _tps(topic, await topic_partitions(bootstrap, topic))
        offsets: dict[TopicPartition, int] = await consumer.beginning_offsets(tps)
    return {tp.partition: off for tp, off in offsets.items()}


async def produce(
    bootstrap: Target,
    topic: str,
    records: Iterable[RecordTuple],
    *,
    linger_ms: int = 5,
    compression_type: str | None = None,
) -> int:
    """Send many records fast (pipelined, idempotent, acks=all); return how many were sent.

    Sends are batched by the producer and awaited in windows, never one by one.
    """
    producer = AIOKafkaProducer(
        acks="all",
        enable_idempotence=True,
        **KafkaClientConfig.of(bootstrap).producer_kwargs(
            linger_ms=linger_ms, max_batch_size=256 * 1024, compression_type=compression_type
        ),
    )
    await producer.start()
    count = 0
    pending: list[Awaitable[Any]] = []
    try:
        for key, value, timestamp_ms, partition, headers in records:
            pending.append(
                await producer.send(
                    topic,
                    value=value,
                    key=key,
                    partition=partition,
                    timestamp_ms=timestamp_ms,
                    headers=list(headers) or None,
                )
            )
            count += 1
            if len(pending) >= _PRODUCE_WINDOW:
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)
    finally:
        await producer.stop()
    return count


async def consume_all(
    bootstrap: Target,
    topic: str,
    *,
    isolation_level: IsolationLevel = "read_committed",
    partitions: Sequence[int] | None = None,
    timeout_s: float = 30.0,
) -> list[ConsumedRecord]:
    """Read ``topic`` from the beginning up to its current end offsets (no group).

    Under read_committed the end is the last stable offset, so records of open
    transactions are not waited for. Records are ordered by partition, then offset.
    """
    async with _consumer(bootstrap, isolation_level) as consumer:
        if partitions is None:
            partitions = await topic_partitions(bootstrap, topic)
        tps = _tps(topic, partitions)
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends: dict[TopicPartition, int] = await consumer.end_offsets(tps)
        out: dict[int, list[ConsumedRecord]] = {tp.partition: [] for tp in tps}
        remaining = {tp for tp in tps if await consumer.position(tp) < ends[tp]}
        deadline = time.monotonic() + timeout_s
        while remaining:
            if time.monotonic() > deadline:
                raise TimeoutError(f"consume_all({topic!r}) not at end after {timeout_s} s")
            batches = await consumer.getmany(*remaining, timeout_ms=200)
            for tp, messages in batches.items():
                out[tp.partition].extend(_to_record(m) for m in messages if m.offset < ends[tp])
            for tp in list(remaining):
                if await consumer.position(tp) >= ends[tp]:
                    remaining.discard(tp)
    return [record for pid in sorted(out) for record in out[pid]]


@asynccontextmanager
async def _consumer(bootstrap: Target, isolation_level: IsolationLevel) -> AsyncIterator[Any]:
    consumer = AIOKafkaConsumer(
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level=isolation_level,
        **KafkaClientConfig.of(bootstrap).consumer_kwargs(
            max_partition_fetch_bytes=4 * 1024 * 1024
        ),
    )
    await consumer.start()
    try:
        yield consumer
    finally:
        await consumer.stop()


def _tps(topic: str, partitions: Iterable[int]) -> list[TopicPartition]:
    return [TopicPartition(topic, p) for p in partitions]


def _to_record(message: Any) -> ConsumedRecord:
    return ConsumedRecord(
        topic=message.topic,
        partition=message.partition,
        offset=message.offset,
        key=message.key,
        value=message.value,
        timestamp_ms=message.timestamp,
        headers=tuple((k, bytes(v)) for k, v in message.headers),
    )


def _topic_errors(response: Any) -> list[tuple[str, int, str | None]]:
    """(name, error code, message) per topic of a Create/DeleteTopics response."""
    obj = response.to_object()
    key = "topic_errors" if "topic_errors" in obj else "topic_error_codes"
    rows = []
    for item in obj[key]:
        rows.append((item["topic"], item["error_code"], item.get("error_message")))
    return rows


async def _wait_for_leaders(admin: Any, wanted: Mapping[str, int], wait_s: float) -> None:
    """Until every live broker's metadata has each topic with a leader per partition:
    on a cluster, a client asking another broker right after creation would
    otherwise be told the topic does not exist."""
    deadline = time.monotonic() + wait_s
    nodes = [b["node_id"] for b in (await admin.describe_cluster()).get("brokers") or ()]
    request = MetadataRequest(list(wanted), False)
    for node in nodes or [None]:
        while True:
            described = (await admin._send_request(request, node_id=node)).to_object()["topics"]
            ready = {
                t["topic"]
                for t in described
                if t["error_code"] == _NO_ERROR
                and len(t["partitions"]) >= wanted[t["topic"]]
                and all(p["leader"] >= 0 for p in t["partitions"])
            }
            if ready >= set(wanted):
                break
            if time.monotonic() > deadline:
                missing = sorted(set(wanted) - ready)
                raise KafkaAdminError(
                    f"topics {missing} have no leader on broker {node} after {wait_s} s"
                )
            await asyncio.sleep(0.05)


__all__ = [
    "ConsumedRecord",
    "IsolationLevel",
    "KafkaAdminError",
    "ProducerRecord",
    "RecordTuple",
    "Replication",
    "Target",
    "TopicSpec",
    "admin_client",
    "beginning_offsets",
    "cluster_ready",
    "consume_all",
    "create_topics",
    "delete_topics",
    "end_offsets",
    "list_topics",
    "produce",
    "topic_config",
    "topic_partitions",
]
