"""Simulator determinism, policies, and adaptive vs fixed where adaptation must win."""

from __future__ import annotations

import pytest

from streamremat.tuning import (
    AdaptiveInterval,
    FixedInterval,
    IntervalPolicy,
    Tuner,
    TunerConfig,
)
from streamremat.tuning.exceptions import TunerConfigError
from streamremat.tuning.simulate import SCENARIOS, adaptive_config, simulate

HOUR = 3600.0


def test_fixed_interval_policy() -> None:
    by_time = FixedInterval(seconds=60)
    assert not by_time.should_checkpoint(0, 10**9, 59.9)
    assert by_time.should_checkpoint(0, 0, 60.0)
    by_records = FixedInterval(records=1000)
    assert by_records.should_checkpoint(0, 1000, 0.1) and by_records.interval_s(0) == float("inf")
    with pytest.raises(TunerConfigError):
        FixedInterval()


def test_adaptive_policy_steps_once_per_checkpoint() -> None:
    policy = AdaptiveInterval(Tuner(TunerConfig(min_interval_s=5.0)))
    assert isinstance(policy, IntervalPolicy)
    assert policy.interval_s(0.0) == 5.0
    assert not policy.should_checkpoint(1.0, 0, 4.0)
    assert policy.should_checkpoint(5.0, 0, 5.0)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_same_seed_same_result(name: str) -> None:
    scenario = SCENARIOS[name](3 * HOUR)
    runs = [
        simulate(scenario, AdaptiveInterval(Tuner(adaptive_config(scenario))), seed=7)
        for _ in range(2)
    ]
    assert runs[0] == runs[1]
    assert runs[0].trace == runs[1].trace
    other = simulate(scenario, AdaptiveInterval(Tuner(adaptive_config(scenario))), seed=8)
    assert other != runs[0]


def test_fixed_policies_meet_the_same_failures() -> None:
    scenario = SCENARIOS["failure-shift"](6 * HOUR)
    a = simulate(scenario, FixedInterval(seconds=10), seed=3)
    b = simulate(scenario, FixedInterval(seconds=300), seed=3)
    assert a.failures == b.failures > 0
    assert a.checkpoint_s > 20 * b.checkpoint_s
    assert max(a.recovery_s) < max(b.recovery_s)


def test_adaptive_beats_fixed_when_state_grows() -> None:
    # C grows 40x: any fixed interval is wrong for most of the run; all meet the RTO.
    scenario = SCENARIOS["growing-state"](12 * HOUR)
    seeds = range(4)
    adaptive = [
        simulate(scenario, AdaptiveInterval(Tuner(adaptive_config(scenario))), s) for s in seeds
    ]
    for seconds in (60.0, 150.0):
        fixed = [simulate(scenario, FixedInterval(seconds=seconds), s) for s in seeds]
        assert sum(r.overhead_pct for r in adaptive) < sum(r.overhead_pct for r in fixed)


def test_adaptive_keeps_rto_where_a_long_fixed_interval_does_not() -> None:
    scenario = SCENARIOS["diurnal"](24 * HOUR)
    seeds = range(2)
    adaptive = [
        simulate(scenario, AdaptiveInterval(Tuner(adaptive_config(scenario))), s) for s in seeds
    ]
    fixed = [simulate(scenario, FixedInterval(seconds=300.0), s) for s in seeds]
    assert sum(r.rto_violations for r in adaptive) < sum(r.rto_violations for r in fixed)
    assert sum(r.overhead_pct for r in adaptive) < sum(r.overhead_pct for r in fixed)
