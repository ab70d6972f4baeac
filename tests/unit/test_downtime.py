"""The downtime D of a take-over comes from the previous owner's last sign of life
for that partition, with a fake clock: not from when this worker started."""

from __future__ import annotations

from streamremat.runtime.commit_meta import (
    CommitMeta,
    decode_commit_metadata,
    encode_commit_metadata,
)
from streamremat.runtime.scheduling import (
    PLAUSIBLE_DETECTIONS,
    CheckpointScheduler,
    downtime_sample,
)
from streamremat.runtime.settings import CheckpointSettings

SESSION_S, COMMIT_S, RESTORE_S = 10.0, 0.5, 0.4


def test_a_take_over_40_minutes_after_this_worker_started_measures_the_peers_gap() -> None:
    started = 1_800_000_000.0  # this worker's start: no input to D at all
    now = started + 40 * 60
    peer_last_commit = now - 11.5  # the peer crashed right after its last commit
    commit = decode_commit_metadata(encode_commit_metadata(
        CommitMeta({"sums": 5}, owner_epoch=3, at_ms=int(peer_last_commit * 1000))))
    assert commit.at_ms is not None
    d, measured = downtime_sample(now, commit.at_ms / 1000, RESTORE_S, SESSION_S, COMMIT_S)
    assert measured and abs(d - 11.5) < 0.01

    # The tuner stays feasible with it (RTO 120 s); with D = 40 min it would not.
    ck = CheckpointSettings(rto_s=120)
    for sample, feasible in ((d, True), (now - started, False)):
        scheduler = CheckpointScheduler(ck, SESSION_S)
        scheduler.restore(b"", True, now, None)
        scheduler.recovered(sample, 10_000, 1.0)
        decision = scheduler.decision(now + 1)
        assert decision.rto_infeasible is not feasible, (sample, decision.explain())


def test_implausible_or_unknown_signs_of_life_give_the_estimate() -> None:
    now = 1_800_000_000.0
    estimate = SESSION_S + RESTORE_S
    limit = PLAUSIBLE_DETECTIONS * (SESSION_S + COMMIT_S) + RESTORE_S
    cases = {
        "idle partition: last commit 40 min ago": now - 40 * 60,
        "previous owner's clock ahead of ours": now + 5,
        "just beyond the limit": now - limit - 0.1,
        "no commit metadata": None,
    }
    for why, last_alive in cases.items():
        assert downtime_sample(now, last_alive, RESTORE_S, SESSION_S, COMMIT_S) == (
            estimate, False), why
    d, measured = downtime_sample(now, now - limit + 0.1, RESTORE_S, SESSION_S, COMMIT_S)
    assert measured and abs(d - (limit - 0.1)) < 0.01


def test_commit_metadata_keeps_epoch_and_time_when_stream_times_do_not_fit() -> None:
    many = {f"operator-{i:04d}": 1_700_000_000_000 + i for i in range(200)}
    text = encode_commit_metadata(CommitMeta(many, owner_epoch=7, at_ms=123))
    assert len(text) < 4096
    assert decode_commit_metadata(text) == CommitMeta({}, 7, 123)
    small = CommitMeta({"a": 1}, 2, 5)
    assert decode_commit_metadata(encode_commit_metadata(small)) == small
    for foreign in ("", "not json", '{"v": 2, "ep": 1}', '{"v": 1, "ep": -1, "at": "x"}'):
        assert decode_commit_metadata(foreign).owner_epoch is None
