"""``streamremat tune MODULE:APP``: why each task checkpoints as often as it does.

Reads each task's newest checkpoint (the tuner's state travels inside it), from
the local state directory and, unless ``--no-replica``, the compacted checkpoint
topic, and prints the tuner's decision in the words of the worker's tuner log
line (``streamremat.tuning.report.describe``), under the policy the flags give.

The rematerialization plan shown is the one the newest checkpoint was written
with: the worker puts its summary into that checkpoint (``scheduling.with_plan``),
so ``tune`` says what a recovery from it will replay, in the worker's own
figures. Re-planning offline could not: a recompute window's bytes are not in
the checkpoint (that is the point), and the plan depends on the window sizes
and rates at the moment of the checkpoint.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from streamremat.core.operator import App
from streamremat.core.topology import StageKind, compile_app
from streamremat.runtime.access import check_connection
from streamremat.runtime.kafka import end_offsets, retention_s, topic_config
from streamremat.runtime.scheduling import CheckpointScheduler, decode_meta, decode_plan
from streamremat.runtime.settings import WorkerSettings
from streamremat.state.base import CheckpointStore
from streamremat.state.frame import TaskId
from streamremat.state.kafka import KafkaCheckpointStore
from streamremat.state.restore import newest_restore_point
from streamremat.state.rocksdb import RocksDBCheckpointStore
from streamremat.tuning import TunerDecision
from streamremat.tuning.plan_summary import PlanSummary
from streamremat.tuning.report import describe, describe_plan, seconds


@dataclass(frozen=True)
class TaskExplanation:
    task: TaskId
    checkpoint_offset: int | None
    checkpoint_age_s: float | None
    source: str | None
    decision: TunerDecision | None
    end_offset: int | None = None
    #: the rematerialization plan the checkpoint was written with (None: before plans)
    plan: PlanSummary | None = None


async def _open_stores(
    app: App, settings: WorkerSettings
) -> tuple[CheckpointStore | None, CheckpointStore | None, str]:
    local: CheckpointStore | None = None
    replica: CheckpointStore | None = None
    path = os.path.join(settings.state_dir, f"{app.name}.rocksdb")
    if os.path.isdir(path):
        try:
            local = RocksDBCheckpointStore(path)
        except Exception:  # a running worker holds the DB lock: the replica will do
            local = None
    if settings.checkpoints.replicate:
        try:
            replica = await KafkaCheckpointStore.open(settings.client, app.checkpoint_topic)
        except Exception:
            replica = None
    return local, replica, path


def explain_task(
    scheduler: CheckpointScheduler,
    meta: bytes,
    checkpoint_offset: int,
    end_offset: int,
    retention: float | None,
    now_s: float,
) -> tuple[float | None, TunerDecision | None]:
    """(checkpoint age, decision) of one task, as its worker would see it at ``now_s``.

    1. Continue the tuner stored in the checkpoint (``None`` if it holds none),
       with the source's retention, as the worker does at restore.
    2. The records that arrived since the checkpoint are ingest the stored rate
       has not seen: a stopped, idle app has ``r`` decay to 0, a live one keeps it.
    3. The backlog a replay would read is ``end_offset - checkpoint_offset``.
    """
    wall_ms, state = decode_meta(meta)
    age = None if wall_ms is None else max(0.0, now_s - wall_ms / 1000)
    if not state:
        return age, None
    scheduler.restore(meta, False, now_s, retention)
    backlog = max(0, end_offset - checkpoint_offset)
    if age is not None and age > 0:
        scheduler.source_grew(now_s - age, 0)
        scheduler.source_grew(now_s, backlog)
    return age, scheduler.decision(now_s, age, backlog)


async def explain_app(
    app: App, settings: WorkerSettings, now_s: float | None = None
) -> list[TaskExplanation]:
    """The tuner's view of every task of ``app`` that has a checkpoint, at ``now_s``
    (default: now), under the policy and bounds of ``settings``. A TLS or SASL
    failure is a ``KafkaAccessError`` naming the cause, not "no checkpoints"."""
    await check_connection(settings.client)
    local, replica, path = await _open_stores(app, settings)
    primary = local or replica
    if primary is None:
        where = f"the local state dir {path}"
        if settings.checkpoints.replicate:
            where += f" nor {app.checkpoint_topic!r} on {settings.bootstrap_servers}"
        raise RuntimeError(f"no checkpoints readable: neither {where}")
    detect_s = settings.session_timeout_ms / 1000
    out: list[TaskExplanation] = []
    try:
        for stage in compile_app(app).stages:
            if stage.kind is not StageKind.WINDOW:
                continue  # a repartition stage keeps no state: nothing to checkpoint
            ends = await end_offsets(settings.client, stage.source)
            retention = retention_s(await topic_config(settings.client, stage.source))
            for p in sorted(ends):
                task = TaskId(stage.name, stage.source, p)
                choice = await newest_restore_point(
                    task, primary, replica if primary is not replica else None
                )
                point = choice.point
                if point is None:
                    out.append(TaskExplanation(task, None, None, None, None, ends[p]))
                    continue
                scheduler = CheckpointScheduler(settings.checkpoints, detect_s)
                age, decision = explain_task(
                    scheduler, point.meta, point.offset, ends[p], retention,
                    time.time() if now_s is None else now_s,
                )
                out.append(TaskExplanation(task, point.offset, age, choice.source, decision,
                                           ends[p], decode_plan(point.meta)))
    finally:
        for store in (local, replica):
            if store is not None:
                await store.close()
    return out


_SOURCES = {"rocksdb": "the local state dir", "kafka": "the replica topic"}


def format_explanations(rows: list[TaskExplanation]) -> str:
    lines = []
    for row in rows:
        head = f"{row.task}"
        if row.checkpoint_offset is None:
            lines.append(f"{head}: no checkpoint yet")
            continue
        end = "" if row.end_offset is None else f" (source end offset {row.end_offset})"
        where = _SOURCES.get(row.source or "", row.source)
        age = seconds(row.checkpoint_age_s)
        lines.append(
            f"{head}: checkpoint at offset {row.checkpoint_offset}{end}, taken {age} ago, "
            f"read from {where}"
        )
        d = row.decision
        if d is None:
            lines.append("    no tuner state in this checkpoint")
            continue
        lines += [f"    {line}" for line in describe(d)]
        if row.plan is not None:
            lines.append(f"    {describe_plan(row.task.operator, row.plan)}")
    return "\n".join(lines)

