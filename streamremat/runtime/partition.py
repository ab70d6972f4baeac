"""One source partition on this worker: its tasks, its transaction, its checkpoints.

A ``PartitionRunner`` moves through the phases of ``runtime/lifecycle.py``
(RESTORING, REPLAYING, LIVE, then CLOSED, BACKOFF or FENCED), checked at each
transition and reported to the sensor. Only LIVE emits outputs and commits;
REPLAYING rebuilds state for offsets whose outputs were committed before (DESIGN §6).

The runner holds the partition's lifecycle and runs its recovery protocol
(``recover``); the pieces live next to it: restoring the stages from their
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
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from aiokafka import TopicPartition

from streamremat.core.records import BatchOutput, SourceRecord
from streamremat.core.recovery import PartitionTasks
from streamremat.core.repartition import Repartitioner
from streamremat.core.task import Task
from streamremat.core.topology import Stage
from streamremat.metrics.sensor import Sensor
from streamremat.runtime.checkpointing import EPOCH_BITS, Checkpointer, owner_epoch
from streamremat.runtime.commit_meta import (
    CommitMeta,
    decode_commit_metadata,
    encode_commit_metadata,
)
from streamremat.runtime.committing import PartitionCommitter
from streamremat.runtime.emitting import Emitter, Outgoing
from streamremat.runtime.gaps import check_restart
from streamremat.runtime.lifecycle import Phase, check_transition
from streamremat.runtime.recovery_report import (
    RecoveryReport,
    report_recovered,
    report_replay_progress,
)
from streamremat.runtime.remat_plans import RetentionBound, needed_for_s, plan_checkpoint
from streamremat.runtime.restoring import restore_stages
from streamremat.runtime.scheduling import CheckpointScheduler, downtime_sample
from streamremat.runtime.settings import Guarantee, WorkerSettings
from streamremat.runtime.tuner_feed import TunerFeed
from streamremat.state.base import CheckpointStore
from streamremat.state.frame import TaskId
from streamremat.tuning.remat import RematPlan

log = logging.getLogger("streamremat.worker")

#: Reads a partition's committed offset (None: never committed) and its metadata.
FetchCommitted = Callable[[TopicPartition], Awaitable[tuple[int | None, str]]]


class PartitionRunner:
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

    @property
    def position(self) -> int:
        """The next offset to process: what a commit now would store."""
        return self.partition_tasks.position

    @property
    def replay_until(self) -> int:
        return self.partition_tasks.replay_until

    # -- recovery ---------------------------------------------------------------

    async def recover(self, consumer: Any, fetch_committed: FetchCommitted) -> RecoveryReport:
        """Restore this partition's tasks and position the consumer (DESIGN §6).

        1. Read the group's committed offset ``k`` and its metadata (this runs after
           the producer was initialised, so a zombie's transaction can't commit any
           more).
        2. For every task, load the newest valid checkpoint from the local store
           and the replica, whichever is further along (``restore_stages``); a task
           without one starts empty at the partition's log start offset. This owner's seq epoch is
           above the committed one and every seq seen (``owner_epoch``); it is
           committed before the first checkpoint is written.
        3. ``c`` = where the replay starts: the smallest task offset, or the earliest
           first offset ``o_min`` of the groups a checkpoint wrote as recompute
           (``core.recovery.replay_start``). A ``c`` below the log start offset, or
           a ``k`` below it while a task has no usable checkpoint, is a retention gap
           (``gaps.check_restart``): ``fail`` raises, ``reset`` skips the lost records.
           A checkpoint beyond ``k`` (its outputs never committed) is discarded; a
           checkpoint without any ``k`` (the group's offsets expired) is said so.
        4. Seek to ``c``; records in ``[c, k)`` are replayed without output (those
           below a task's checkpoint offset feed only its recompute groups, see
           ``core.recovery.PartitionTasks``), and from ``k`` on the partition is
           live. A checkpoint follows soon after.
        5. Seed the plans' retention bound from the broker's time index
           (``RetentionBound.seed_from``): without it, every window open across
           the restart would be stored until it closes.
        """
        started = time.monotonic()
        tp = self.tp
        log_start = (await consumer.beginning_offsets([tp]))[tp]
        committed, metadata = await fetch_committed(tp)
        commit_meta = decode_commit_metadata(metadata)
        self._committed_stream_times = commit_meta.stream_times
        restored = await restore_stages(tp, self.stages, committed, log_start, self.local,
                                        self.replica, self.sensor)
        tasks, checkpoint_offsets, unclean = (restored.tasks, restored.checkpoint_offsets,
                                              restored.unclean)
        alive_ms = [commit_meta.at_ms] if commit_meta.at_ms is not None else []
        alive_ms.extend(restored.alive_ms)
        self.owner_epoch = owner_epoch(restored.visible_next_seq, commit_meta.owner_epoch)
        for task_id in restored.task_ids:
            self.checkpointer.add_task(task_id, self.owner_epoch << EPOCH_BITS)
        self.previous_alive_s = max(alive_ms) / 1000 if alive_ms else None
        check_restart(self, tasks, committed, log_start, min(checkpoint_offsets, default=None))
        self.partition_tasks = PartitionTasks(tasks, committed, commit_meta.stream_times)
        if self.partition_tasks.start < log_start:
            # Only after a ``reset`` gap policy: recompute groups lost records too.
            self.partition_tasks.skip_to(log_start)
        start, k = self.partition_tasks.start, self.replay_until
        self.committed = committed
        consumer.seek(tp, start)
        self.report = RecoveryReport(
            checkpoint_offset=min(checkpoint_offsets) if checkpoint_offsets else None,
            committed_offset=k,
            start_offset=start,
            source="+".join(sorted(restored.sources)) or None,
            unclean=unclean,
            restore_s=time.monotonic() - started,
            notes=tuple(restored.notes),
        )
        for name in self.names:
            self.sensor.on_task_assigned(name, tp.partition)
            self.sensor.on_restore(name, tp.partition, self.report.restore_s,
                                   self.report.source or "none")
            if unclean:
                self.sensor.on_failure_detected(name, tp.partition)
        await self._retention.seed_from(consumer, tp, time.time())
        self.scheduler.restore(restored.meta, unclean, time.time(), self.retention_s)
        self._restored_wall = time.time()
        self._replay_started = self._replay_logged = time.monotonic()
        if start >= k:
            self._go_live()
        else:
            self.to(Phase.REPLAYING)
            log.info(
                "%s[%d]: replaying offsets [%d, %d) (%d records) from checkpoint (%s)",
                tp.topic, tp.partition, start, k, k - start, self.report.source or "none",
            )
        return self.report

    def _go_live(self) -> None:
        report = self.report
        assert report is not None
        report.replayed = self.replay_until - report.start_offset
        report.replay_s = time.monotonic() - self._replay_started
        self.to(Phase.LIVE)
        self.feed.checkpoint_soon = True
        downtime_s = self._downtime_s(report)
        self.scheduler.recovered(downtime_s, report.replayed, report.replay_s)
        report_recovered(self.sensor, self.names, self.tp, report, self.committed is not None,
                         downtime_s)

    def _downtime_s(self, report: RecoveryReport) -> float:
        """D: from the failure until the state was restored (see ``downtime_sample``)."""
        if not report.unclean:
            return report.restore_s
        downtime_s, plausible = downtime_sample(
            self._restored_wall, self.previous_alive_s, report.restore_s,
            self.settings.session_timeout_ms / 1000, self.settings.commit_interval_s,
        )
        if not plausible:
            log.info("%s[%d]: the previous owner's last sign of life is %s; downtime taken as "
                     "the session timeout plus restore, %.1f s", self.tp.topic,
                     self.tp.partition, "unknown" if self.previous_alive_s is None else
                     f"{self._restored_wall - self.previous_alive_s:.0f} s old (implausible)",
                     downtime_s)
        return downtime_s

    # -- processing -------------------------------------------------------------

    def process(self, records: Sequence[SourceRecord]) -> None:
        """Feed one fetched batch (offset order) to every task of the partition."""
        if self.checkpointer.writing:  # it would fold records into a state being encoded
            raise RuntimeError(f"{self.tp.topic}[{self.tp.partition}]: a batch was processed "
                               "while a checkpoint of its state was being written")
        outputs = self.partition_tasks.process(records)
        live = len(records)
        if self.phase is Phase.REPLAYING:
            if self.partition_tasks.replaying:
                self._replay_progress()
                return
            live -= bisect.bisect_left(records, self.replay_until, key=lambda r: r.offset)
            self._go_live()
        self.emit(outputs)
        self.feed.processed(live)

    def emit(self, outputs: Sequence[tuple[Task | Repartitioner, BatchOutput]]) -> None:
        """Queue a live batch's outputs for the commit and count them: the delivery
        tail of ``process`` (the faust bridge's differs). The results of a large
        closing are built and sent a slice at a time (``runtime/emitting.py``)."""
        self.emitter.emit(outputs)

    @property
    def operator_names(self) -> list[str]:
        return list(self.names)

    def skip_to(self, offset: int) -> None:
        """Go on at ``offset``: the source no longer has the offsets below it
        (``--on-retention-gap=reset``, after ``gaps.apply_gap_policy``)."""
        self.partition_tasks.skip_to(offset)
        if self.phase is Phase.REPLAYING and not self.partition_tasks.replaying:
            self._go_live()

    def reached_replay_end(self, position: int) -> None:
        """The consumer is at ``position`` without new records (e.g. only
        transaction markers were left below the committed offset)."""
        if self.phase is Phase.REPLAYING:
            self.partition_tasks.reached(position)
            if not self.partition_tasks.replaying:
                self._go_live()

    def _replay_progress(self) -> None:
        now = time.monotonic()
        if now - self._replay_logged < self.settings.replay_log_interval_s:
            return
        self._replay_logged = now
        assert self.report is not None
        report_replay_progress(self.sensor, self.names, self.tp,
                               self.position - self.report.start_offset,
                               self.replay_until - self.report.start_offset,
                               now - self._replay_started)

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

    def _capture(
        self, prove_ownership: bool
    ) -> tuple[Outgoing, int, dict[str, int], str] | None:
        """What a commit now covers: the outputs not sent yet, the offset, the stream
        times and the metadata, taken together (nothing may be processed between)."""
        if self.has_uncommitted:
            outgoing = self.emitter.capture()
            stream_times = self.partition_tasks.stream_times()
            return outgoing, self.position, stream_times, self._commit_metadata(stream_times)
        if (
            prove_ownership
            and self.phase in (Phase.LIVE, Phase.REPLAYING)
            and self.committed is not None
        ):
            # Nothing new: the committed offset again, with this owner's epoch.
            stream_times = self._committed_stream_times
            return Outgoing(), self.committed, stream_times, self._commit_metadata(stream_times)
        return None

    async def _commit_captured(self, consumer: Any, outgoing: Outgoing, offset: int,
                               stream_times: dict[str, int], metadata: str) -> None:
        started = time.monotonic()
        await self.emitter.send(outgoing)
        # Every output must be acknowledged before the commit: aiokafka may end a
        # transaction while a batch waits to be retried, and that batch would be lost.
        await self.committer.acked()
        await self.committer.commit(consumer, self.tp, offset, metadata)
        self.committed = offset
        self._committed_stream_times = stream_times
        self._epoch_committed = True
        self.commit_s = time.monotonic() - started

    def _commit_metadata(self, stream_times: dict[str, int]) -> str:
        return encode_commit_metadata(
            CommitMeta(stream_times, self.owner_epoch, int(time.time() * 1000))
        )

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

    def to(self, phase: Phase) -> None:
        """Move to ``phase``; PhaseError if the lifecycle has no such transition."""
        check_transition(f"{self.tp.topic}[{self.tp.partition}]", self.phase, phase)
        self.phase = phase
        self._report_phase()

    def _report_phase(self) -> None:
        if self.phase is not Phase.CLOSED:
            for name in self.names:
                self.sensor.on_partition_state(name, self.tp.partition, self.phase.value)

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
