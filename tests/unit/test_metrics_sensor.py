"""The Sensor interface and its pure helpers (LatencyBatch, tuner decisions)."""

from __future__ import annotations

import enum
import inspect
from dataclasses import dataclass
from typing import Any

import pytest

from streamremat.metrics.sensor import (
    BOUNDS,
    E2E_LATENCY_BUCKETS_S,
    LatencyBatch,
    Sensor,
    read_tuner_decision,
)
from streamremat.metrics.testing import exercise_every_hook

HOOKS = sorted(name for name in vars(Sensor) if name.startswith("on_"))


def test_the_interface_covers_the_runtime_events() -> None:
    assert (
        sorted(
            [
                "on_task_assigned",
                "on_task_revoked",
                "on_partition_state",
                "on_loop",
                "on_records_in",
                "on_records_out",
                "on_batch",
                "on_lag",
                "on_e2e_latency",
                "on_commit",
                "on_checkpoint",
                "on_checkpoint_failed",
                "on_checkpoint_age",
                "on_restore",
                "on_replay",
                "on_replay_progress",
                "on_checkpoint_fallback",
                "on_failure_detected",
                "on_retention_gap",
                "on_committed_offset_missing",
                "on_dead_letter",
                "on_late",
                "on_open_windows",
                "on_tuner",
                "on_remat_plan",
            ]
        )
        == HOOKS
    )


def test_base_sensor_accepts_every_hook_and_does_nothing() -> None:
    sensor = Sensor()
    exercise_every_hook(sensor)
    sensor.on_task_revoked("counts", 0)
    assert vars(sensor) == {}


class _Recorder(Sensor):
    def __init__(self) -> None:
        self.called: set[str] = set()

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("on_"):
            object.__getattribute__(self, "called").add(name)
        return object.__getattribute__(self, name)


def test_exercise_every_hook_calls_every_hook_but_revocation() -> None:
    recorder = _Recorder()
    exercise_every_hook(recorder)
    assert recorder.called == set(HOOKS) - {"on_task_revoked"}


def test_hooks_take_operator_and_partition_first_except_worker_wide_ones() -> None:
    for name in HOOKS:
        params = list(inspect.signature(getattr(Sensor, name)).parameters)
        if name == "on_commit":
            assert params == ["self", "duration_s"]
        elif name == "on_loop":
            assert params == ["self", "session_alive", "joined"]
        else:
            assert params[:3] == ["self", "operator", "partition"], name


def test_latency_batch_bins_like_prometheus_le_buckets() -> None:
    batch = LatencyBatch.of([0.005, 0.0051, 0.1, 1e6], bounds_s=(0.005, 0.1))
    # le is inclusive: 0.005 falls in the first bucket, 1e6 in +Inf.
    assert batch.counts == (1, 2, 1)
    assert batch.count == 4
    assert batch.sum_s == pytest.approx(0.005 + 0.0051 + 0.1 + 1e6)


def test_latency_batch_merge_adds_counts_and_sums() -> None:
    a = LatencyBatch.of([0.01, 0.2])
    b = LatencyBatch.of([0.2, 400.0])
    merged = a.merge(b)
    expected = LatencyBatch.of([0.01, 0.2, 0.2, 400.0])
    assert merged.counts == expected.counts
    assert merged.sum_s == pytest.approx(expected.sum_s)
    assert len(merged.counts) == len(E2E_LATENCY_BUCKETS_S) + 1


def test_latency_batch_rejects_mismatched_bounds() -> None:
    with pytest.raises(ValueError, match="counts"):
        LatencyBatch((1, 2), 0.5, bounds_s=(0.1, 1.0))
    with pytest.raises(ValueError, match="different bounds_s"):
        LatencyBatch.of([1.0]).merge(LatencyBatch.of([1.0], bounds_s=(1.0,)))


class _Bound(enum.Enum):
    OPTIMUM = "optimum"
    RTO = "rto"


@dataclass(frozen=True)
class _TunerDecision:
    """Shaped like streamremat.tuning.tuner.TunerDecision (the fields metrics read)."""

    checkpoint_cost_s: float = 0.05
    durable_latency_s: float = 0.4
    downtime_s: float = 6.0
    ingest_rate_eps: float = 1000.0
    replay_rate_eps: float | None = None
    sigma: float = 20.0
    failure_rate_per_s: float = 1e-5
    t_optimum_s: float = 1800.0
    t_rto_s: float = 30.0
    t_retention_s: float = float("inf")
    interval_s: float = 30.0
    active_bound: _Bound = _Bound.RTO
    rto_s: float = 60.0
    rto_infeasible: bool = False
    predicted_recovery_s: float | None = 8.0


def test_read_tuner_decision_from_an_object_with_tuner_names() -> None:
    reading = read_tuner_decision(_TunerDecision())
    assert reading.C == 0.05 and reading.L == 0.4 and reading.D == 6.0
    assert reading.r == 1000.0 and reading.mu is None and reading.sigma == 20.0
    assert reading.lam == 1e-5
    assert (reading.t_star, reading.t_rto, reading.t_retention) == (1800.0, 30.0, float("inf"))
    assert reading.bound == "rto"
    assert reading.rto_infeasible is False
    assert (reading.interval_s, reading.predicted_recovery_s, reading.rto_s) == (30.0, 8.0, 60.0)


def test_read_tuner_decision_from_a_mapping_with_symbol_names() -> None:
    reading = read_tuner_decision({"C": 1, "lambda": 0.5, "bound": "MAX", "rto_infeasible": 1})
    assert reading.C == 1.0 and reading.lam == 0.5
    assert reading.bound == "max" and reading.rto_infeasible is True
    assert reading.mu is None and reading.interval_s is None


def test_read_tuner_decision_rejects_an_unknown_bound() -> None:
    with pytest.raises(ValueError, match="not one of " + ", ".join(BOUNDS)):
        read_tuner_decision({"bound": "cheapest"})


def test_read_tuner_decision_from_the_real_tuner() -> None:
    from streamremat.tuning.config import TunerConfig
    from streamremat.tuning.tuner import Tuner

    tuner = Tuner(TunerConfig(rto_s=60.0))
    tuner.observe_ingest(0.0, 0)
    tuner.observe_ingest(10.0, 10_000)
    tuner.observe_checkpoint(10.0, 0.05, 0.3)
    decision = tuner.decision(10.0)
    reading = read_tuner_decision(decision)
    assert reading.interval_s == decision.interval_s
    assert decision.checkpoint_cost_s == reading.C
    assert decision.durable_latency_s == reading.L
    assert decision.downtime_s == reading.D
    assert (reading.r, reading.mu, reading.sigma, reading.lam) == (
        decision.ingest_rate_eps,
        decision.replay_rate_eps,
        decision.sigma,
        decision.failure_rate_per_s,
    )
    assert (reading.t_star, reading.t_rto, reading.t_retention) == (
        decision.t_optimum_s,
        decision.t_rto_s,
        decision.t_retention_s,
    )
    assert reading.bound == decision.active_bound.value
    assert reading.rto_infeasible == decision.rto_infeasible
    assert reading.predicted_recovery_s == decision.predicted_recovery_s
    assert reading.rto_s == 60.0


def test_partition_states_are_the_lifecycle_phases() -> None:
    from streamremat.metrics.sensor import PARTITION_STATES
    from streamremat.runtime.lifecycle import Phase

    assert set(PARTITION_STATES) == {p.value for p in Phase if p is not Phase.CLOSED}
