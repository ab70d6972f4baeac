"""One source partition on this worker: its tasks, its transaction, its checkpoints.

A ``PartitionRunner`` moves through the phases of ``runtime/lifecycle.py``
(RESTORING, REPLAYING, LIVE, then CLOSED, BACKOFF or FENCED), checked at each
transition and reported to the sensor. Only LIVE emits outputs and commits;
REPLAYING rebuilds state for offsets whose outputs were committed before (DESIGN §6).

The runner holds the partition's lifecycle; its recovery protocol (``recover``),
the end of its replay and its phase transitions are in ``runtime/recovering.py``.
The other pieces live next to it: restoring the stages from their
checkpoints (``runtime/restoring.py``), outputs and the offset commit
(``runtime/committing.py``), the checkpoint bookkeeping that feeds the tuner and
its gauges (``runtime/tuner_feed.py``, ``runtime/scheduling.py``), checkpoint
writes (``runtime/checkpointing.py``) and the recovery's log line and metrics
(``runtime/recovery_report.py``).
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from aiokafka import TopicPartition

from streamremat.core.records import BatchOutput, SourceRecord
from streamremat.core.recovery import PartitionTasks
from streamremat.core.repartition import Repartitioner
from streamremat.core.task import Task
from streamremat.core.topology import Stage
from streamremat.metrics.sensor import Sensor
from streamremat.runtime.checkpointing import Checkpointer
from streamremat.runtime.closing_progress import Hold
from streamremat.runtime.commit_meta import CommitMeta, encode_commit_metadata
from streamremat.runtime.committing import PartitionCommitter
from streamremat.runtime.emitting import Emitter, Outgoing
from streamremat.runtime.lifecycle import Phase
from streamremat.runtime.recovering import PartitionRecovery
from streamremat.runtime.recovery_report import RecoveryReport
from streamremat.runtime.remat_plans import RetentionBound, needed_for_s, plan_checkpoint
from streamremat.runtime.scheduling import CheckpointScheduler
from streamremat.runtime.settings import Guarantee, WorkerSettings
from streamremat.runtime.tuner_feed import TunerFeed
from streamremat.state.base import CheckpointStore
from streamremat.state.frame import TaskId
from streamremat.tuning.remat import RematPlan

log = logging.getLogger("streamremat.worker")


class PartitionRunner(PartitionRecovery):
    """The stages of one source partition (windowed tasks; stateless repartition
    stages, live from the committed offset) and everything needed to commit them."""

    def __init__(
        self,
        tp: TopicPartition,
        stages: Sequence[Stage],
        *,
        settings: WorkerSettings,
        group_id: str,
        producer: Any,
        local: CheckpointStore,
        replica: CheckpointStore | None,
        scheduler: CheckpointScheduler,
        sensor: Sensor,
        retention_s: float | None = None,
    ) -> None:
        self.tp = tp
        self.stages = list(stages)
        #: sensor and log names, one per stage
        self.names = [stage.name for stage in self.stages]
        self.settings = settings
        self.group_id = group_id
        self.producer = producer
        self.committer = PartitionCommitter(producer, group_id, settings.guarantee)
        self.emitter = Emitter(tp.partition, self.committer, sensor)
        if settings.guarantee is Guarantee.EXACTLY_ONCE:
            self.emitter.commit_progress = self._commit_progress
        self.local = local
        self.replica = replica
        self.scheduler = scheduler
        self.feed = TunerFeed(scheduler)
        self.retention_s = retention_s
        #: wall time the previous owner was last seen alive for this partition (its
        #: last commit or checkpoint), to measure the downtime after an unclean stop
        self.previous_alive_s: float | None = None
        #: this owner's checkpoint seq epoch (see ``owner_epoch``), set by ``recover``
        self.owner_epoch = 0
        #: a commit running while the loop processes the next batches (``start_commit``)
        self.committing: asyncio.Task[None] | None = None
        self.commit_s = 0.0  # how long the last commit took
        #: the epoch is in the committed metadata: from now on checkpoints may be written
        self._epoch_committed = False
        self._restored_wall = 0.0
        self.sensor = sensor
        self.phase = Phase.RESTORING
        #: the tasks, the replay's bounds and the position (set by ``recover``)
        self.partition_tasks = PartitionTasks([], None, {})
        self._report_phase()
        self.checkpointer = Checkpointer(tp.partition, settings.checkpoints, local, replica,
                                         scheduler, sensor)
        self.committed: int | None = None
        self.report: RecoveryReport | None = None
        self._replay_started = 0.0
        self._replay_logged = 0.0
        #: per operator, the stream time committed with ``self.committed``
        self._committed_stream_times: dict[str, int] = {}
        #: each task's rematerialization plan at the newest checkpoint (DESIGN §9)
        self.last_plans: dict[TaskId, RematPlan] = {}
        self._retention = RetentionBound(retention_s)

    @property
    def tasks(self) -> list[Task]:
        """The windowed tasks (what a checkpoint holds)."""
        return [t for t in self.partition_tasks.tasks if isinstance(t, Task)]

    # -- processing -------------------------------------------------------------

    def process(self, records: Sequence[SourceRecord]) -> None:
        """Feed one fetched batch (offset order) to every task of the partition."""
        if self.checkpointer.writing:  # it would fold records into a state being encoded
            raise RuntimeError(f"{self.tp.topic}[{self.tp.partition}]: a batch was processed "
                               "while a checkpoint of its state was being written")
        if self.phase is Phase.LIVE:  # where a closing of this batch commits until it is out
            self.emitter.hold = Hold(self.position, self.partition_tasks.stream_times())
        outputs = self.partition_tasks.process(records)
        live = len(records)
        if self.phase is Phase.REPLAYING:
            if self.partition_tasks.replaying:
                self._replay_progress()
                return
            live -= bisect.bisect_left(records, self.replay_until, key=lambda r: r.offset)
            self._go_live()
            self.emitter.hold = Hold(self.replay_until, self._committed_stream_times)
        self.emit(outputs)
        self.feed.processed(live)

    def emit(self, outputs: Sequence[tuple[Task | Repartitioner, BatchOutput]]) -> None:
        """Queue a live batch's outputs for the commit and count them: the delivery
        tail of ``process`` (the faust bridge's differs). The results of a large
        closing are built and sent a slice at a time (``runtime/emitting.py``)."""
        self.emitter.emit(outputs)

    # -- commit -----------------------------------------------------------------

    async def flush(self) -> None:
        """Hand buffered outputs to the producer (inside the open transaction). While
        a background commit runs they wait: they belong to the next transaction."""
        if self.committing is None:
            await self.emitter.send(self.emitter.capture())

    @property
    def has_uncommitted(self) -> bool:
        return self.phase is Phase.LIVE and (
            self.committer.in_txn or bool(self.committer.pending) or bool(self.emitter)
            or self.position != self.committed or self.committing is not None
        )

    async def commit(self, consumer: Any, prove_ownership: bool = False) -> bool:
        """Commit outputs and the source offset atomically; True if anything was committed.

        Exactly-once: the offset goes into the open transaction, which then commits.
        At-least-once: await every output, then commit the offset.
        ``prove_ownership`` commits even with nothing new (during a replay: the
        committed offset again), so a fenced worker finds out here, and this owner's
        seq epoch is committed before its first checkpoint. A background commit
        still running (``start_commit``) finishes first.
        """
        if self.committing is not None:
            task, self.committing = self.committing, None
            await task
        captured = self._capture(prove_ownership)
        if captured is None:
            return False
        await self._commit_captured(consumer, *captured)
        return True

    def start_commit(self, consumer: Any) -> None:
        """Commit what was processed until now (as ``commit``) in the background: the
        loop goes on, the next batches' outputs wait in ``pending`` for the next
        transaction. The worker awaits ``committing`` (``Worker._reap``) before this
        partition commits again, hands over or checkpoints."""
        captured = None if self.committing is not None else self._capture(False)
        if captured is not None:
            self.committing = asyncio.create_task(self._commit_captured(consumer, *captured))

    def _capture(self, prove_ownership: bool) -> tuple[Outgoing, int, dict[str, int]] | None:
        """What a commit now covers: the outputs not sent yet, the offset and the
        stream times, taken together (nothing may be processed between)."""
        if self.has_uncommitted:
            outgoing = self.emitter.capture()
            return outgoing, self.position, self.partition_tasks.stream_times()
        if (
            prove_ownership
            and self.phase in (Phase.LIVE, Phase.REPLAYING)
            and self.committed is not None
        ):
            # Nothing new: the committed offset again, with this owner's epoch.
            return Outgoing(), self.committed, self._committed_stream_times
        return None

    async def _commit_captured(self, consumer: Any, outgoing: Outgoing, offset: int,
                               stream_times: dict[str, int]) -> None:
        started = time.monotonic()
        await self.emitter.send(outgoing)
        # Every output must be acknowledged before the commit: aiokafka may end a
        # transaction while a batch waits to be retried, and that batch would be lost.
        await self.committer.acked()
        # After the send: the closings sent are all out, and ``offset`` is past
        # their batches, so their markers go (those not reached yet stay).
        progress = self.emitter.progress
        progress.committed_all()
        await self.committer.commit(consumer, self.tp, offset,
                                    self._commit_metadata(stream_times))
        self.committed = offset
        self._committed_stream_times = stream_times
        self._epoch_committed = True
        self.commit_s = time.monotonic() - started

    async def _commit_progress(self, hold: Hold) -> None:
        """Commit a closing's transaction before all of it is out (see
        ``Emitter._send_closing``): the offset and stream times of its batch, and
        how far every operator's closing got."""
        open_s = self.committer.txn_age_s()
        await self.committer.acked()
        await self.committer.commit(None, self.tp, hold.offset,
                                    self._commit_metadata(hold.stream_times))
        log.info("%s[%d]: a closing committed in part at offset %d (its transaction open "
                 "%.1f s of the producer's %.1f s transaction timeout): %s", self.tp.topic,
                 self.tp.partition, hold.offset, open_s, self.committer.txn_timeout_s,
                 ", ".join(f"{name} through windows ending {m[0]} starting {m[1]}, {m[2]} of "
                           "them" for name, m in sorted(self.emitter.progress.markers.items())))
        self.committed = hold.offset
        self._committed_stream_times = hold.stream_times
        self._epoch_committed = True

    def _commit_metadata(self, stream_times: dict[str, int]) -> str:
        return encode_commit_metadata(CommitMeta(stream_times, self.owner_epoch,
                                                 int(time.time() * 1000),
                                                 dict(self.emitter.progress.markers)))

    async def abort(self) -> None:
        """Drop the open transaction (its outputs are never seen by readers)."""
        self._cancel_commit()
        self.emitter.clear()
        await self.committer.abort()

    def _cancel_commit(self) -> None:
        """Stop a background commit nobody will wait for (aborted or closed)."""
        task, self.committing = self.committing, None
        if task is not None:
            task.cancel()
            task.add_done_callback(_retrieve_task)

    # -- checkpoints ------------------------------------------------------------

    def checkpoint_due(self) -> bool:
        """Whether a checkpoint is due now (live only). A query: it changes neither
        this runner nor the tuner; ``checkpoint`` starts the next interval."""
        return self.phase is Phase.LIVE and self.feed.due()

    def checkpoint_lags(self) -> bool:
        """Due, all committed, yet the newest checkpoint is below the committed offset
        (without new records, nothing else would checkpoint it)."""
        return not self.has_uncommitted and self.feed.checkpointed_at != self.position and (
            self.checkpoint_due()
        )

    def batch_done(self, records: int, busy_s: float, backlogged: bool) -> None:
        self.feed.batch_done(records, busy_s, backlogged)

    def observe_source(self, highwater: int | None) -> None:
        """Feed the tuner the source's growth since the last call (its ingest rate r),
        and the retention bound of the plans its end offset."""
        self.feed.observe_source(highwater)
        self._retention.observe(time.time(), highwater)

    def report_gauges(self, highwater: int | None) -> None:
        """Periodic gauges: lag, checkpoint age and the tuner's reasoning (reads only)."""
        self.feed.report_gauges(self.sensor, self.names, self.tp.partition, self.position,
                                highwater, self._restored_offset())

    def _restored_offset(self) -> int:
        return self.report.start_offset if self.report is not None else self.position

    async def checkpoint(self, clean: bool = False, owned: Callable[[], bool] | None = None
                         ) -> None:
        """Checkpoint every task of the partition, when its outputs are committed:
        right after a commit when live (offset == committed), or during replay
        (offset <= committed). See ``Checkpointer.write`` for the protocol."""
        if self.phase not in (Phase.LIVE, Phase.REPLAYING) or not self.tasks:
            return  # only repartition stages: their position is the committed offset
        if not self._epoch_committed:
            # A frame written before this owner's epoch is committed could share the
            # seq space of a successor that reads the older epoch (see owner_epoch).
            log.warning("%s[%d]: no checkpoint before this owner's first commit",
                        self.tp.topic, self.tp.partition)
            return
        if not clean:
            # A scheduled checkpoint: the policy's next interval starts now.
            self.scheduler.start_interval(time.time())
        if self.position == self.feed.checkpointed_at and not clean:
            self.feed.checkpoint_skipped()
            return  # nothing new since the last checkpoint
        self.last_plans = await self.checkpointer.write(self.tasks, self.position, clean,
                                                        self._planner(self.tasks, clean), owned)
        self.feed.checkpoint_written(
            f"{self.tp.topic}[{self.tp.partition}]", self.position, self._restored_offset(),
            {tid.operator: plan for tid, plan in self.last_plans.items()}, self.sensor,
            self.tp.partition)

    def _planner(self, tasks: list[Task], clean: bool) -> Callable[[], dict[TaskId, RematPlan]]:
        """Each task's plan for a checkpoint at the current position, from the tuner's
        decision and the retention bound of this partition's topic (read here, on
        the loop; the returned call sizes the groups, in the checkpoint's thread)."""
        now = time.time()
        decision = self.scheduler.decision(now)
        position = self.position
        safe_from = self._retention.safe_from(now, needed_for_s(decision), position)
        ids = [c.task_id for c in self.checkpointer.chains]
        return lambda: plan_checkpoint(tasks, ids, decision, position, safe_from, self.tp.topic,
                                       clean)

    async def drain_replica(self, timeout_s: float) -> None:
        """Wait for background replica writes (on revocation and shutdown)."""
        await self.checkpointer.drain(timeout_s)

    async def close(self, phase: Phase = Phase.CLOSED) -> None:
        """End this runner in ``phase`` (CLOSED, BACKOFF or FENCED) and stop its
        producer. Its metric series stay: the worker drops them when the partition
        leaves (a fenced or backing-off partition still shows its state)."""
        if self.phase in (Phase.RESTORING, Phase.REPLAYING, Phase.LIVE):
            self.to(phase)
        self._cancel_commit()
        if self.producer is not None and self.settings.guarantee is Guarantee.EXACTLY_ONCE:
            try:
                await self.producer.stop()
            except Exception as exc:
                log.debug("producer stop failed: %s", exc)


def _retrieve_task(task: asyncio.Task[None]) -> None:
    """Mark a cancelled commit's failure as seen (asyncio would log it as never
    retrieved): the partition it belonged to is gone already."""
    if not task.cancelled():
        task.exception()
