"""Step 2 of ``PartitionRunner.recover``: every stage of a partition from its
newest checkpoint (the I/O around ``core.recovery.restore_task``)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from aiokafka import TopicPartition

from streamremat.core.recovery import Restore, restore_task
from streamremat.core.repartition import Repartitioner
from streamremat.core.task import Task
from streamremat.core.topology import Stage
from streamremat.metrics.sensor import Sensor
from streamremat.runtime import gc_tuning
from streamremat.runtime.scheduling import decode_meta
from streamremat.state.base import CheckpointStore
from streamremat.state.frame import TaskId
from streamremat.state.restore import newest_restore_point

log = logging.getLogger("streamremat.worker")


@dataclass
class RestoredStages:
    """What the checkpoints of one partition's stages gave."""

    tasks: list[Task | Repartitioner] = field(default_factory=list)
    #: the windowed tasks' ids (what this owner checkpoints)
    task_ids: list[TaskId] = field(default_factory=list)
    #: the highest next seq seen in the local store and the replica
    visible_next_seq: int = 0
    #: where the restored checkpoints came from (``local``, ``replica``)
    sources: set[str] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)
    #: a restored checkpoint was not written at a clean stop
    unclean: bool = False
    checkpoint_offsets: list[int] = field(default_factory=list)
    #: the first restored checkpoint's meta (it carries the tuner state)
    meta: bytes = b""
    #: wall times in ms of the restored checkpoints (the previous owner's signs of life)
    alive_ms: list[int] = field(default_factory=list)


async def restore_stages(
    tp: TopicPartition,
    stages: Sequence[Stage],
    committed: int | None,
    log_start: int,
    local: CheckpointStore,
    replica: CheckpointStore | None,
    sensor: Sensor,
) -> RestoredStages:
    """For every windowed stage, the newest valid checkpoint from the local store
    and the replica, whichever is further along; a task without one starts empty
    at ``log_start``. Stateless (repartition) stages start at the committed offset."""
    out = RestoredStages()
    for stage in stages:
        if stage.target is not None:
            # Stateless: what it forwarded below the committed offset committed with it.
            rep = Repartitioner(stage.operator, stage.target, tp.partition)
            rep.next_offset = log_start if committed is None else committed
            out.tasks.append(rep)
            continue
        op = stage.operator
        task_id = TaskId(op.name, tp.topic, tp.partition)
        choice = await newest_restore_point(task_id, local, replica)
        out.task_ids.append(task_id)
        out.visible_next_seq = max(out.visible_next_seq, choice.next_seq)
        out.notes.extend(choice.notes)
        for _ in choice.notes:
            sensor.on_checkpoint_fallback(op.name, tp.partition, "fallback")
        point = choice.point
        # Decoding millions of entries takes seconds: in a worker thread, so the
        # event loop (heartbeats, the other partitions' replica writes) runs on, and
        # with the collector paused (see ``gc_tuning.paused``). The task is new: no
        # one else sees it before this returns.
        with gc_tuning.paused():
            restored = await asyncio.to_thread(
                restore_task, op, tp.partition,
                [f.payload for f in point.chain] if point else None,
                point.offset if point else None, committed, log_start,
            )
        if restored.outcome is Restore.RESTORED:
            assert point is not None
            out.sources.add(choice.source or "?")
            out.unclean = out.unclean or not point.clean
            out.checkpoint_offsets.append(point.offset)
            out.meta = out.meta or point.meta
            wall_ms, _ = decode_meta(point.meta)
            out.alive_ms.extend([wall_ms] if wall_ms is not None else [])
        elif restored.outcome is Restore.BEYOND_COMMITTED:
            assert point is not None
            log.error(
                "%s: checkpoint offset %d is beyond the committed offset %d; its outputs "
                "were never committed, so it is discarded and state is rebuilt",
                task_id, point.offset, committed,
            )
        elif restored.outcome is Restore.REFUSED:
            assert point is not None and restored.error is not None
            log.error("%s: restoring checkpoint seq %d failed (%s); rebuilding from "
                      "the log start", task_id, point.seq, restored.error)
            sensor.on_checkpoint_fallback(op.name, tp.partition, type(restored.error).__name__)
        if (
            restored.outcome is not Restore.RESTORED
            and committed is not None
            and committed > log_start
        ):
            # Outputs were committed before, yet no checkpoint is usable: the
            # state is rebuilt from what retention still has. Never silently.
            log.warning(
                "%s: no valid checkpoint; rebuilding from the earliest retained "
                "offset %d (committed offset %d)", task_id, log_start, committed,
            )
            sensor.on_checkpoint_fallback(op.name, tp.partition, "earliest")
        out.tasks.append(restored.task)
    return out
