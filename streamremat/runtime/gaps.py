"""Retention gaps (DESIGN §5): offsets a task needs that the source no longer has.

The worker's consumer never moves a position by itself (``auto_offset_reset="none"``):
a fetch below the log start raises ``OffsetOutOfRangeError`` instead of jumping to
the log start. Every place where a position could pass records that were never
processed comes here and goes through ``--on-retention-gap``:

* a live or replaying partition whose next offset fell below the log start
  (``out_of_range``);
* a batch that starts after the partition's position while the log start is past
  that position (``check_jumps``). A jump over transaction markers, aborted
  transactions or compacted records is no gap: those offsets are still inside the
  log, so the log start is not past them;
* a restart whose checkpoint, or whose committed offset when no checkpoint is
  usable, is below the log start (``restart_gap``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiokafka import TopicPartition
from aiokafka.errors import NoOffsetForPartitionError, OffsetOutOfRangeError

from streamremat.core.recovery import replay_start
from streamremat.core.repartition import Repartitioner
from streamremat.core.task import Task
from streamremat.metrics.sensor import Sensor
from streamremat.runtime.exceptions import LogTruncatedError, RetentionGapError
from streamremat.runtime.settings import GapPolicy

if TYPE_CHECKING:
    from streamremat.runtime.partition import PartitionRunner
    from streamremat.runtime.recovering import PartitionRecovery

log = logging.getLogger("streamremat.worker")


@dataclass(frozen=True)
class Gap:
    """Offsets ``[expected, available)`` of ``topic[partition]`` are gone."""

    topic: str
    partition: int
    expected: int
    available: int
    #: names ``expected`` in messages
    what: str

    @property
    def skipped(self) -> int:
        return self.available - self.expected


def apply_gap_policy(gap: Gap, policy: GapPolicy, sensor: Sensor, operators: Iterable[str]) -> None:
    """``fail``: raise ``RetentionGapError``; the worker stops without committing
    anything past the gap and exits non-zero. ``reset``: log exactly which offsets
    are skipped and count them; the caller goes on at ``gap.available``."""
    if policy is GapPolicy.FAIL:
        raise RetentionGapError(gap.topic, gap.partition, gap.expected, gap.available, gap.what)
    log.warning(
        "%s[%d]: retention gap: skipping offsets [%d, %d) (%d records): %s %d is below the "
        "log start offset %d; --on-retention-gap=reset goes on without them, so results "
        "covering them are incomplete",
        gap.topic, gap.partition, gap.expected, gap.available, gap.skipped, gap.what,
        gap.expected, gap.available,
        extra={"event": "retention_gap", "topic": gap.topic, "partition": gap.partition,
               "skipped_from": gap.expected, "skipped_to": gap.available},
    )
    for op in operators:
        sensor.on_retention_gap(op, gap.partition, gap.skipped)


def skip_gap(
    runner: PartitionRunner, expected: int, available: int, policy: GapPolicy, sensor: Sensor
) -> None:
    """A running partition's next offset ``expected`` is below ``available``, the
    first offset it can still read: through the policy, then the runner goes on
    at ``available`` (the caller moves the consumer if it has to)."""
    gap = Gap(runner.tp.topic, runner.tp.partition, expected, available,
              f"the next offset to read ({runner.phase.value})")
    apply_gap_policy(gap, policy, sensor, runner.operator_names)
    runner.skip_to(available)


def restart_gap(
    tp: TopicPartition, start: int, committed: int | None, log_start: int
) -> Gap | None:
    """The gap a recovery would step over: ``start`` is the smallest task offset.
    With every task at or above the log start, a committed offset below it means no
    task restored a checkpoint (one at or below the committed offset would be below
    the log start too): records from the committed offset on were never processed."""
    if start < log_start:
        return Gap(tp.topic, tp.partition, start, log_start, "checkpoint offset")
    if committed is not None and committed < log_start:
        return Gap(tp.topic, tp.partition, committed, log_start,
                   "committed offset (no usable checkpoint)")
    return None


def check_restart(
    runner: PartitionRecovery,
    tasks: Sequence[Task | Repartitioner],
    committed: int | None,
    log_start: int,
    checkpoint_offset: int | None,
) -> None:
    """Step 3 of ``PartitionRunner.recover``, before ``tasks`` start: a restart gap
    goes through the policy (``reset`` moves the tasks to the log start). A
    checkpoint without any committed offset is said (log + metric): nothing tells
    which of its later results were committed already, so they are emitted again.
    Tasks without a usable checkpoint start at ``log_start`` already."""
    tp = runner.tp
    start = min(replay_start(t) for t in tasks)
    gap = restart_gap(tp, start, committed, log_start)
    if gap is not None:
        apply_gap_policy(gap, runner.settings.on_retention_gap, runner.sensor,
                         runner.operator_names)
        for task in tasks:
            task.next_offset = max(task.next_offset or 0, log_start)
    if committed is None and checkpoint_offset is not None:
        log.warning(
            "%s[%d]: a checkpoint at offset %d exists but group %s has no committed offset: "
            "its offsets expired (offsets.retention.minutes), were deleted, or --group-id "
            "changed, so results after the checkpoint that were committed before are "
            "emitted again",
            tp.topic, tp.partition, checkpoint_offset, runner.group_id,
        )
        for op in runner.operator_names:
            runner.sensor.on_committed_offset_missing(op, tp.partition)


#: What the consumer raises instead of resetting a position.
POSITION_ERRORS = (OffsetOutOfRangeError, NoOffsetForPartitionError)


async def position_error(
    consumer: Any,
    runners: Mapping[TopicPartition, PartitionRunner],
    exc: OffsetOutOfRangeError | NoOffsetForPartitionError,
    policy: GapPolicy,
    sensor: Sensor,
) -> None:
    """``getmany`` raised one of ``POSITION_ERRORS``: handle it without a reset."""
    if isinstance(exc, OffsetOutOfRangeError):
        await out_of_range(consumer, runners, exc.args[0], policy, sensor)
    else:
        keep_position(consumer, runners, exc.args[0])


async def out_of_range(
    consumer: Any,
    runners: Mapping[TopicPartition, PartitionRunner],
    offsets: Mapping[TopicPartition, int],
    policy: GapPolicy,
    sensor: Sensor,
) -> None:
    """The consumer's fetch of each ``tp`` at ``offsets[tp]`` is outside its log.

    1. Read the log start and end offsets.
    2. Below the log start: a gap ``[offset, log start)`` through the policy;
       ``reset`` moves the runner and the consumer to the log start.
    3. Beyond the log end: the log lost processed records; fatal under any policy.
    4. Inside the log again (e.g. the leader changed): fetch the same offset again.
    """
    for tp, fetch_offset in offsets.items():
        runner = runners.get(tp)
        if runner is None:
            continue  # not restored yet: its recovery seeks
        log_start = (await consumer.beginning_offsets([tp]))[tp]
        log_end = (await consumer.end_offsets([tp]))[tp]
        if fetch_offset < log_start:
            skip_gap(runner, fetch_offset, log_start, policy, sensor)
            consumer.seek(tp, log_start)
        elif fetch_offset > log_end:
            raise LogTruncatedError(tp.topic, tp.partition, fetch_offset, log_end)
        else:
            consumer.seek(tp, fetch_offset)


def keep_position(
    consumer: Any, runners: Mapping[TopicPartition, PartitionRunner], tp: TopicPartition
) -> None:
    """The consumer has no position for ``tp`` (a new group's partition before its
    recovery seeks; that recovery will). A runner knows its position: that one,
    never a reset."""
    runner = runners.get(tp)
    if runner is not None:
        consumer.seek(tp, runner.position)


async def check_jumps(
    consumer: Any,
    runners: Mapping[TopicPartition, PartitionRunner],
    firsts: Mapping[TopicPartition, int],
    policy: GapPolicy,
    sensor: Sensor,
) -> None:
    """Partitions whose next record (or position) ``firsts[tp]`` is past the
    runner's position; one ListOffsets for all of them, none if there is no jump.

    Offsets in ``[position, first)`` that are still inside the log were transaction
    markers, aborted or compacted records: no gap. Those below the log start are gone.
    """
    jumps = {tp: (runner, first) for tp, first in firsts.items()
             if (runner := runners.get(tp)) is not None and first > runner.position}
    if not jumps:
        return
    starts = await consumer.beginning_offsets(list(jumps))
    for tp, (runner, first) in jumps.items():
        lost_until = min(starts[tp], first)
        if lost_until > runner.position:
            skip_gap(runner, runner.position, lost_until, policy, sensor)
