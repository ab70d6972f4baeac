"""``streamremat tune``'s reading of a stored checkpoint (no Kafka: the task part)."""

from __future__ import annotations

import pytest

from streamremat.runtime.explain import explain_task
from streamremat.runtime.scheduling import CheckpointScheduler
from streamremat.runtime.settings import CheckpointSettings
from streamremat.tuning import Bound
from streamremat.tuning.report import describe

WEEK_S = 7 * 86_400.0


def _meta_of_a_live_worker(settings: CheckpointSettings, wall_s: float) -> bytes:
    """The checkpoint meta a worker writes after a minute at 1,000 records/s."""
    worker = CheckpointScheduler(settings, detect_s=10.0)
    worker.restore(b"", False, wall_s - 60, WEEK_S)
    worker.source_grew(wall_s - 60, 0)
    for i in range(1, 61):
        worker.source_grew(wall_s - 60 + i, 1_000)
    worker.recovered(3.0, 200_000, 4.0)  # mu 50k/s
    worker.recovered(5.0, 200_000, 5.0)  # mu 40k/s: the estimates have a spread
    worker.checkpointed(wall_s, 0.02, 0.3, 4_096)
    return worker.meta(int(wall_s * 1000))


def test_stopped_app_predicts_the_downtime_not_the_age() -> None:
    """A worker that stopped cleanly an hour ago at the source's end (issue 14 item 5)."""
    settings = CheckpointSettings(policy="adaptive", rto_s=120.0)
    wall = 1_800_000_000.0
    meta = _meta_of_a_live_worker(settings, wall)
    age, d = explain_task(
        CheckpointScheduler(settings, 10.0), meta, 50_169, 50_169, WEEK_S, wall + 3826.2
    )
    assert age == pytest.approx(3826.2) and d is not None
    assert d.backlog_records == 0
    assert d.ingest_rate_eps == pytest.approx(0.0, abs=1e-6)  # nothing arrived since
    assert d.predicted_recovery_s == pytest.approx(d.downtime_s, rel=1e-6)
    assert d.worst_case_recovery_s is not None
    assert d.worst_case_recovery_s >= d.predicted_recovery_s
    # The worker logs T_ret from the same retention: half of it.
    assert d.t_retention_s == pytest.approx(WEEK_S / 2)


def test_live_app_predicts_from_the_backlog() -> None:
    settings = CheckpointSettings(policy="adaptive", rto_s=120.0)
    wall = 1_800_000_000.0
    meta = _meta_of_a_live_worker(settings, wall)
    # 4 s later, 4,000 records arrived behind the checkpoint.
    _, d = explain_task(CheckpointScheduler(settings, 10.0), meta, 50_000, 54_000, WEEK_S,
                        wall + 4.0)
    assert d is not None and d.replay_rate_eps is not None
    r, mu, dt = d.ingest_rate_eps, d.replay_rate_eps, d.downtime_s
    assert r == pytest.approx(1_000, rel=0.01)
    assert d.predicted_recovery_s == pytest.approx(dt + (4_000 + r * dt) / (mu - r))
    assert d.worst_case_recovery_s is not None
    assert d.worst_case_recovery_s > d.predicted_recovery_s


def test_fixed_policy_flags_are_reported_as_fixed() -> None:
    adaptive = CheckpointSettings(policy="adaptive")
    fixed = CheckpointSettings(policy="fixed", interval_s=30.0)
    wall = 1_800_000_000.0
    meta = _meta_of_a_live_worker(adaptive, wall)
    _, d = explain_task(CheckpointScheduler(fixed, 10.0), meta, 10, 10, None, wall + 1)
    assert d is not None
    assert d.policy == "fixed" and d.interval_s == 30.0 and d.active_bound is Bound.FIXED
    assert describe(d)[0].startswith("policy fixed: checkpoint every 30s")


def test_tune_and_the_worker_log_say_the_same() -> None:
    settings = CheckpointSettings(policy="adaptive", rto_s=10.0)
    wall = 1_800_000_000.0
    meta = _meta_of_a_live_worker(settings, wall)
    _, d = explain_task(CheckpointScheduler(settings, 10.0), meta, 10, 10, None, wall + 1)
    assert d is not None and d.rto_infeasible
    lines = describe(d)
    assert d.explain() == " | ".join(lines)
    assert lines[-1].startswith("RTO INFEASIBLE: --rto-seconds 10 is below")
    assert "lower --min-interval" not in lines[-1]  # T_rto < 0: it could not help


def test_checkpoint_without_tuner_state() -> None:
    age, d = explain_task(CheckpointScheduler(CheckpointSettings(), 10.0), b"", 5, 9, None, 1.0)
    assert age is None and d is None


def test_only_failures_are_downtime_samples() -> None:
    """D is the downtime per failure: a clean start restores in milliseconds, and
    counting it would make every predicted recovery far shorter than a failover."""
    clean = CheckpointScheduler(CheckpointSettings(), detect_s=10.0)
    clean.restore(b"", False, 0.0, None)
    clean.recovered(0.05, 10_000, 0.1)
    assert clean.decision(1.0, 0.0, 0).downtime_s == pytest.approx(12.0)  # the prior
    crashed = CheckpointScheduler(CheckpointSettings(), detect_s=10.0)
    crashed.restore(b"", True, 0.0, None)
    crashed.recovered(4.0, 10_000, 0.1)
    assert crashed.decision(1.0, 0.0, 0).downtime_s == pytest.approx((12.0 + 4.0) / 2)


def test_plan_travels_in_the_meta_and_tune_says_what_the_worker_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The worker's tuner log line and ``tune`` give one plan the same sentence."""
    import logging

    from prometheus_client import CollectorRegistry

    from streamremat.metrics.prometheus import PrometheusSensor
    from streamremat.runtime.explain import TaskExplanation, format_explanations
    from streamremat.runtime.scheduling import decode_meta, decode_plan, with_plan
    from streamremat.runtime.tuner_feed import TunerFeed
    from streamremat.state.frame import TaskId
    from streamremat.tuning.plan_summary import PlanSummary
    from tests.unit.test_metrics_prometheus import _real_plan

    settings = CheckpointSettings(policy="adaptive", rto_s=120.0)
    wall = 1_800_000_000.0
    meta = _meta_of_a_live_worker(settings, wall)
    plan = _real_plan()
    summary = PlanSummary.of(plan)
    with_it = with_plan(meta, summary)
    assert decode_meta(with_it) == decode_meta(meta)  # the tuner state reads as before
    assert decode_plan(with_it) == summary and decode_plan(meta) is None
    assert with_plan(b"", summary) == b""  # foreign meta stays as it is

    registry = CollectorRegistry()
    feed = TunerFeed(CheckpointScheduler(settings, 10.0))
    with caplog.at_level(logging.INFO, logger="streamremat.worker"):
        feed.checkpoint_written("quotes[0]", 100_000, 0, {"q": plan},
                                PrometheusSensor("app", registry=registry), 0)
    (logged,) = [r.getMessage() for r in caplog.records if "tuner:" in r.getMessage()]
    labels = {"app": "app", "operator": "q", "partition": "0"}
    assert registry.get_sample_value("streamremat_remat_saved_bytes_total", labels) == 2_000_000

    _, d = explain_task(CheckpointScheduler(settings, 10.0), with_it, 100_000, 100_000,
                        WEEK_S, wall + 1)
    row = TaskExplanation(TaskId("q", "quotes", 0), 100_000, 1.0, "rocksdb", d, 100_000,
                          decode_plan(with_it))
    (said,) = [ln.strip() for ln in format_explanations([row]).splitlines()
               if "rematerialize q:" in ln]  # fmt: skip
    assert said in logged.split(" | ")
    for words in ("recompute 2", "1.9 MiB saved", "5,000 extra records from offset 95,000",
                  "(0.1s)", "1 extra replay would exceed the RTO",
                  "1 first offset outside retention", "1 first offset unknown"):
        assert words in said, (words, said)
