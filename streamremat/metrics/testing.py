"""Helpers for tests of the metrics and of what reads them (rules, dashboards).

`exercise_every_hook` drives one task through every `Sensor` hook with
plausible figures, so a registry exports every metric family at least once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry

from streamremat.metrics.sensor import Sensor

__all__ = ["exercise_every_hook", "exported_sample_names"]


@dataclass(frozen=True)
class _Summary:
    """A plan summary of the shape of `streamremat.tuning.plan_summary.PlanSummary`
    (metrics import no tuner code): 3 groups stored (one forced by retention, one
    by the RTO), 2 recomputed."""

    groups_stored: int = 3
    groups_recomputed: int = 2
    bytes_stored: int = 40_000
    bytes_saved: int = 2_500_000
    extra_replay_records: int = 60_000
    extra_replay_s: float = 3.0
    forced: Mapping[str, int] = field(default_factory=lambda: {"RETENTION": 1, "RTO": 1})


def exercise_every_hook(sensor: Sensor, operator: str = "counts", partition: int = 0) -> None:
    """Call each hook of `sensor` once (order: a task's life), leaving its series in place."""
    sensor.on_task_assigned(operator, partition)
    sensor.on_partition_state(operator, partition, "restoring")
    sensor.on_loop(session_alive=True, joined=True)
    sensor.on_restore(operator, partition, 0.8, "local")
    sensor.on_checkpoint_fallback(operator, partition, "ChecksumMismatch")
    sensor.on_failure_detected(operator, partition)
    sensor.on_committed_offset_missing(operator, partition)
    sensor.on_retention_gap(operator, partition, 1_000)
    sensor.on_replay_progress(operator, partition, 0, 50_000)
    sensor.on_replay(operator, partition, 50_000, 2.5)
    sensor.on_replay_progress(operator, partition, 50_000, 50_000)
    sensor.on_records_in(operator, partition, 500)
    sensor.on_batch(operator, partition, 500, 0.004)
    sensor.on_records_out(operator, partition, 20)
    sensor.on_e2e_latency(operator, partition, [0.02, 0.15, 1.4])
    sensor.on_lag(operator, partition, 1200)
    sensor.on_late(operator, partition, 3)
    sensor.on_dead_letter(operator, partition, "DecodeError")
    sensor.on_open_windows(operator, partition, 12, 340)
    sensor.on_commit(0.015)
    sensor.on_checkpoint(operator, partition, 0.03, 4096, "incremental")
    sensor.on_checkpoint_failed(operator, partition, "TimeoutError")
    sensor.on_checkpoint_age(operator, partition, 4.0)
    sensor.on_tuner(
        operator,
        partition,
        {
            "interval_s": 30.0,
            "C": 0.05,
            "L": 0.4,
            "D": 6.0,
            "r": 1000.0,
            "mu": 20_000.0,
            "sigma": 20.0,
            "lambda": 1 / 86_400,
            "t_star": 1859.0,
            "t_rto": 30.0,
            "t_retention": 86_000.0,
            "bound": "rto",
            "rto_infeasible": False,
            "predicted_recovery_s": 8.1,
            "rto_s": 60.0,
        },
    )
    sensor.on_remat_plan(operator, partition, _Summary())


def exported_sample_names(registry: CollectorRegistry) -> set[str]:
    """Every sample name the registry exposes (with `_total`, `_bucket`, ... suffixes)."""
    return {sample.name for family in registry.collect() for sample in family.samples}
