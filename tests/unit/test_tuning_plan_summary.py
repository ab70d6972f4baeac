"""The plan summary a checkpoint carries: what it counts, and its encoding."""

from __future__ import annotations

import math

import pytest

from streamremat.runtime.scheduling import decode_plan, encode_meta, with_plan
from streamremat.tuning.exceptions import TunerStateError
from streamremat.tuning.plan_summary import PlanSummary
from streamremat.tuning.remat import PlanInputs, Reason, Rematerialize, WindowCandidate, plan


def _inputs(mu: float | None) -> PlanInputs:
    return PlanInputs(
        checkpoint_offset=10_000, byte_cost_s=1e-6, interval_s=60.0, failure_rate_per_s=1e-4,
        replay_rate_eps=mu, replay_rate_low_eps=mu, ingest_rate_eps=10.0, downtime_p90_s=1.0,
        worst_backlog_records=100.0, rto_s=math.inf,
    )  # fmt: skip


def test_counts_follow_the_plan() -> None:
    cands = [WindowCandidate(1, 10_000, 9_000), WindowCandidate(2, 5, 100),
             WindowCandidate(3, 7, None)]  # fmt: skip
    s = PlanSummary.of(plan(_inputs(50_000.0), cands))
    assert (s.groups_stored, s.groups_recomputed) == (2, 1)
    assert (s.bytes_stored, s.bytes_saved) == (12, 10_000)
    assert (s.replay_from, s.extra_replay_records) == (9_000, 1_000)
    assert s.forced == {Reason.UNKNOWN_OFFSET: 1} and s.cheaper_to_store == 1
    stored = PlanSummary.of(plan(_inputs(50_000.0), cands, Rematerialize.STORE))
    assert stored.forced == {Reason.REQUESTED_STORE: 3} and stored.bytes_saved == 0


def test_encoding_round_trips_an_unmeasured_replay_rate() -> None:
    # mode recompute before mu is measured: the extra replay's seconds are +inf
    s = PlanSummary.of(plan(_inputs(None), [WindowCandidate(1, 100, 5_000)],
                            Rematerialize.RECOMPUTE))  # fmt: skip
    assert math.isinf(s.extra_replay_s)
    assert PlanSummary.from_bytes(s.to_bytes()) == s


def test_unreadable_summaries_are_errors_and_tune_skips_them() -> None:
    with pytest.raises(TunerStateError, match="plan summary"):
        PlanSummary.from_bytes(b'{"v": 99}')
    with pytest.raises(TunerStateError, match="unreadable"):
        PlanSummary.from_bytes(b"\xff")
    good = with_plan(encode_meta(1, b"tuner"), PlanSummary.of(plan(_inputs(1.0), [])))
    assert decode_plan(good) is not None
    assert decode_plan(good[:-3]) is None  # truncated: no plan, the tuner state still reads
