"""``streamremat tune MODULE:APP``: why each task checkpoints as often as it does.

Reads each task's newest checkpoint (the tuner's state travels inside it), from
the compacted checkpoint topic and, when readable, the local state directory,
and prints the tuner's estimates, its chosen interval, the bound that is active,
and the recovery time it predicts if a failure happened now, beside the RTO.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass

from streamremat.core.operator import App
from streamremat.runtime.kafka import topic_partitions
from streamremat.runtime.scheduling import decode_meta, tuner_config
from streamremat.runtime.settings import WorkerSettings
from streamremat.state.base import CheckpointStore
from streamremat.state.frame import TaskId
from streamremat.state.kafka import KafkaCheckpointStore
from streamremat.state.restore import newest_restore_point
from streamremat.state.rocksdb import RocksDBCheckpointStore
from streamremat.tuning import Tuner, TunerDecision


@dataclass(frozen=True)
class TaskExplanation:
    task: TaskId
    checkpoint_offset: int | None
    checkpoint_age_s: float | None
    source: str | None
    decision: TunerDecision | None


async def explain_app(app: App, settings: WorkerSettings) -> list[TaskExplanation]:
    """The tuner's view of every task of ``app`` that has a checkpoint."""
    replica: CheckpointStore | None = None
    local: CheckpointStore | None = None
    try:
        replica = await KafkaCheckpointStore.open(settings.client, app.checkpoint_topic)
    except Exception:
        replica = None
    path = os.path.join(settings.state_dir, f"{app.name}.rocksdb")
    if os.path.isdir(path):
        try:
            local = RocksDBCheckpointStore(path)
        except Exception:  # a running worker holds the DB lock: the replica will do
            local = None
    primary = local or replica
    if primary is None:
        raise RuntimeError(
            f"no checkpoints readable: neither {app.checkpoint_topic!r} on "
            f"{settings.bootstrap_servers} nor {path}"
        )
    config = tuner_config(settings.checkpoints, settings.session_timeout_ms / 1000)
    now = time.time()
    out: list[TaskExplanation] = []
    try:
        for op in app.operators.values():
            for p in await topic_partitions(settings.client, op.source):
                task = TaskId(op.name, op.source, p)
                choice = await newest_restore_point(
                    task, primary, replica if primary is not replica else None
                )
                point = choice.point
                if point is None:
                    out.append(TaskExplanation(task, None, None, None, None))
                    continue
                wall_ms, state = decode_meta(point.meta)
                age = None if wall_ms is None else max(0.0, now - wall_ms / 1000)
                decision = None
                if state:
                    decision = Tuner.from_bytes(state, config).decision(now, age)
                out.append(TaskExplanation(task, point.offset, age, choice.source, decision))
    finally:
        for store in (local, replica):
            if store is not None:
                await store.close()
    return out


def _s(x: float | None) -> str:
    if x is None:
        return "n/a"
    return "inf" if math.isinf(x) else f"{x:.1f}s"


def format_explanations(rows: list[TaskExplanation]) -> str:
    lines = []
    for row in rows:
        head = f"{row.task}"
        if row.checkpoint_offset is None:
            lines.append(f"{head}: no checkpoint yet")
            continue
        lines.append(
            f"{head}: checkpoint at offset {row.checkpoint_offset}, {_s(row.checkpoint_age_s)} "
            f"old (from {row.source})"
        )
        d = row.decision
        if d is None:
            lines.append("    fixed checkpoint policy: no tuner state")
            continue
        mu = "n/a" if d.replay_rate_eps is None else f"{d.replay_rate_eps:,.0f}/s"
        lines += [
            f"    interval {_s(d.interval_s)}  active bound: {d.active_bound.value}"
            f"  (T* {_s(d.t_optimum_s)}, T_rto {_s(d.t_rto_s)}, T_retention "
            f"{_s(d.t_retention_s)})",
            f"    C {d.checkpoint_cost_s * 1000:.1f} ms"
            f"  L p90 {d.durable_latency_p90_s * 1000:.0f} ms"
            f"  D p90 {_s(d.downtime_p90_s)}  r {d.ingest_rate_eps:,.0f}/s  mu {mu}"
            f"  sigma {d.sigma:.2f}  MTBF {d.mtbf_s / 3600:.1f} h",
            f"    predicted recovery if a failure happened now: {_s(d.predicted_recovery_s)}"
            f"  (worst case {_s(d.worst_case_recovery_s)})  RTO {_s(d.rto_s)}",
        ]
        if d.rto_infeasible:
            lines.append(f"    RTO INFEASIBLE: {d.infeasible_reason}")
    return "\n".join(lines)
