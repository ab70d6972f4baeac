"""The portable replica: checkpoint frames in a compacted Kafka topic.

Any worker can restore a task from here, so a task can move between machines.

* Message key: ``"<task>/<seq as 16 hex>/<chunk index>"``; every key is
  written once, so compaction only ever drops keys that ``prune`` tombstoned.
* An encoded frame larger than ``chunk_size_bytes`` is split into chunks (the
  broker's default limit is ~1 MB a message). Each chunk's value starts with a
  header: chunk index, chunk count, frame length and the frame's xxhash64, so
  a reader can tell a complete frame from a partial write or a mix of chunks
  from two attempts.
* Partition of a task: ``task.partition % partitions`` of the checkpoint topic.
  A worker that owns source partition ``p`` usually owns every operator's task
  on ``p``, and they all sit in one checkpoint partition. The topic's
  partition count must therefore never change (``ensure_topic`` refuses).
* ``load`` reads the task's partition from the beginning to the end offset it
  saw at the start, reassembles frames and applies the same chain rule as the
  local store (``chain.select_restore_point``).
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import xxhash
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, TopicAlreadyExistsError, for_code

from streamremat.state.base import CheckpointStore
from streamremat.state.chain import (
    RestorePoint,
    StoredEntry,
    decode_entry,
    plan_prune,
    select_restore_point,
)
from streamremat.state.exceptions import (
    CheckpointSequenceError,
    CheckpointStoreUnavailable,
    CorruptCheckpoint,
)
from streamremat.state.frame import (
    DEFAULT_COMPRESS_MIN_BYTES,
    CheckpointFrame,
    TaskId,
    encode_frame,
)

__all__ = [
    "KafkaCheckpointConfig",
    "KafkaCheckpointStore",
    "KafkaClients",
    "corrupt_latest_replica",
]

log = logging.getLogger("streamremat.state")

_CHUNK_MAGIC = b"SRCC"
_CHUNK_VERSION = 1
_CHUNK = struct.Struct(">4sBIIQQ")  # magic, version, index, count, frame_len, frame_xxh64


class KafkaClients(Protocol):
    """How to build clients (connection, security, options); the runtime's
    ``KafkaClientConfig`` is one. A plain bootstrap string means plaintext."""

    @property
    def bootstrap_servers(self) -> str: ...

    def consumer_kwargs(self, **defaults: Any) -> dict[str, Any]: ...

    def producer_kwargs(self, **defaults: Any) -> dict[str, Any]: ...

    def admin_kwargs(self, **defaults: Any) -> dict[str, Any]: ...


@dataclass(frozen=True)
class _Plaintext:
    bootstrap_servers: str

    def consumer_kwargs(self, **defaults: Any) -> dict[str, Any]:
        return {"bootstrap_servers": self.bootstrap_servers, **defaults}

    producer_kwargs = admin_kwargs = consumer_kwargs


def _clients(target: str | KafkaClients) -> KafkaClients:
    return _Plaintext(target) if isinstance(target, str) else target


@dataclass(frozen=True)
class KafkaCheckpointConfig:
    """Settings of the checkpoint topic and its clients."""

    partitions: int = 8
    replication_factor: int = 1
    # Below the broker's default message.max.bytes (1,048,588) with room for key+headers.
    chunk_size_bytes: int = 900_000
    # Compaction must not run before a reader that started earlier has seen a
    # tombstone's key, and segments must roll for compaction to run at all.
    min_compaction_lag_ms: int = 60_000
    segment_ms: int = 3_600_000
    delete_retention_ms: int = 86_400_000
    load_timeout_s: float = 60.0
    request_timeout_ms: int = 30_000
    compress_min_bytes: int | None = DEFAULT_COMPRESS_MIN_BYTES
    extra_topic_config: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.partitions < 1 or self.replication_factor < 1:
            raise ValueError("partitions and replication_factor must be >= 1")
        if not 1024 <= self.chunk_size_bytes <= 1_000_000:
            raise ValueError(
                f"chunk_size_bytes={self.chunk_size_bytes}: use 1024..1_000_000 so a chunk "
                "fits the broker's default max message size"
            )

    def topic_config(self) -> dict[str, str]:
        config = {
            "cleanup.policy": "compact",
            "min.compaction.lag.ms": str(self.min_compaction_lag_ms),
            "segment.ms": str(self.segment_ms),
            "delete.retention.ms": str(self.delete_retention_ms),
        }
        config.update(self.extra_topic_config)
        return config


def _message_key(task: TaskId, seq: int, index: int) -> bytes:
    return b"%s/%016x/%d" % (task.to_bytes(), seq, index)


def _parse_key(key: bytes) -> tuple[str, int, int] | None:
    try:
        task, seq, index = key.split(b"/")
        return task.decode("ascii"), int(seq, 16), int(index)
    except (ValueError, UnicodeDecodeError):
        return None


def split_frame(blob: bytes, chunk_size_bytes: int) -> list[bytes]:
    """Chunk values for an encoded frame, each with the chunk header."""
    count = max(1, -(-len(blob) // chunk_size_bytes))
    digest = xxhash.xxh64_intdigest(blob)
    return [
        _CHUNK.pack(_CHUNK_MAGIC, _CHUNK_VERSION, i, count, len(blob), digest)
        + blob[i * chunk_size_bytes : (i + 1) * chunk_size_bytes]
        for i in range(count)
    ]


def join_chunks(chunks: Mapping[int, bytes]) -> bytes:
    """Reassemble a frame from its chunk values; raise ``CorruptCheckpoint`` if
    a chunk is missing, damaged, or from another write attempt."""
    first = chunks.get(0)
    if first is None or len(first) < _CHUNK.size:
        raise CorruptCheckpoint("chunk 0 missing or too short")
    _, _, _, count, frame_len, digest = _CHUNK.unpack_from(first)
    parts = []
    for i in range(count):
        value = chunks.get(i)
        if value is None or len(value) < _CHUNK.size:
            raise CorruptCheckpoint(f"chunk {i} of {count} missing")
        magic, version, index, n, length, d = _CHUNK.unpack_from(value)
        if (magic, version, index, n, length, d) != (
            _CHUNK_MAGIC,
            _CHUNK_VERSION,
            i,
            count,
            frame_len,
            digest,
        ):
            raise CorruptCheckpoint(f"chunk {i} of {count} does not belong to this frame")
        parts.append(value[_CHUNK.size :])
    blob = b"".join(parts)
    if len(blob) != frame_len or xxhash.xxh64_intdigest(blob) != digest:
        raise CorruptCheckpoint("reassembled frame does not match its chunk headers")
    return blob


@dataclass
class _PartitionScan:
    """What one read of a checkpoint partition found."""

    # Live chunk values of the task asked for: seq -> chunk index -> value.
    chunks: dict[int, dict[int, bytes]] = field(default_factory=dict)
    # Highest seq with a live chunk, for every task in the partition.
    last_seq: dict[str, int] = field(default_factory=dict)


class KafkaCheckpointStore(CheckpointStore):
    """Checkpoint frames in a compacted topic. Create with ``await open(...)``."""

    name = "kafka"

    def __init__(
        self, bootstrap: str | KafkaClients, topic: str, config: KafkaCheckpointConfig | None = None
    ) -> None:
        self.clients = _clients(bootstrap)
        self.bootstrap = self.clients.bootstrap_servers
        self.topic = topic
        self.config = config or KafkaCheckpointConfig()
        self._producer: Any = None
        self._consumer: Any = None
        self._partitions: int | None = None
        self._last_seq: dict[TaskId, int | None] = {}
        self._read_lock = asyncio.Lock()

    @classmethod
    async def open(
        cls, bootstrap: str | KafkaClients, topic: str, config: KafkaCheckpointConfig | None = None
    ) -> KafkaCheckpointStore:
        """Start the clients; raise ``CheckpointStoreUnavailable`` when the broker
        cannot be reached."""
        store = cls(bootstrap, topic, config)
        try:
            await store._start()
        except BaseException:
            await store.close()
            raise
        return store

    async def _start(self) -> None:
        cfg = self.config
        self._producer = AIOKafkaProducer(
            acks="all",
            enable_idempotence=True,
            **self.clients.producer_kwargs(
                linger_ms=0,
                max_request_size=cfg.chunk_size_bytes + 64 * 1024,
                request_timeout_ms=cfg.request_timeout_ms,
            ),
        )
        self._consumer = AIOKafkaConsumer(
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            **self.clients.consumer_kwargs(
                max_partition_fetch_bytes=4 * 1024 * 1024,
                fetch_max_bytes=16 * 1024 * 1024,
                # Every scan re-assigns this consumer; with the default 500 ms fetch wait the
                # fetch in flight delays seek and end_offsets, ~1 s per scan even when empty.
                fetch_max_wait_ms=20,
                request_timeout_ms=cfg.request_timeout_ms,
            ),
        )
        try:
            await self._producer.start()
            await self._consumer.start()
        except KafkaError as exc:
            raise CheckpointStoreUnavailable(
                f"cannot reach Kafka at {self.bootstrap} for checkpoint topic {self.topic!r}: {exc}"
            ) from exc

    async def ensure_topic(self) -> None:
        """Create the compacted checkpoint topic if it does not exist; refuse an
        existing one whose partition count differs (tasks would move)."""
        admin = AIOKafkaAdminClient(
            **self.clients.admin_kwargs(request_timeout_ms=self.config.request_timeout_ms)
        )
        await admin.start()
        try:
            response = await admin.create_topics(
                [
                    NewTopic(
                        name=self.topic,
                        num_partitions=self.config.partitions,
                        replication_factor=self.config.replication_factor,
                        topic_configs=self.config.topic_config(),
                    )
                ]
            )
            for _topic, code, *rest in response.topic_errors:
                error = for_code(code)
                if code and error is not TopicAlreadyExistsError:
                    raise CheckpointStoreUnavailable(
                        f"cannot create checkpoint topic {self.topic!r}: {error.__name__} {rest}"
                    )
        finally:
            await admin.close()
        actual = await self._partition_count()
        if actual != self.config.partitions:
            raise CheckpointStoreUnavailable(
                f"checkpoint topic {self.topic!r} has {actual} partitions, config says "
                f"{self.config.partitions}: set KafkaCheckpointConfig.partitions={actual} "
                "(changing it would move tasks to other partitions)"
            )

    async def append(self, frame: CheckpointFrame) -> None:
        """Replicate one checkpoint frame durably.

        1. Check ``frame.seq`` is above the task's newest seq in the topic (known
           from earlier calls, else read once from the partition), else raise
           ``CheckpointSequenceError``.
        2. Encode the frame (checksum included) and split it into chunks whose
           headers carry index, count, frame length and frame hash.
        3. Produce every chunk to the task's partition with ``acks=all`` and an
           idempotent producer, so chunks land in order without duplicates.
        4. Await every delivery; only then remember ``seq`` as the newest.
           Chunks are not atomic as a group: a crash in between leaves a partial
           frame, which every reader detects (step 2's headers) and skips.
        """
        last = await self.last_seq(frame.task)
        if last is not None and frame.seq <= last:
            raise CheckpointSequenceError(
                f"{frame.task}: seq {frame.seq} is not above the replicated seq {last}; "
                "use RestorePoint.next_seq or last_seq() + 1"
            )
        # zstd and the checksum of tens of MB: off the event loop (zstd lets the GIL go).
        blob = await asyncio.to_thread(encode_frame, frame, self.config.compress_min_bytes)
        partition = await self._partition_of(frame.task)
        futures = [
            await self._producer.send(
                self.topic, value, key=_message_key(frame.task, frame.seq, i), partition=partition
            )
            for i, value in enumerate(split_frame(blob, self.config.chunk_size_bytes))
        ]
        await asyncio.gather(*futures)
        self._last_seq[frame.task] = frame.seq

    async def load(self, task: TaskId) -> RestorePoint | None:
        scan = await self._scan(task)
        entries = await asyncio.to_thread(self._entries, task, scan)  # decompress, verify
        return select_restore_point(task, entries)

    async def prune(self, task: TaskId, keep: int) -> int:
        """Tombstone (null value) every chunk key of the frames that the ``keep``
        newest restorable checkpoints do not need; compaction removes them."""
        scan = await self._scan(task)
        doomed = plan_prune(await asyncio.to_thread(self._entries, task, scan), keep)
        partition = await self._partition_of(task)
        futures = [
            await self._producer.send(
                self.topic, None, key=_message_key(task, seq, i), partition=partition
            )
            for seq in doomed
            for i in scan.chunks[seq]
        ]
        await asyncio.gather(*futures)
        return len(doomed)

    async def last_seq(self, task: TaskId) -> int | None:
        if task not in self._last_seq:
            await self._scan(task)
        return self._last_seq.get(task)

    async def close(self) -> None:
        for client in (self._producer, self._consumer):
            if client is not None:
                await client.stop()
        self._producer = self._consumer = None

    def _entries(self, task: TaskId, scan: _PartitionScan) -> list[StoredEntry]:
        entries = []
        for seq, chunks in scan.chunks.items():
            try:
                blob: bytes | None = join_chunks(chunks)
                error = None
            except CorruptCheckpoint as exc:
                blob, error = None, str(exc)
            entries.append(decode_entry(task, seq, blob, error))
        return entries

    async def _partition_count(self) -> int:
        if self._partitions is None:
            try:
                found = await self._producer.partitions_for(self.topic)
            except KafkaError as exc:
                raise CheckpointStoreUnavailable(
                    f"checkpoint topic {self.topic!r} not found at {self.bootstrap}: {exc}; "
                    "call ensure_topic() first"
                ) from exc
            self._partitions = len(found)
        return self._partitions

    async def _partition_of(self, task: TaskId) -> int:
        return task.partition % await self._partition_count()

    async def _scan(self, task: TaskId) -> _PartitionScan:
        """Read the task's partition from the beginning to the end offset seen
        at the start; keep ``task``'s live chunks, and the newest seq of every
        task in the partition (cached for ``append``'s sequence check)."""
        tp = TopicPartition(self.topic, await self._partition_of(task))
        wanted = str(task)
        live: dict[str, dict[int, set[int]]] = {}
        scan = _PartitionScan()
        deadline = time.monotonic() + self.config.load_timeout_s
        async with self._read_lock:
            consumer = self._consumer
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            end = (await consumer.end_offsets([tp]))[tp]
            while await consumer.position(tp) < end:
                if time.monotonic() > deadline:
                    raise CheckpointStoreUnavailable(
                        f"reading {tp} took over {self.config.load_timeout_s}s "
                        "(KafkaCheckpointConfig.load_timeout_s)"
                    )
                batch = await consumer.getmany(tp, timeout_ms=500)
                for msg in batch.get(tp, ()):
                    parsed = _parse_key(msg.key or b"")
                    if parsed is None:
                        log.warning("ignoring foreign key %r in %s", msg.key, tp)
                        continue
                    task_str, seq, index = parsed
                    seqs = live.setdefault(task_str, {})
                    if msg.value is None:
                        seqs.get(seq, set()).discard(index)
                        if task_str == wanted and seq in scan.chunks:
                            scan.chunks[seq].pop(index, None)
                        continue
                    seqs.setdefault(seq, set()).add(index)
                    if task_str == wanted:
                        scan.chunks.setdefault(seq, {})[index] = msg.value
        scan.chunks = {seq: chunks for seq, chunks in scan.chunks.items() if chunks}
        for task_str, seqs in live.items():
            present = [seq for seq, indices in seqs.items() if indices]
            try:
                other = TaskId.parse(task_str)
            except ValueError:
                continue
            self._last_seq[other] = max(present, default=None)
        self._last_seq.setdefault(task, None)
        return scan


async def corrupt_latest_replica(
    store: KafkaCheckpointStore, task: TaskId, seq: int | None = None
) -> int:
    """Fault-injection helper: overwrite chunk 0 of the newest (or the given)
    replicated frame of ``task`` with one whose data has a byte flipped.
    Return the damaged seq."""
    scan = await store._scan(task)
    if not scan.chunks:
        raise LookupError(f"no replicated checkpoint of {task} in {store.topic!r}")
    seq = max(scan.chunks) if seq is None else seq
    value = scan.chunks[seq][0]
    mid = _CHUNK.size + (len(value) - _CHUNK.size) // 2
    damaged = value[:mid] + bytes([value[mid] ^ 0xFF]) + value[mid + 1 :]
    await store._producer.send_and_wait(
        store.topic,
        damaged,
        key=_message_key(task, seq, 0),
        partition=await store._partition_of(task),
    )
    return seq
