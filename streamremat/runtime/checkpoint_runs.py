"""Checkpoints written in the background, their partition paused meanwhile.

A full checkpoint of millions of entries takes seconds to encode and write.
The worker's loop used to await each one, so every other partition waited
too (heartbeats went on; nothing else did). Now only the checkpointing
partition waits, as in Kafka Streams: it is paused in the consumer, so no
record of it is fetched while its state is encoded (aiokafka returns nothing
of a paused partition and keeps its position), and resumed once the
checkpoint is written. The other partitions go on processing and committing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from aiokafka import TopicPartition

from streamremat.runtime.partition import PartitionRunner
from streamremat.runtime.purging import RepartitionPurger

log = logging.getLogger("streamremat.worker")


class CheckpointRuns:
    """The checkpoints under way, one at most per partition."""

    def __init__(self) -> None:
        self._running: dict[TopicPartition, tuple[PartitionRunner, asyncio.Task[None]]] = {}

    def __contains__(self, tp: object) -> bool:
        return tp in self._running

    def start(self, runner: PartitionRunner, consumer: Any,
              purger: RepartitionPurger | None) -> None:
        """Checkpoint ``runner`` (just committed, at its committed offset) in the
        background, paused until ``reap`` sees the checkpoint written. A partition
        of stateless stages only has nothing to write: it is not paused (a pause
        drops what the consumer fetched for it)."""
        if not runner.tasks:
            return
        consumer.pause(runner.tp)
        self._running[runner.tp] = (runner, asyncio.create_task(_write(runner, purger)))

    async def reap(self, consumer: Any, runners: Mapping[TopicPartition, PartitionRunner],
                   wait: bool = False) -> None:
        """Finish the checkpoints written (all of them with ``wait``) and resume their
        partitions, unless a partition's runner is gone meanwhile (revoked, fenced or
        backing off: those stay paused). A checkpoint that raised raises here: an
        internal error, as when the loop awaited it."""
        for tp, (runner, task) in list(self._running.items()):
            if not (wait or task.done()):
                continue
            del self._running[tp]
            await task
            if runners.get(tp) is runner and tp in consumer.assignment():
                consumer.resume(tp)

    async def finish(self, tps: Iterable[TopicPartition] | None = None) -> None:
        """Wait for the checkpoints of ``tps`` (None: every one), leaving their
        partitions paused: before a hand-over or shutdown checkpoints them again."""
        wanted = set(self._running) if tps is None else set(tps) & set(self._running)
        for tp in wanted:
            _, task = self._running.pop(tp)
            await task

    async def settle(self) -> None:
        """Wait for every checkpoint still under way, whatever happened to its
        partition, before the stores close (shutdown); a failure is logged."""
        running, self._running = self._running, {}
        for tp, (_, task) in running.items():
            try:
                await task
            except Exception as exc:
                log.error("%s[%d]: checkpoint failed at shutdown: %r", tp.topic, tp.partition, exc)


async def _write(runner: PartitionRunner, purger: RepartitionPurger | None) -> None:
    await runner.checkpoint()
    if purger is not None:
        await purger.purge(runner)
