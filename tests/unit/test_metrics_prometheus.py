"""PrometheusSensor: each hook moves the expected series; revoked tasks leave none."""

from __future__ import annotations

import subprocess
import time
import urllib.request
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from streamremat.dev.ports import free_port_run
from streamremat.metrics.prometheus import PrometheusSensor
from streamremat.metrics.sensor import (
    BOUNDS,
    E2E_LATENCY_BUCKETS_S,
    REMAT_FORCED_REASONS,
    LatencyBatch,
    forced_labels,
)
from streamremat.metrics.testing import exercise_every_hook, exported_sample_names

APP = "clicks"
TASK = {"app": APP, "operator": "counts", "partition": "0"}


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def sensor(registry: CollectorRegistry) -> PrometheusSensor:
    return PrometheusSensor(APP, registry=registry)


def value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    sample: float | None = registry.get_sample_value(name, {**TASK, **labels})
    return sample


def test_assignment_creates_zeroed_counters(
    sensor: PrometheusSensor, registry: CollectorRegistry
) -> None:
    sensor.on_task_assigned("counts", 0)
    for name in (
        "streamremat_records_in_total",
        "streamremat_records_out_total",
        "streamremat_late_records_total",
        "streamremat_replayed_records_total",
        "streamremat_failures_total",
    ):
        assert value(registry, name) == 0.0, name
    # Gauges have no honest value before the runtime reports one.
    assert value(registry, "streamremat_consumer_lag_records") is None
    assert value(registry, "streamremat_checkpoint_age_seconds") is None


def test_throughput_hooks(sensor: PrometheusSensor, registry: CollectorRegistry) -> None:
    for _ in range(3):
        sensor.on_records_in("counts", 0, 100)
        sensor.on_batch("counts", 0, 100, 0.5)
    sensor.on_records_out("counts", 0, 7)
    sensor.on_lag("counts", 0, 42)
    sensor.on_lag("counts", 0, 40)
    sensor.on_commit(0.02)
    assert value(registry, "streamremat_records_in_total") == 300
    assert value(registry, "streamremat_batches_total") == 3
    assert value(registry, "streamremat_batch_records_total") == 300
    assert value(registry, "streamremat_busy_seconds_total") == 1.5
    assert value(registry, "streamremat_records_out_total") == 7
    assert value(registry, "streamremat_consumer_lag_records") == 40
    assert registry.get_sample_value("streamremat_commit_duration_seconds_count", {"app": APP}) == 1
    assert (
        registry.get_sample_value("streamremat_commit_duration_seconds_sum", {"app": APP}) == 0.02
    )


def test_e2e_latency_accepts_values_and_batches(
    sensor: PrometheusSensor, registry: CollectorRegistry
) -> None:
    sensor.on_e2e_latency("counts", 0, [0.02, 0.02, 7.0])
    sensor.on_e2e_latency("counts", 1, LatencyBatch.of([400.0]))
    sensor.on_e2e_latency("counts", 1, [])  # an empty batch adds nothing
    labels = {"app": APP, "operator": "counts"}

    def bucket(le: str) -> float | None:
        sample: float | None = registry.get_sample_value(
            "streamremat_e2e_latency_seconds_bucket", {**labels, "le": le}
        )
        return sample

    assert bucket("0.01") == 0
    assert bucket("0.025") == 2
    assert bucket("10.0") == 3
    assert bucket("300.0") == 3
    assert bucket("+Inf") == 4
    assert registry.get_sample_value("streamremat_e2e_latency_seconds_count", labels) == 4
    assert registry.get_sample_value(
        "streamremat_e2e_latency_seconds_sum", labels
    ) == pytest.approx(407.04)
    with pytest.raises(ValueError, match=r"LatencyBatch\.of"):
        sensor.on_e2e_latency("counts", 0, LatencyBatch.of([1.0], bounds_s=(1.0,)))


def test_checkpoint_hooks(sensor: PrometheusSensor, registry: CollectorRegistry) -> None:
    before = time.time()
    sensor.on_checkpoint_age("counts", 0, 12.0)
    sensor.on_checkpoint("counts", 0, 0.25, 4096, "full")
    sensor.on_checkpoint("counts", 0, 0.05, 512, "incremental")
    sensor.on_checkpoint("counts", 0, 0.05, 256, "incremental")
    sensor.on_checkpoint_failed("counts", 0, "TimeoutError")
    assert value(registry, "streamremat_checkpoints_total", kind="full") == 1
    assert value(registry, "streamremat_checkpoints_total", kind="incremental") == 2
    assert value(registry, "streamremat_checkpoint_bytes_total", kind="incremental") == 768
    assert value(registry, "streamremat_checkpoint_failures_total", reason="TimeoutError") == 1
    assert value(registry, "streamremat_checkpoint_age_seconds") == 0  # reset by the checkpoint
    stamp = value(registry, "streamremat_last_checkpoint_timestamp_seconds")
    assert stamp is not None and before <= stamp <= time.time()
    duration = {"app": APP, "operator": "counts"}
    assert registry.get_sample_value("streamremat_checkpoint_duration_seconds_count", duration) == 3
    sensor.on_checkpoint_age("counts", 0, 9.5)
    assert value(registry, "streamremat_checkpoint_age_seconds") == 9.5


def test_recovery_hooks(sensor: PrometheusSensor, registry: CollectorRegistry) -> None:
    sensor.on_failure_detected("counts", 0)
    sensor.on_restore("counts", 0, 1.5, "kafka")
    sensor.on_checkpoint_fallback("counts", 0, "ChecksumMismatch")
    sensor.on_replay_progress("counts", 0, 0, 10_000)
    assert value(registry, "streamremat_replay_remaining_records") == 10_000
    sensor.on_replay("counts", 0, 4000, 0.5)
    sensor.on_replay_progress("counts", 0, 4000, 10_000)
    assert value(registry, "streamremat_replay_remaining_records") == 6000
    sensor.on_replay("counts", 0, 6000, 1.0)
    sensor.on_replay("counts", 0, 0, 0.0)  # no time measured: the rate is kept
    sensor.on_replay_progress("counts", 0, 10_000, 10_000)
    assert value(registry, "streamremat_replay_remaining_records") == 0
    assert value(registry, "streamremat_replayed_records_total") == 10_000
    assert value(registry, "streamremat_replay_seconds_total") == 1.5
    assert value(registry, "streamremat_replay_throughput_records_per_second") == 6000
    assert value(registry, "streamremat_failures_total") == 1
    assert value(registry, "streamremat_checkpoint_fallbacks_total", reason="ChecksumMismatch") == 1
    restore = {"app": APP, "operator": "counts", "source": "kafka"}
    assert registry.get_sample_value("streamremat_restore_duration_seconds_sum", restore) == 1.5


def test_gap_and_missing_commit_hooks(
    sensor: PrometheusSensor, registry: CollectorRegistry
) -> None:
    sensor.on_task_assigned("counts", 0)
    assert value(registry, "streamremat_retention_gap_offsets_total") == 0
    assert value(registry, "streamremat_committed_offset_missing_total") == 0
    sensor.on_retention_gap("counts", 0, 1000)
    sensor.on_retention_gap("counts", 0, 24)
    sensor.on_committed_offset_missing("counts", 0)
    assert value(registry, "streamremat_retention_gap_offsets_total") == 1024
    assert value(registry, "streamremat_committed_offset_missing_total") == 1


def test_bad_input_and_window_hooks(sensor: PrometheusSensor, registry: CollectorRegistry) -> None:
    sensor.on_dead_letter("counts", 0, "DecodeError")
    sensor.on_dead_letter("counts", 0, "DecodeError")
    sensor.on_dead_letter("counts", 0, "MissingKey")
    sensor.on_late("counts", 0, 5)
    sensor.on_open_windows("counts", 0, 12, 340)
    assert value(registry, "streamremat_dead_letters_total", reason="DecodeError") == 2
    assert value(registry, "streamremat_dead_letters_total", reason="MissingKey") == 1
    assert value(registry, "streamremat_late_records_total") == 5
    assert value(registry, "streamremat_open_windows") == 12
    assert value(registry, "streamremat_open_keys") == 340


def test_tuner_hook(sensor: PrometheusSensor, registry: CollectorRegistry) -> None:
    exercise_every_hook(sensor)  # its decision: bound rto, interval 30 s, ...
    expected = {
        "streamremat_checkpoint_interval_seconds": 30.0,
        "streamremat_tuner_checkpoint_cost_seconds": 0.05,
        "streamremat_tuner_checkpoint_latency_seconds": 0.4,
        "streamremat_tuner_downtime_seconds": 6.0,
        "streamremat_tuner_ingest_rate_records_per_second": 1000.0,
        "streamremat_tuner_replay_rate_records_per_second": 20_000.0,
        "streamremat_tuner_replay_speedup_ratio": 20.0,
        "streamremat_tuner_failure_rate_per_second": 1 / 86_400,
        "streamremat_tuner_optimal_interval_seconds": 1859.0,
        "streamremat_tuner_rto_interval_seconds": 30.0,
        "streamremat_tuner_retention_interval_seconds": 86_000.0,
        "streamremat_predicted_recovery_seconds": 8.1,
        "streamremat_rto_seconds": 60.0,
        "streamremat_rto_infeasible": 0.0,
    }
    for name, want in expected.items():
        assert value(registry, name) == pytest.approx(want), name
    assert {b: value(registry, "streamremat_tuner_bound", bound=b) for b in BOUNDS} == {
        "optimum": 0, "rto": 1, "retention": 0, "min": 0, "max": 0, "fixed": 0,
    }  # fmt: skip
    # A later decision moves the bound; absent inputs keep their last value.
    sensor.on_tuner("counts", 0, {"bound": "min", "rto_infeasible": True, "interval_s": 5.0})
    assert value(registry, "streamremat_tuner_bound", bound="min") == 1
    assert value(registry, "streamremat_tuner_bound", bound="rto") == 0
    assert value(registry, "streamremat_rto_infeasible") == 1
    assert value(registry, "streamremat_checkpoint_interval_seconds") == 5.0
    assert value(registry, "streamremat_tuner_downtime_seconds") == 6.0


def _task_series(registry: CollectorRegistry, partition: str) -> set[tuple[str, str]]:
    return {
        (sample.name, str(sorted(sample.labels.items())))
        for family in registry.collect()
        for sample in family.samples
        if sample.labels.get("partition") == partition
    }


def test_revocation_removes_the_gauges_and_keeps_the_counters(
    sensor: PrometheusSensor, registry: CollectorRegistry
) -> None:
    """Gauges of a revoked task go (no stale lag or state elsewhere); its counters stay
    and continue if it comes back: a counter never goes back within a process."""
    exercise_every_hook(sensor, partition=0)
    exercise_every_hook(sensor, partition=1)
    kept = _task_series(registry, "1")
    before = _task_series(registry, "0")
    counted = value(registry, "streamremat_records_in_total")

    sensor.on_task_revoked("counts", 0)

    left = _task_series(registry, "0")
    assert left and left < before
    assert all(name.endswith(("_total", "_created")) for name, _ in left), left
    assert _task_series(registry, "1") == kept
    sensor.on_task_revoked("counts", 0)  # twice is harmless
    sensor.on_task_revoked("other", 9)  # never assigned: harmless
    sensor.on_records_in("counts", 0, 2)
    assert counted is not None
    assert value(registry, "streamremat_records_in_total") == counted + 2


def test_partition_state_is_one_hot_and_drives_ready(sensor: PrometheusSensor,
                                                     registry: CollectorRegistry) -> None:
    assert sensor.ready()[0] is False  # not joined yet
    sensor.on_loop(session_alive=True, joined=True)
    sensor.on_partition_state("counts", 0, "replaying")
    assert sensor.ready() == (False, "not ready: partition 0 replaying")
    sensor.on_partition_state("counts", 0, "live")
    states = {s: value(registry, "streamremat_partition_state", state=s)
              for s in ("restoring", "replaying", "live", "backoff", "fenced")}
    assert states == {"restoring": 0, "replaying": 0, "live": 1, "backoff": 0, "fenced": 0}
    assert sensor.ready() == (True, "ready: 1 partition(s) live")
    assert sensor.healthz() == (True, "ok")
    with pytest.raises(ValueError):
        sensor.on_partition_state("counts", 0, "sleeping")


def test_private_registry_has_process_metrics_and_is_served() -> None:
    sensor = PrometheusSensor(APP)
    exercise_every_hook(sensor)
    names = exported_sample_names(sensor.registry)
    assert "streamremat_records_in_total" in names
    assert "python_info" in names
    port = free_port_run(1)
    server, thread = sensor.serve(port, addr="127.0.0.1")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            body = response.read().decode()
    finally:
        server.shutdown()
        thread.join(timeout=5)
    assert (
        'streamremat_records_in_total{app="clicks",operator="counts",partition="0"} 500.0' in body
    )


def test_two_sensors_do_not_share_a_registry() -> None:
    PrometheusSensor("a").on_records_in("counts", 0, 1)
    PrometheusSensor("b").on_records_in("counts", 0, 1)  # no "Duplicated timeseries"


def test_exposition_passes_promtool_check_metrics(
    sensor: PrometheusSensor, registry: CollectorRegistry, promtool: str
) -> None:
    exercise_every_hook(sensor, partition=0)
    exercise_every_hook(sensor, partition=1)
    result = subprocess.run(
        [promtool, "check", "metrics"],
        input=generate_latest(registry),
        capture_output=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()


def test_metric_names_follow_the_conventions(
    sensor: PrometheusSensor, registry: CollectorRegistry
) -> None:
    exercise_every_hook(sensor)
    for family in registry.collect():
        assert family.name.startswith("streamremat_"), family.name
        if family.type == "counter":
            assert all(s.name.endswith(("_total", "_created")) for s in family.samples), family.name
        for sample in family.samples:
            assert not {"key", "offset"} & set(sample.labels), sample
    assert len(E2E_LATENCY_BUCKETS_S) < 20  # histogram series stay bounded


def _real_plan() -> Any:
    """A planner's plan (tuning/remat.py) with two groups recomputed and three stored,
    each by a different constraint: the RTO, retention, an unknown first offset."""
    from streamremat.tuning.remat import PlanInputs, WindowCandidate, plan

    inputs = PlanInputs(
        checkpoint_offset=100_000, byte_cost_s=1e-6, interval_s=60.0,
        failure_rate_per_s=1 / 3600, replay_rate_eps=50_000.0, replay_rate_low_eps=40_000.0,
        ingest_rate_eps=1_000.0, downtime_p90_s=10.0, worst_backlog_records=60_000.0,
        rto_s=12.0, safe_from_offset=50_000,
    )  # the RTO leaves (12 - 10) * 39_000 - 70_000 = 8_000 records of extra replay
    return plan(inputs, [
        WindowCandidate(1, 1_000_000, 99_000), WindowCandidate(2, 1_000_000, 95_000),
        WindowCandidate(3, 300, 60_000), WindowCandidate(4, 200, 40_000),
        WindowCandidate(5, 100, None),
    ])  # fmt: skip


def test_remat_plan_hook(sensor: PrometheusSensor, registry: CollectorRegistry) -> None:
    from streamremat.tuning.plan_summary import PlanSummary

    p = PlanSummary.of(_real_plan())
    sensor.on_remat_plan("counts", 0, p)
    assert value(registry, "streamremat_remat_window_groups", choice="store") == 3
    assert value(registry, "streamremat_remat_window_groups", choice="recompute") == 2
    assert value(registry, "streamremat_remat_stored_bytes") == 600
    assert value(registry, "streamremat_remat_saved_bytes_total") == 2_000_000
    assert value(registry, "streamremat_remat_extra_replay_records") == 5_000
    assert value(registry, "streamremat_remat_extra_replay_seconds") == pytest.approx(0.1)
    forced = {r: value(registry, "streamremat_remat_forced_stores", reason=r)
              for r in REMAT_FORCED_REASONS}  # fmt: skip
    assert forced == {"requested_store": 0, "unknown_offset": 1, "retention": 1, "rto": 1,
                      "no_replay_rate": 0}
    # The next checkpoint's plan replaces the gauges and adds to the bytes saved.
    sensor.on_remat_plan("counts", 0, p)
    assert value(registry, "streamremat_remat_window_groups", choice="store") == 3
    assert value(registry, "streamremat_remat_saved_bytes_total") == 4_000_000


def test_remat_reason_labels_are_the_planners_forcing_reasons() -> None:
    from streamremat.tuning.remat import FORCED

    assert set(REMAT_FORCED_REASONS) == {r.name.lower() for r in FORCED}
    from streamremat.tuning.plan_summary import PlanSummary
    from streamremat.tuning.remat import Reason

    with pytest.raises(ValueError, match="not one of"):
        forced_labels(PlanSummary(0, 0, 0, 0, 0, 0, 0, 0.0, {Reason.CHEAPER_TO_STORE: 1}))
