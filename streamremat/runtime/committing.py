"""A partition's outputs on their way to Kafka, and the commit of its offset.

Exactly-once: outputs go into the partition's transaction, the offset joins it,
then it commits. At-least-once: every output is awaited, then the consumer
commits the offset.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from aiokafka import TopicPartition

from streamremat.runtime.outputs import BatchSender, Sendable
from streamremat.runtime.settings import Guarantee

log = logging.getLogger("streamremat.worker")


class PartitionCommitter:
    """Buffers a partition's outputs, sends them, and commits them with its offset."""

    def __init__(self, producer: Any, group_id: str, guarantee: Guarantee) -> None:
        self.producer = producer
        self.sender = BatchSender(producer)
        self.group_id = group_id
        self.guarantee = guarantee
        self.pending: list[Sendable] = []
        self._futures: list[asyncio.Future[Any]] = []
        self.in_txn = False

    async def _begin(self) -> None:
        if not self.in_txn:
            await self.producer.begin_transaction()
            self.in_txn = True

    async def flush(self) -> None:
        """Hand buffered outputs to the producer (inside the open transaction)."""
        pending, self.pending = self.pending, []
        await self.send(pending)

    async def send(self, records: Sequence[Sendable]) -> None:
        """Hand ``records`` to the producer (inside the open transaction)."""
        if not records:
            return
        if self.guarantee is Guarantee.EXACTLY_ONCE:
            await self._begin()
        self._futures.extend(await self.sender.send(records))

    async def acked(self) -> None:
        """Wait until Kafka has every output sent so far."""
        futures, self._futures = self._futures, []
        await asyncio.gather(*futures)

    async def commit(self, consumer: Any, tp: TopicPartition, offset: int,
                     metadata: str) -> None:
        """Commit ``offset`` (with ``metadata``) and the outputs sent before it."""
        offsets = {tp: (offset, metadata)}
        if self.guarantee is Guarantee.EXACTLY_ONCE:
            await self._begin()
            await self.producer.send_offsets_to_transaction(offsets, self.group_id)
            await self.producer.commit_transaction()
            self.in_txn = False
        else:
            await consumer.commit(offsets)
        self._futures.clear()  # all delivered: the commit waited for them

    async def abort(self) -> None:
        """Drop the open transaction (its outputs are never seen by readers)."""
        self.pending.clear()
        futures, self._futures = self._futures, []
        for future in futures:  # their failures (e.g. a denied WRITE) are known already
            future.add_done_callback(_retrieve)
        if self.in_txn:
            self.in_txn = False
            _retrieve_transaction_error(self.producer)
            try:
                await self.producer.abort_transaction()
            except Exception as exc:  # fenced or gone: nothing to abort
                log.debug("abort failed: %s", exc)


def _retrieve(future: asyncio.Future[Any]) -> None:
    """Mark a dropped send's exception as seen, or asyncio logs "Future exception
    was never retrieved" for each when it is collected."""
    if not future.cancelled():
        future.exception()


def _retrieve_transaction_error(producer: Any) -> None:
    """aiokafka (0.14) keeps an abortable error (e.g. a denied WRITE found while adding
    the sink's partitions to the transaction) in a future that ``abort_transaction``
    replaces without reading: read it first, it is raised to us elsewhere already."""
    manager = getattr(producer, "_txn_manager", None)
    waiter = manager.wait_for_transaction_end() if manager is not None else None
    if isinstance(waiter, asyncio.Future) and waiter.done():
        _retrieve(waiter)
