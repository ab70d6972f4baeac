"""Tuner: the interval rule, smoothing, infeasible RTO, estimators and persistence."""

from __future__ import annotations

import math

import pytest

from streamremat.tuning import Bound, Tuner, TunerConfig
from streamremat.tuning.exceptions import TunerConfigError, TunerStateError


def warm_tuner(config: TunerConfig, *, cost_s: float = 0.3, mu: float = 100_000.0) -> Tuner:
    """20k ev/s ingest, replay 5x faster, C = cost_s, L = 2 s, D = 10 s (exact samples)."""
    tuner = Tuner(config)
    tuner.observe_ingest(0.0, 0)
    for i in range(1, 31):
        tuner.observe_ingest(10.0 * i, 200_000)
    for _ in range(30):
        tuner.observe_checkpoint(300.0, cost_s, 2.0, 1000)
        tuner.observe_recovery(10.0, int(mu * 20), 20.0)
    return tuner


def test_decision_uses_the_formulas() -> None:
    cfg = TunerConfig(rto_s=120.0, prior_mtbf_s=14_400.0, max_interval_s=900.0)
    d = warm_tuner(cfg).decision(300.0)
    assert d.ingest_rate_eps == pytest.approx(20_000.0)
    assert d.sigma == pytest.approx(5.0)
    assert 10.0 <= d.downtime_p90_s < 12.0  # the 15 s prior has not quite faded
    lam = d.failure_rate_per_s
    assert d.t_optimum_s == pytest.approx(math.sqrt(2 * 5 * 0.3 / lam))
    assert d.t_rto_s == pytest.approx(4 * 120 - 5 * d.downtime_p90_s - d.durable_latency_p90_s)
    assert d.interval_s == d.target_s == min(d.t_optimum_s, d.t_rto_s)


def test_active_bound_reports_rto_min_max_and_retention() -> None:
    base = dict(prior_mtbf_s=14_400.0, max_interval_s=900.0)
    assert warm_tuner(TunerConfig(rto_s=60.0, **base)).decision(300).active_bound is Bound.RTO
    big = warm_tuner(TunerConfig(rto_s=3600.0, **base), cost_s=50.0).decision(300)
    assert big.active_bound is Bound.MAX and big.interval_s == 900.0
    tiny = warm_tuner(TunerConfig(rto_s=3600.0, min_interval_s=30, **base), cost_s=1e-4)
    assert tiny.decision(300).active_bound is Bound.MIN
    tuner = warm_tuner(TunerConfig(rto_s=3600.0, **base))
    tuner.set_retention(200.0)
    d = tuner.decision(300)
    assert d.active_bound is Bound.RETENTION and d.interval_s == pytest.approx(100.0)


def test_step_is_at_most_x2_and_deadband_holds() -> None:
    cfg = TunerConfig(rto_s=3600.0, prior_mtbf_s=14_400.0, max_interval_s=900.0)
    tuner = Tuner(cfg)
    assert tuner.next_interval(0.0) == cfg.min_interval_s  # nothing measured: C = 0
    tuner = warm_tuner(cfg)
    tuner._interval_s = 20.0  # as if it had been running with a much shorter interval
    steps = [tuner.next_interval(300.0) for _ in range(6)]
    assert steps[:3] == [40.0, 80.0, 160.0]
    target = tuner.decision(300.0).target_s
    assert steps[-1] == pytest.approx(target)
    tuner._interval_s = target * 1.05  # inside the 10 % deadband: keep it
    assert tuner.next_interval(300.0) == pytest.approx(target * 1.05)
    tuner._interval_s = target * 4  # above T*, not a hard bound: halve at most
    assert tuner.next_interval(300.0) == pytest.approx(target * 2)


def test_hard_bound_overrides_step_limit_and_deadband() -> None:
    cfg = TunerConfig(rto_s=60.0, prior_mtbf_s=14_400.0, max_interval_s=900.0)
    tuner = warm_tuner(cfg)
    t_rto = tuner.decision(300.0).t_rto_s
    tuner._interval_s = 800.0
    assert tuner.next_interval(300.0) == pytest.approx(t_rto)
    tuner._interval_s = t_rto * 1.05
    assert tuner.next_interval(300.0) == pytest.approx(t_rto)


def test_infeasible_rto_is_signalled() -> None:
    cfg = TunerConfig(rto_s=15.0, min_interval_s=10.0, prior_mtbf_s=14_400.0)
    d = warm_tuner(cfg).decision(300.0)
    assert d.rto_infeasible and d.t_rto_s < cfg.min_interval_s
    assert d.interval_s == cfg.min_interval_s
    assert d.infeasible_reason is not None and "--rto-seconds" in d.infeasible_reason
    slow = warm_tuner(TunerConfig(rto_s=300.0), mu=15_000.0).decision(300.0)
    assert slow.rto_infeasible and "sigma" in (slow.infeasible_reason or "")
    assert slow.predicted_recovery_s == math.inf
    fine = warm_tuner(TunerConfig(rto_s=300.0)).decision(300.0)
    assert not fine.rto_infeasible and fine.infeasible_reason is None


def test_predicted_recovery_is_what_a_replay_reads() -> None:
    tuner = warm_tuner(TunerConfig(rto_s=120.0))
    tuner.observe_checkpoint(1000.0, 0.3, 2.0)  # offset fixed at 998
    d = tuner.decision(1100.0, backlog_records=300_000)
    assert d.checkpoint_age_s == pytest.approx(102.0)
    r, mu, dt = d.ingest_rate_eps, d.replay_rate_eps, d.downtime_s
    assert mu is not None
    # By hand: the backlog plus what arrives during the downtime, gained on at mu - r.
    assert d.predicted_recovery_s == pytest.approx(dt + (300_000 + r * dt) / (mu - r))
    # The age no longer counts as backlog: a checkpoint at the source's end is cheap.
    at_end = tuner.decision(1100.0, backlog_records=0)
    assert at_end.predicted_recovery_s == pytest.approx(dt + r * dt / (mu - r))
    # Without a backlog figure (the simulator), r * age stands in for it.
    legacy = tuner.decision(1100.0)
    assert legacy.backlog_records == pytest.approx(r * 102.0)


@pytest.mark.parametrize("backlog", [0, 1_000, 300_000, 5_000_000])
@pytest.mark.parametrize("age", [0.0, 30.0, 5_000.0])
@pytest.mark.parametrize("fixed", [None, 30.0])
def test_worst_case_bounds_the_prediction(backlog: int, age: float, fixed: float | None) -> None:
    tuner = warm_tuner(TunerConfig(rto_s=120.0))
    tuner.observe_recovery(25.0, 2_000_000, 40.0)  # D and mu now vary: p90 != mean
    d = tuner.decision(1000.0, backlog, checkpoint_age_s=age, fixed_interval_s=fixed)
    assert d.predicted_recovery_s is not None and d.worst_case_recovery_s is not None
    assert d.worst_case_recovery_s >= d.predicted_recovery_s
    assert d.worst_backlog_records is not None and d.worst_backlog_records >= backlog


def test_idle_source_recovers_in_the_downtime() -> None:
    tuner = Tuner(TunerConfig(rto_s=120.0))
    tuner.observe_ingest(0.0, 0)
    tuner.observe_ingest(60.0, 0)  # r measured: 0/s
    tuner.observe_recovery(4.0, 10_000, 1.0)
    d = tuner.decision(100.0, backlog_records=0, checkpoint_age_s=3826.0)
    assert d.ingest_rate_eps == 0
    assert d.predicted_recovery_s == pytest.approx(d.downtime_s)
    assert d.worst_case_recovery_s == pytest.approx(d.downtime_p90_s)
    assert d.worst_case_recovery_s >= d.predicted_recovery_s
    assert not d.rto_infeasible


def test_fixed_policy_is_reported_as_fixed() -> None:
    tuner = warm_tuner(TunerConfig(rto_s=120.0))
    adaptive = tuner.decision(300.0, 0)
    d = tuner.decision(300.0, 0, fixed_interval_s=30.0)
    assert d.policy == "fixed" and d.interval_s == 30.0 and d.active_bound is Bound.FIXED
    assert d.tuned_interval_s == adaptive.interval_s
    assert d.tuned_bound is adaptive.active_bound
    text = d.explain()
    assert text.startswith("policy fixed: checkpoint every 30s; the adaptive policy would")
    assert "policy adaptive" in adaptive.explain()
    records = tuner.decision(300.0, 0, checkpoint_age_s=0.0, fixed_records=1_000)
    assert records.interval_s == math.inf and "every 1,000 records" in records.explain()
    # The worst case follows the fixed schedule: 1k records, not r * T.
    assert records.worst_backlog_records == pytest.approx(1_000 + 20_000 * 2.0)


def _feasible(cfg: TunerConfig) -> bool:
    return not warm_tuner(cfg).decision(300.0).rto_infeasible


def test_infeasible_rto_advice_can_work() -> None:
    base = dict(prior_mtbf_s=14_400.0)
    # T_rto < 0: no interval meets a 10 s RTO; lowering --min-interval cannot help.
    d = warm_tuner(TunerConfig(rto_s=10.0, **base)).decision(300.0)
    assert d.rto_infeasible and d.t_rto_s < 0
    reason = d.infeasible_reason or ""
    assert "--min-interval to" not in reason and "no interval could meet it" in reason
    need = float(reason.split("raise --rto-seconds to >= ")[1].split(",")[0])
    assert _feasible(TunerConfig(rto_s=need, **base))
    # 0 < T_rto < T_min: both pieces of advice work.
    d = warm_tuner(TunerConfig(rto_s=20.0, min_interval_s=30.0, **base)).decision(300.0)
    assert d.rto_infeasible and 0 < d.t_rto_s < 30.0
    reason = d.infeasible_reason or ""
    need = float(reason.split("raise --rto-seconds to >= ")[1].split(",")[0])
    lower = float(reason.split("--min-interval to <= ")[1].rstrip("s"))
    assert _feasible(TunerConfig(rto_s=need, min_interval_s=30.0, **base))
    assert _feasible(TunerConfig(rto_s=20.0, min_interval_s=lower, **base))


def test_explain_names_each_sigma() -> None:
    tuner = warm_tuner(TunerConfig(rto_s=120.0))
    tuner.observe_recovery(10.0, 1_000_000, 20.0)  # a slower replay: mu varies
    d = tuner.decision(300.0, 0)
    text = d.explain()
    assert f"sigma mu/r {d.sigma:.2f} (for T*)" in text
    assert f"conservative sigma mu_low/r {d.sigma_rto:.2f} (for T_rto" in text
    assert d.sigma_rto < d.sigma


def test_failure_rate_follows_a_shift() -> None:
    cfg = TunerConfig(prior_mtbf_s=6 * 3600.0)
    tuner = Tuner(cfg)
    tuner.observe_ingest(0.0, 0)
    hour = 3600.0
    quiet = tuner.decision(12 * hour).failure_rate_per_s
    tuner.observe_ingest(12 * hour, 0)
    assert 1 / quiet > 6 * hour  # 12 h without failures: MTBF above the prior
    for i in range(1, 13):  # then one failure every 30 min for 6 h
        tuner.observe_failure(12 * hour + i * 1800.0)
    busy = tuner.decision(18 * hour).failure_rate_per_s
    assert 1 / busy < 1.2 * hour
    for h in range(19, 49):  # quiet again for 30 h
        tuner.observe_ingest(h * hour, 0)
    assert 1 / tuner.decision(48 * hour).failure_rate_per_s > 4 * hour


def test_round_trip_keeps_estimates_and_failure_count() -> None:
    cfg = TunerConfig(rto_s=120.0)
    tuner = warm_tuner(cfg)
    tuner.observe_failure(400.0)
    tuner.observe_backlog(50_000, 0.5)
    tuner.next_interval(400.0)
    data = tuner.to_bytes()
    assert len(data) < 600
    again = Tuner.from_bytes(data, cfg)
    a, b = tuner.decision(500.0), again.decision(500.0)
    for field in (
        "checkpoint_cost_s",
        "downtime_p90_s",
        "replay_rate_eps",
        "failure_rate_per_s",
        "failures_observed",
        "interval_s",
        "ingest_rate_eps",
    ):
        assert getattr(a, field) == pytest.approx(getattr(b, field)), field
    assert again.current_interval_s == tuner.current_interval_s
    assert again.to_bytes() == data


def test_bad_state_and_config_have_clear_errors() -> None:
    with pytest.raises(TunerStateError, match="fresh Tuner"):
        Tuner.from_bytes(b"not json", TunerConfig())
    with pytest.raises(TunerStateError, match="version 99"):
        Tuner.from_bytes(b'{"v":99}', TunerConfig())
    with pytest.raises(TunerConfigError, match="--min-interval"):
        TunerConfig(min_interval_s=100.0, max_interval_s=10.0)


def test_explain_says_when_rates_are_not_measured() -> None:
    tuner = Tuner(TunerConfig(rto_s=120.0))
    tuner.observe_recovery(4.0, 10_000, 1.0)  # mu measured, r not yet
    text = tuner.decision(10.0, 0).explain()
    assert "r not measured yet" in text
    assert "sigma 2.00 (prior, until r and mu are measured)" in text
    assert "sigma mu/r" not in text
