"""A partition's way to LIVE: its recovery protocol (restore, replay bounds, the
consumer's seek), the end of its replay, and the phase transitions.

``PartitionRecovery`` is mixed into ``PartitionRunner`` (``runtime/partition.py``),
whose constructor sets the state declared here; processing, commits and
checkpoints stay there.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from aiokafka import TopicPartition

from streamremat.core.recovery import PartitionTasks
from streamremat.core.topology import Stage
from streamremat.metrics.sensor import Sensor
from streamremat.runtime.checkpointing import EPOCH_BITS, Checkpointer, owner_epoch
from streamremat.runtime.commit_meta import decode_commit_metadata
from streamremat.runtime.emitting import Emitter
from streamremat.runtime.gaps import check_restart
from streamremat.runtime.lifecycle import Phase, check_transition
from streamremat.runtime.recovery_report import (
    RecoveryReport,
    report_recovered,
    report_replay_progress,
)
from streamremat.runtime.remat_plans import RetentionBound
from streamremat.runtime.restoring import restore_stages
from streamremat.runtime.scheduling import CheckpointScheduler, downtime_sample
from streamremat.runtime.settings import WorkerSettings
from streamremat.runtime.tuner_feed import TunerFeed
from streamremat.state.base import CheckpointStore

log = logging.getLogger("streamremat.worker")

#: Reads a partition's committed offset (None: never committed) and its metadata.
FetchCommitted = Callable[[TopicPartition], Awaitable[tuple[int | None, str]]]


class PartitionRecovery:
    """Restores one partition's tasks and brings them to LIVE (DESIGN §6)."""

    tp: TopicPartition
    stages: Sequence[Stage]
    #: sensor and log names, one per stage
    names: list[str]
    settings: WorkerSettings
    group_id: str
    local: CheckpointStore
    replica: CheckpointStore | None
    scheduler: CheckpointScheduler
    feed: TunerFeed
    retention_s: float | None
    sensor: Sensor
    checkpointer: Checkpointer
    emitter: Emitter
    phase: Phase
    #: the tasks, the replay's bounds and the position (set by ``recover``)
    partition_tasks: PartitionTasks
    #: the committed offset (None: never committed) and its report, set by ``recover``
    committed: int | None
    report: RecoveryReport | None
    #: wall time the previous owner was last seen alive for this partition (its
    #: last commit or checkpoint), to measure the downtime after an unclean stop
    previous_alive_s: float | None
    #: this owner's checkpoint seq epoch (see ``owner_epoch``), set by ``recover``
    owner_epoch: int
    #: per operator, the stream time committed with ``self.committed``
    _committed_stream_times: dict[str, int]
    _retention: RetentionBound
    _restored_wall: float
    _replay_started: float
    _replay_logged: float

    # -- position ---------------------------------------------------------------

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
           live. A closing committed in part at ``k`` (the metadata's ``cl``)
           resumes after its last committed window. A checkpoint follows soon after.
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
        # A closing the previous owner committed in part: closed again from ``k``
        # on, its windows out already are skipped (``runtime/emitting.py``).
        self.emitter.progress.resume(commit_meta.closings)
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

    @property
    def operator_names(self) -> list[str]:
        return list(self.names)

    # -- the replay's end ---------------------------------------------------------

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

    @property
    def raw_replayable(self) -> bool:
        """Whether the native replay reader may feed this partition record sets
        (``runtime/raw_replay.py``)."""
        return (self.phase is Phase.REPLAYING and not self.checkpointer.writing
                and self.partition_tasks.raw_replayable)

    def replay_raw(self, raw: Any) -> bool:
        """``process`` for a record set the native reader parsed (offsets below
        ``replay_until``); False, nothing folded, when a task declined it."""
        if not self.raw_replayable or not self.partition_tasks.replay_raw(raw):
            return False
        if self.partition_tasks.replaying:
            self._replay_progress()
        else:
            self._go_live()
        return True

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

    # -- phases -------------------------------------------------------------------

    def to(self, phase: Phase) -> None:
        """Move to ``phase``; PhaseError if the lifecycle has no such transition."""
        check_transition(f"{self.tp.topic}[{self.tp.partition}]", self.phase, phase)
        self.phase = phase
        self._report_phase()

    def _report_phase(self) -> None:
        if self.phase is not Phase.CLOSED:
            for name in self.names:
                self.sensor.on_partition_state(name, self.tp.partition, self.phase.value)
