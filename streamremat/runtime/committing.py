"""A partition's outputs on their way to Kafka, and the commit of its offset.

Exactly-once: outputs go into the partition's transaction, the offset joins it,
then it commits. At-least-once: every output is awaited, then the consumer
commits the offset.
"""

from __future__ import annotations

import asyncio
import logging
import time
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
        #: ``time.monotonic()`` when the open transaction began
        self.txn_started = 0.0
        #: the producer's transaction timeout (aiokafka's default: 60 s): the
        #: coordinator aborts a transaction open longer
        self.txn_timeout_s = _transaction_timeout_ms(producer) / 1000
        #: a closing commits what it sent once its transaction is open this long
        #: (``runtime/emitting.py``): well inside the timeout
        self.txn_span_s = self.txn_timeout_s / 4

    async def _begin(self) -> None:
        if not self.in_txn:
            await self.producer.begin_transaction()
            self.in_txn = True
            self.txn_started = time.monotonic()

    def txn_age_s(self) -> float:
        """How long the open transaction has been open (0: none is)."""
        return time.monotonic() - self.txn_started if self.in_txn else 0.0

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


def _transaction_timeout_ms(producer: Any) -> int:
    """The ``transaction_timeout_ms`` ``producer`` gives the coordinator (aiokafka
    keeps it in its transaction manager), else aiokafka's default."""
    manager = getattr(producer, "_txn_manager", None)
    timeout = getattr(manager, "transaction_timeout_ms", None)
    return timeout if isinstance(timeout, int) and timeout > 0 else 60_000


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
