"""Which partitions a worker runs: assignment, recovery, hand-over, and dropping
a partition whose Kafka step failed.

aiokafka's rebalance listener (``runtime/rebalance.py``) calls ``_on_revoked``
and ``_on_assigned``; an assigned partition is restored by the loop, paused
until then (``_recover_assigned``), and a revoked one is handed over clean
(``_hand_over``). A partition whose commit or recovery fails is dropped, never
the worker (``_guard``, ``_assign``), and retried after a backoff (``Parking``).

``PartitionOwnership`` is mixed into ``Worker`` (``runtime/worker.py``), whose
constructor sets the state declared here; the loop, the commits and the shutdown
stay there.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from aiokafka import TopicPartition
from aiokafka.errors import (
    IllegalOperation,
    IllegalStateError,
    InvalidProducerEpoch,
    KafkaError,
    ProducerFenced,
)

from streamremat.core.topology import Stage
from streamremat.metrics.sensor import Sensor
from streamremat.runtime import gc_tuning
from streamremat.runtime.access import AUTHORIZATION_ERRORS, access_denied
from streamremat.runtime.checkpoint_runs import CheckpointRuns
from streamremat.runtime.exceptions import KafkaAccessError, WorkerError
from streamremat.runtime.lifecycle import Parking, Phase, is_retriable, start_producer
from streamremat.runtime.offsets import fetch_stable_offsets
from streamremat.runtime.partition import PartitionRunner
from streamremat.runtime.scheduling import CheckpointScheduler
from streamremat.runtime.settings import Guarantee, WorkerSettings
from streamremat.state.base import CheckpointStore

log = logging.getLogger("streamremat.worker")

#: Another producer took this transactional id: this worker lost the partition.
_FENCED: tuple[type[BaseException], ...] = (ProducerFenced, InvalidProducerEpoch)


class PartitionOwnership:
    """The partitions of one worker, from assignment to hand-over or failure."""

    settings: WorkerSettings
    sensor: Sensor
    group_id: str
    runners: dict[TopicPartition, PartitionRunner]
    _by_topic: dict[str, list[Stage]]
    #: held while a batch, a commit, a recovery or a hand-over runs
    _lock: asyncio.Lock
    _stopping: asyncio.Event
    _consumer: Any
    _shared_producer: Any
    _admin: Any
    _checkpoints: CheckpointRuns
    _local: CheckpointStore | None
    _replica: CheckpointStore | None
    _fatal: BaseException | None
    #: assigned, paused, waiting for the loop to restore them
    _to_recover: set[TopicPartition]
    _retention_s: dict[str, float | None]
    _parking: Parking
    #: the group has assigned partitions (maybe none) to us
    _joined: bool

    # -- failures of one partition ------------------------------------------------

    async def _guard(self, runner: PartitionRunner, step: Any) -> None:
        """Run a Kafka step of one partition; a failure drops the partition, never the
        worker. Fenced: another worker owns it, it stays paused. Any other error:
        abort, and rebuild it from its checkpoint after a backoff (its state ran ahead
        of what committed)."""
        try:
            await step
        except AUTHORIZATION_ERRORS as exc:
            # An ACL is missing: rebuilding and retrying would fail the same way forever.
            self._fatal = KafkaAccessError(access_denied(
                exc, self.settings.client,
                f"writing the outputs and offsets of {runner.tp.topic}[{runner.tp.partition}]",
                topic_operation="WRITE",
            ))
            log.error("%s; nothing of this transaction was committed", self._fatal)
            self._stopping.set()
            await runner.abort()
            await self._drop(runner.tp)
        except _FENCED as exc:
            committer = runner.committer
            if committer.txn_age_s() >= committer.txn_timeout_s:
                # The broker says the same when it aborted a transaction past its timeout.
                log.error("%s[%d]: %s after its transaction was open %.1f s, past the "
                          "producer's transaction timeout of %.1f s: the broker aborted it, "
                          "or a newer owner fenced it; dropping it uncommitted (the timeout "
                          "is transaction_timeout_ms in the [producer] table of "
                          "--kafka-config)", runner.tp.topic, runner.tp.partition,
                          type(exc).__name__, committer.txn_age_s(), committer.txn_timeout_s)
            else:
                log.warning("%s[%d]: fenced by a newer owner (%s); dropping it uncommitted",
                            runner.tp.topic, runner.tp.partition, type(exc).__name__)
            await runner.abort()
            await self._drop(runner.tp, Phase.FENCED)
            self._parking.fence(runner.tp)
        except (KafkaError, IllegalStateError, IllegalOperation) as exc:
            # IllegalOperation: its producer left the transaction, e.g. fenced meanwhile.
            await runner.abort()
            await self._drop(runner.tp, Phase.BACKOFF)
            self._back_off(runner.tp, exc)

    def _pause(self, tp: TopicPartition) -> None:
        if tp in self._consumer.assignment():
            self._consumer.pause(tp)

    def _back_off(self, tp: TopicPartition, exc: BaseException) -> None:
        """Retry ``tp`` later (DESIGN §10: bounded backoff); fatal once the budget is spent."""
        if self._stopping.is_set():
            return
        fatal = self._parking.back_off(tp, exc, time.monotonic())
        if fatal is not None:
            log.error("%s", fatal)
            self._fatal = fatal
            self._stopping.set()

    async def _drop(self, tp: TopicPartition, phase: Phase = Phase.CLOSED) -> None:
        runner = self.runners.pop(tp, None)
        if runner is not None:
            await runner.close(phase)

    # -- rebalancing ------------------------------------------------------------

    async def _on_revoked(self, revoked: list[TopicPartition]) -> None:
        """Hand partitions over cleanly: finish the batch (the lock), commit, checkpoint."""
        self._to_recover.difference_update(revoked)
        async with self._lock:
            mine = [tp for tp in revoked if tp in self.runners]
            if mine:
                log.info("revoked: %s", ", ".join(f"{tp.topic}[{tp.partition}]" for tp in mine))
            await self._hand_over(mine)
            self._parking.revoked(revoked)

    async def _hand_over(self, tps: list[TopicPartition]) -> None:
        await self._checkpoints.finish(tps)
        runners = [self.runners[tp] for tp in tps if tp in self.runners]
        # Always commit, even with nothing new: the transaction proves this worker
        # still owns the partition (a zombie is fenced here) before it checkpoints.
        await asyncio.gather(*(self._guard(r, r.commit(self._consumer, prove_ownership=True))
                               for r in runners))
        for runner in runners:
            if runner.tp not in self.runners:
                continue  # fenced or failed during the commit: no checkpoint
            await runner.checkpoint(clean=True)
            await runner.drain_replica(self.settings.shutdown_timeout_s / 2)
            await self._drop(runner.tp)

    async def _on_assigned(self, assigned: list[TopicPartition]) -> None:
        """Only note the partitions: restoring inside the rebalance listener would
        hold up the group (no heartbeats), so the loop restores them, paused meanwhile."""
        self._joined = True
        new = [tp for tp in assigned if tp not in self.runners]
        if new:
            self._consumer.pause(*new)
            self._to_recover.update(new)
            self._parking.assigned(new)

    async def _recover_assigned(self) -> None:
        """Restore the partitions assigned since the last loop, then let them fetch.

        They stayed paused since assignment, so no batch fetched from the committed
        offset (before recovery's seek to the checkpoint offset) can skip the replay:
        aiokafka drops buffered records of a paused or re-positioned partition.
        """
        assignment = self._consumer.assignment()
        tps = sorted((tp for tp in self._to_recover if tp in assignment),
                     key=lambda tp: (tp.topic, tp.partition))
        self._to_recover.clear()
        await self._assign(tps)
        if self.settings.tune_gc and tps:
            gc_tuning.freeze(collect=False)  # the restored state is long-lived
        ready = [tp for tp in tps if tp in self.runners]
        if ready:
            self._consumer.resume(*ready)

    async def _assign(self, tps: list[TopicPartition]) -> None:
        if not tps:
            return
        log.info("assigned: %s", ", ".join(f"{tp.topic}[{tp.partition}]" for tp in tps))
        results = await asyncio.gather(*(self._start_runner(tp) for tp in tps),
                                       return_exceptions=True)
        for tp, result in zip(tps, results, strict=True):
            denied = access_denied(result, self.settings.client,
                                   f"starting {tp.topic}[{tp.partition}]")
            if denied is not None:
                result = KafkaAccessError(denied)
            if not isinstance(result, BaseException):
                continue
            if not isinstance(result, WorkerError) and (
                isinstance(result, KafkaError | IllegalStateError) or is_retriable(result)
            ):
                self._back_off(tp, result)  # e.g. the broker is down or just restarting
                continue
            self._fatal = result if isinstance(result, WorkerError) else WorkerError(
                f"recovery of {tp.topic}[{tp.partition}] failed: {result!r}")
            log.error("%s", self._fatal)
            self._stopping.set()

    async def _start_runner(self, tp: TopicPartition) -> None:
        s = self.settings
        if s.guarantee is Guarantee.EXACTLY_ONCE:
            # One transactional id per source partition: whoever owns the partition
            # next fences this producer, whatever the group generation.
            producer = await start_producer(s.client, f"{self.group_id}.{tp.topic}.{tp.partition}")
        else:
            producer = self._shared_producer
        assert self._local is not None
        runner = PartitionRunner(
            tp, self._by_topic[tp.topic], settings=s, group_id=self.group_id,
            producer=producer, local=self._local, replica=self._replica,
            scheduler=CheckpointScheduler(s.checkpoints, s.session_timeout_ms / 1000),
            sensor=self.sensor, retention_s=self._retention_s.get(tp.topic),
        )
        try:
            await runner.recover(self._consumer, self._fetch_committed)
        except BaseException:
            await runner.close(Phase.BACKOFF)
            raise
        self.runners[tp] = runner

    async def _fetch_committed(self, tp: TopicPartition) -> tuple[int | None, str]:
        """``tp``'s committed offset and metadata, once stable (``runtime/offsets.py``)."""
        found = await fetch_stable_offsets(self._admin, self.group_id, [tp])
        return found.get(tp, (None, ""))

