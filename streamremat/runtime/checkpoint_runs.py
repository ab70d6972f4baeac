"""Checkpoints written in the background, their partition paused meanwhile.

A full checkpoint of millions of entries takes seconds to encode and write.
The worker's loop used to await each one, so every other partition waited
too (heartbeats went on; nothing else did). Now only the checkpointing
partition waits, as in Kafka Streams: it is paused in the consumer, so no
record of it is fetched while its state is encoded (aiokafka returns nothing
of a paused partition and keeps its position), and resumed once the
checkpoint is written. The other partitions go on processing and committing.

A checkpoint follows the commit that proved this worker owns its partition. A
process stopped in between (SIGSTOP, a VM pause) may have lost the partition
when it runs again, and must not write a checkpoint of it then: a ticker
notes when the event loop stood still for longer than the session timeout,
and a checkpoint proven before such a stall is dropped (``owned``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from aiokafka import TopicPartition

from streamremat.runtime.partition import PartitionRunner
from streamremat.runtime.purging import RepartitionPurger

log = logging.getLogger("streamremat.worker")


class CheckpointRuns:
    """The checkpoints under way, one at most per partition."""

    #: how often the ticker looks at the loop
    TICK_S = 0.1

    def __init__(self, session_timeout_s: float) -> None:
        self._running: dict[TopicPartition, tuple[PartitionRunner, asyncio.Task[None]]] = {}
        self._stall_s = session_timeout_s
        self._last_tick = time.monotonic()
        #: when the ticker last saw the loop stand still past the session timeout
        self._stalled_at = -1.0
        self._ticker: asyncio.Task[None] | None = None

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
        if self._ticker is None:
            self._last_tick = time.monotonic()
            self._ticker = asyncio.create_task(self._tick())
        consumer.pause(runner.tp)
        proved = time.monotonic()
        self._running[runner.tp] = (runner, asyncio.create_task(
            _write(runner, purger, lambda: self._owned(proved))))

    def _owned(self, proved: float) -> bool:
        """No stall past the session timeout since ``proved`` (seen by the ticker,
        or going on now: the ticker has not run since)."""
        now = time.monotonic()
        return self._stalled_at < proved and now - self._last_tick <= self._stall_s

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self.TICK_S)
            now = time.monotonic()
            if now - self._last_tick > self._stall_s:
                self._stalled_at = now
            self._last_tick = now

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
        if self._ticker is not None:
            self._ticker.cancel()
            self._ticker = None
        for tp, (_, task) in running.items():
            try:
                await task
            except Exception as exc:
                log.error("%s[%d]: checkpoint failed at shutdown: %r", tp.topic, tp.partition, exc)


async def _write(runner: PartitionRunner, purger: RepartitionPurger | None,
                 owned: Callable[[], bool]) -> None:
    await runner.checkpoint(owned=owned)
    if purger is not None:
        await purger.purge(runner)
