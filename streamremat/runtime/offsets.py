"""A group's committed offsets, read only once they are stable (KIP-447).

aiokafka's OffsetFetch (v3) returns the last offset the group coordinator has
materialised. Offsets committed in a transaction are pending until the
coordinator has written the commit marker *and* applied it, which it does
asynchronously; a read in between returns the older offset. A new owner that
read it would replay to that older offset and then emit again the results the
previous owner's transaction had just committed. OffsetFetch v7 (Kafka 2.5+)
with ``require_stable`` makes the broker answer ``UNSTABLE_OFFSET_COMMIT`` for a
partition while any transaction holds pending offsets for it; we ask again
until it answers.

The request and response are declared here with aiokafka's protocol types:
aiokafka itself stops at OffsetFetch v3.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from aiokafka import TopicPartition
from aiokafka.errors import IncompatibleBrokerVersion, for_code
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import (
    Boolean,
    CompactArray,
    CompactString,
    Int16,
    Int32,
    Int64,
    Schema,
    TaggedFields,
)

from streamremat.runtime.exceptions import WorkerError

__all__ = ["UnstableOffsetsError", "fetch_stable_offsets"]

log = logging.getLogger("streamremat.worker")

#: The broker's UNSTABLE_OFFSET_COMMIT (aiokafka has no class for it).
UNSTABLE_OFFSET_COMMIT = 88


class UnstableOffsetsError(WorkerError):
    """A transaction kept offsets of the partition pending for too long."""


class _OffsetFetchResponseV7(Response):  # type: ignore[misc]
    API_KEY = 9
    API_VERSION = 7
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("topics", CompactArray(
            ("name", CompactString("utf-8")),
            ("partitions", CompactArray(
                ("partition_index", Int32),
                ("committed_offset", Int64),
                ("committed_leader_epoch", Int32),
                ("metadata", CompactString("utf-8")),
                ("error_code", Int16),
                ("tags", TaggedFields),
            )),
            ("tags", TaggedFields),
        )),
        ("error_code", Int16),
        ("tags", TaggedFields),
    )


class _OffsetFetchRequestV7(RequestStruct):  # type: ignore[misc]
    FLEXIBLE_VERSION = True
    API_KEY = 9
    API_VERSION = 7
    RESPONSE_TYPE = _OffsetFetchResponseV7
    SCHEMA = Schema(
        ("group_id", CompactString("utf-8")),
        ("topics", CompactArray(
            ("name", CompactString("utf-8")),
            ("partition_indexes", CompactArray(Int32)),
            ("tags", TaggedFields),
        )),
        ("require_stable", Boolean),
        ("tags", TaggedFields),
    )


class _StableOffsetFetch(Request[_OffsetFetchRequestV7]):  # type: ignore[misc]
    API_KEY = 9

    def __init__(self, group_id: str, partitions: Sequence[TopicPartition]) -> None:
        by_topic: dict[str, list[int]] = defaultdict(list)
        for tp in partitions:
            by_topic[tp.topic].append(tp.partition)
        self._group_id = group_id
        self._topics: list[tuple[str, list[int], dict[int, bytes]]] = [
            (topic, parts, {}) for topic, parts in sorted(by_topic.items())
        ]

    def build(self, request_struct_class: type[_OffsetFetchRequestV7]) -> _OffsetFetchRequestV7:
        return request_struct_class(self._group_id, self._topics, True, {})


async def fetch_stable_offsets(
    admin: Any,
    group_id: str,
    partitions: Sequence[TopicPartition],
    timeout_s: float = 60.0,
) -> dict[TopicPartition, tuple[int | None, str]]:
    """Each partition's committed offset (None: none) and metadata, once stable.

    1. Find the group's coordinator and send OffsetFetch v7 with ``require_stable``.
    2. A partition answered ``UNSTABLE_OFFSET_COMMIT`` has a transaction still
       completing: wait (50 ms, doubling to 1 s) and ask again for those.
    3. Still unstable after ``timeout_s`` (a transaction of a producer that is not
       this partition's, left open): ``UnstableOffsetsError`` naming it.

    ``admin`` is an ``AIOKafkaAdminClient``; its connection (and security
    settings) carry the request.
    """
    deadline = time.monotonic() + timeout_s
    delay = 0.05
    found: dict[TopicPartition, tuple[int | None, str]] = {}
    pending = list(partitions)
    while pending:
        coordinator = await admin.find_coordinator(group_id)
        try:
            # aiokafka's own client (and its security settings); it has no public send.
            response = await admin._client.send(coordinator,
                                                _StableOffsetFetch(group_id, pending))
        except (NotImplementedError, IncompatibleBrokerVersion) as exc:
            raise WorkerError(
                "the broker does not support OffsetFetch v7 (require_stable, Kafka 2.5+), "
                f"which exactly-once recovery needs: {exc}. Upgrade the brokers"
            ) from exc
        if response.error_code:
            raise for_code(response.error_code)(f"OffsetFetch for group {group_id!r}")
        unstable = []
        for topic, parts, _ in response.topics:
            for partition, offset, _epoch, metadata, error_code, _ in parts:
                tp = TopicPartition(topic, partition)
                if error_code == UNSTABLE_OFFSET_COMMIT:
                    unstable.append(tp)
                elif error_code:
                    raise for_code(error_code)(f"OffsetFetch of {tp} for group {group_id!r}")
                else:
                    found[tp] = (None if offset < 0 else int(offset), str(metadata or ""))
        if unstable and delay == 0.05:
            log.info("group %s: the committed offsets of %s are pending in a transaction; "
                     "waiting until it completes", group_id,
                     ", ".join(f"{tp.topic}[{tp.partition}]" for tp in unstable))
        pending = unstable
        if pending:
            if time.monotonic() > deadline:
                raise UnstableOffsetsError(
                    f"group {group_id!r}: the committed offsets of "
                    f"{', '.join(f'{tp.topic}[{tp.partition}]' for tp in pending)} stayed "
                    f"pending for {timeout_s:.0f} s: a transaction that commits offsets for "
                    "them is still open. Find the producer (kafka-transactions.sh list) and "
                    "let it finish or abort it (kafka-transactions.sh abort), then restart"
                )
            await asyncio.sleep(delay)
            delay = min(1.0, delay * 2)
    return found
