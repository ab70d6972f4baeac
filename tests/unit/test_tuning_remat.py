"""The rematerialization planner: optimal against brute force, constraints that
force a store (retention incl. a repartition topic, the RTO, unknown offsets),
the per-operator modes, determinism."""

from __future__ import annotations

import itertools
import math
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamremat.tuning import Tuner, TunerConfig
from streamremat.tuning.model import recovery_from_backlog
from streamremat.tuning.remat import (
    PlanInputs,
    Reason,
    Rematerialize,
    WindowCandidate,
    max_extra_replay,
    plan,
    plan_inputs,
)

C = 100_000


def _inputs(**kw: Any) -> PlanInputs:
    base: dict[str, Any] = dict(
        checkpoint_offset=C, byte_cost_s=1e-6, interval_s=60.0, failure_rate_per_s=1 / 3600,
        replay_rate_eps=50_000.0, replay_rate_low_eps=40_000.0, ingest_rate_eps=1_000.0,
        downtime_p90_s=10.0, worst_backlog_records=60_000.0, rto_s=math.inf,
    )
    base.update(kw)
    return PlanInputs(**base)


def _brute_force(inputs: PlanInputs, groups: list[WindowCandidate]) -> float:
    """Cheapest expected waste over every subset allowed to be recomputed."""
    per_byte = inputs.byte_cost_s / inputs.interval_s
    budget = max_extra_replay(inputs)
    allowed = [
        g for g in groups
        if g.first_offset is not None
        and (inputs.safe_from_offset is None or g.first_offset >= inputs.safe_from_offset)
        and inputs.checkpoint_offset - g.first_offset <= budget
    ]
    best = math.inf
    for n in range(len(allowed) + 1):
        for subset in itertools.combinations(allowed, n):
            stored = sum(g.encoded_bytes for g in groups if g not in subset)
            o_min = min([inputs.checkpoint_offset] + [g.first_offset or 0 for g in subset])
            assert inputs.replay_rate_eps is not None
            extra = inputs.failure_rate_per_s * (inputs.checkpoint_offset - o_min)
            best = min(best, stored * per_byte + extra / inputs.replay_rate_eps)
    return best


candidates = st.lists(
    st.builds(WindowCandidate, group=st.integers(0, 20), encoded_bytes=st.integers(0, 10**7),
              first_offset=st.one_of(st.none(), st.integers(0, C))),
    max_size=8,
)


@settings(max_examples=300, deadline=None)
@given(
    groups=candidates,
    lam=st.floats(1e-6, 1e-1),
    rto=st.one_of(st.just(math.inf), st.floats(10.0, 60.0)),
    safe=st.one_of(st.none(), st.integers(0, C)),
)
def test_plan_is_the_cheapest_allowed(
    groups: list[WindowCandidate], lam: float, rto: float, safe: int | None
) -> None:
    inputs = _inputs(failure_rate_per_s=lam, rto_s=rto, safe_from_offset=safe)
    got = plan(inputs, groups)
    merged = {g.group: g for g in got.groups}
    assert sorted(merged) == sorted({g.group for g in groups})
    as_candidates = [WindowCandidate(g.group, g.encoded_bytes, g.first_offset)
                     for g in got.groups]
    assert got.plan_cost == pytest.approx(_brute_force(inputs, as_candidates), rel=1e-9)
    assert got.plan_cost <= got.store_all_cost
    recomputed = [g for g in got.groups if not g.store]
    for g in recomputed:  # never a recompute that replay could not do
        assert g.first_offset is not None
        assert safe is None or g.first_offset >= safe
    assert got.replay_from == min([C] + [g.first_offset or 0 for g in recomputed])
    assert got.bytes_saved == sum(g.encoded_bytes for g in recomputed)
    # Deterministic, whatever order the candidates come in.
    shuffled = list(groups)
    random.Random(len(groups)).shuffle(shuffled)
    assert plan(inputs, shuffled) == got


def test_cost_decides_between_bytes_and_replay() -> None:
    # 50 MB per checkpoint at 1 us/byte every 60 s: 0.83 s of capacity per second
    # lost to storing; a failure a day replays 50k records: 1 s per day.
    big = [WindowCandidate(1, 50_000_000, C - 50_000)]
    assert plan(_inputs(failure_rate_per_s=1 / 86_400), big).recompute == {1}
    # A failure a minute, and a tiny window: storing wins.
    small = [WindowCandidate(1, 100, C - 50_000)]
    p = plan(_inputs(failure_rate_per_s=1 / 60), small)
    assert p.recompute == frozenset() and p.groups[0].reason is Reason.CHEAPER_TO_STORE
    assert p.replay_from == C and p.extra_replay_records == 0


def test_retention_of_the_repartition_topic_forces_a_store() -> None:
    """The operator re-keys, so replay reads its repartition topic; that topic keeps
    less than the window needs: store, although recomputing would be far cheaper."""
    groups = [WindowCandidate(10, 10**8, 20_000), WindowCandidate(20, 10**8, 90_000)]
    inputs = _inputs(failure_rate_per_s=1e-9, safe_from_offset=50_000,
                     replay_topic="app-op-repartition")
    p = plan(inputs, groups)
    by = {g.group: g for g in p.groups}
    assert by[10].store and by[10].reason is Reason.RETENTION
    assert not by[20].store
    assert p.replay_from == 90_000 >= inputs.safe_from_offset  # type: ignore[operator]
    # Forced even when the operator asks for recompute: correctness first.
    forced = plan(inputs, groups, Rematerialize.RECOMPUTE)
    assert {g.group: g.reason for g in forced.groups} == {
        10: Reason.RETENTION, 20: Reason.REQUESTED_RECOMPUTE}


def test_rto_forces_a_store() -> None:
    """RTO 30 s: D_p90 10 s leaves 20 s; at mu_low - r = 39k/s that is 780k records,
    minus the 60k worst backlog and 10k arriving during D: 710k of extra replay."""
    inputs = _inputs(rto_s=30.0, checkpoint_offset=2_000_000, failure_rate_per_s=1e-9)
    assert max_extra_replay(inputs) == pytest.approx(710_000)
    groups = [WindowCandidate(1, 10**8, 2_000_000 - 800_000),  # too far back
              WindowCandidate(2, 10**8, 2_000_000 - 700_000)]
    p = plan(inputs, groups)
    by = {g.group: g for g in p.groups}
    assert by[1].store and by[1].reason is Reason.RTO
    assert not by[2].store
    worst = recovery_from_backlog(10.0, 60_000 + p.extra_replay_records, 1_000.0, 40_000.0)
    assert worst <= 30.0
    assert p.forced() == {Reason.RTO: 1}


def test_unknown_offset_and_modes() -> None:
    groups = [WindowCandidate(1, 10**8, None), WindowCandidate(2, 10**8, 1_000),
              WindowCandidate(2, 5, 900)]  # two windows with one close time
    p = plan(_inputs(failure_rate_per_s=1e-9), groups)
    by = {g.group: g for g in p.groups}
    assert by[1].store and by[1].reason is Reason.UNKNOWN_OFFSET
    assert not by[2].store and by[2].first_offset == 900 and by[2].encoded_bytes == 10**8 + 5
    stored = plan(_inputs(failure_rate_per_s=1e-9), groups, Rematerialize.STORE)
    assert all(g.store and g.reason is Reason.REQUESTED_STORE for g in stored.groups)
    assert stored.replay_from == C and stored.bytes_saved == 0
    unmeasured = plan(_inputs(replay_rate_eps=None, replay_rate_low_eps=None), groups)
    assert unmeasured.recompute == frozenset()
    assert unmeasured.forced() == {Reason.UNKNOWN_OFFSET: 1, Reason.NO_REPLAY_RATE: 1}


def test_inputs_from_the_tuner() -> None:
    """The tuner measures the cost of a checkpoint byte; the plan uses its figures,
    and the measurement survives the tuner's round trip through a checkpoint."""
    config = TunerConfig(rto_s=60.0)
    tuner = Tuner(config)
    tuner.observe_ingest(0.0, 0)
    for i in range(1, 31):
        tuner.observe_ingest(10.0 * i, 10_000)  # 1k/s
        tuner.observe_checkpoint(10.0 * i, 0.2, 0.5, 2_000_000)  # 0.1 us per byte
        tuner.observe_recovery(5.0, 200_000, 4.0)  # mu 50k/s
    d = Tuner.from_bytes(tuner.to_bytes(), config).decision(300.0, 0)
    assert d.byte_cost_s == pytest.approx(1e-7)
    inputs = plan_inputs(d, 10_000_000, safe_from_offset=10, replay_topic="src")
    assert inputs.byte_cost_s == pytest.approx(1e-7)
    assert inputs.replay_rate_eps == pytest.approx(50_000)
    assert inputs.worst_backlog_records == pytest.approx(1_000 * (d.interval_s + 0.5))
    assert (inputs.rto_s, inputs.safe_from_offset, inputs.replay_topic) == (60.0, 10, "src")
    # The RTO leaves room for (60 - 5) * 49k - backlog - 5k records of extra replay.
    budget = max_extra_replay(inputs)
    groups = [WindowCandidate(1, 10**9, 10_000_000 - int(budget) - 1),
              WindowCandidate(2, 10**9, 10_000_000 - int(budget) + 1)]
    p = plan(inputs, groups)
    assert [(g.group, g.store, g.reason) for g in p.groups] == [
        (1, True, Reason.RTO), (2, False, Reason.CHEAPER_TO_RECOMPUTE)]
