"""The shared chain rule: which checkpoint restores, and what prune may delete."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamremat.state import CheckpointFrame, FrameKind, TaskId
from streamremat.state.chain import StoredEntry, plan_prune, select_restore_point

TASK = TaskId("op", "src", 0)


def build(pattern: str) -> list[StoredEntry]:
    """``"F D D x F D"``: seqs 1.. as FULL, DELTA, or x = unreadable."""
    entries = []
    base = 0
    for seq, kind in enumerate(pattern.split(), start=1):
        if kind == "x":
            entries.append(StoredEntry(seq, None, "checksum mismatch"))
            continue
        full = kind == "F"
        base = seq if full else base
        frame = CheckpointFrame(
            task=TASK,
            seq=seq,
            kind=FrameKind.FULL if full else FrameKind.DELTA,
            base_seq=base,
            offset=seq * 100,
            stream_time_ms=seq,
            clean=False,
            meta=b"",
            payload=b"%d" % seq,
        )
        entries.append(StoredEntry(seq, frame))
    return entries


def chain_seqs(pattern: str) -> list[int] | None:
    point = select_restore_point(TASK, build(pattern))
    return None if point is None else [f.seq for f in point.chain]


@pytest.mark.parametrize(
    ("pattern", "chain"),
    [
        ("F", [1]),
        ("F D D", [1, 2, 3]),
        ("F D F D", [3, 4]),
        ("F D x", [1, 2]),
        ("F D x D", [1, 2]),
        ("F D x D F", [5]),
        ("F D F x", [3]),
        ("F D x D D", [1, 2]),
        ("x", None),
        ("x D D", None),
        ("D D", None),
    ],
)
def test_newest_restorable_chain_is_chosen(pattern: str, chain: list[int] | None) -> None:
    assert chain_seqs(pattern) == chain


def test_corrupt_full_falls_back_to_previous_chain_and_reports_each_skipped_frame() -> None:
    point = select_restore_point(TASK, build("F D x D D"))
    assert point is not None
    assert [f.seq for f in point.chain] == [1, 2]
    assert len(point.fallbacks) == 3
    assert "seq 3: checksum mismatch" in point.fallbacks[0]
    assert point.next_seq == 6
    assert point.offset == 200


def test_missing_delta_breaks_the_chain() -> None:
    entries = [e for e in build("F D D D") if e.seq != 3]
    point = select_restore_point(TASK, entries)
    assert point is not None and point.seq == 2
    assert "missing delta" in point.fallbacks[0]


@pytest.mark.parametrize(
    ("pattern", "keep", "deleted"),
    [
        ("F D F D D", 1, [1, 2]),
        ("F D F D D", 3, [1, 2]),
        ("F D F D D", 4, []),
        ("F D D F", 1, [1, 2, 3]),
        ("F D F x", 1, [1, 2]),
        ("x x", 1, []),
    ],
)
def test_prune_plan(pattern: str, keep: int, deleted: list[int]) -> None:
    assert plan_prune(build(pattern), keep) == deleted


def test_prune_refuses_keep_zero() -> None:
    with pytest.raises(ValueError, match="keep"):
        plan_prune(build("F"), 0)


@given(
    pattern=st.lists(st.sampled_from("FDx"), min_size=1, max_size=20).map(" ".join),
    keep=st.integers(1, 5),
)
def test_prune_keeps_the_newest_restorable_checkpoints(pattern: str, keep: int) -> None:
    entries = build(pattern)
    before = select_restore_point(TASK, entries)
    doomed = set(plan_prune(entries, keep))
    kept = [e for e in entries if e.seq not in doomed]
    after = select_restore_point(TASK, kept)
    assert (before is None) == (after is None)
    if before is not None and after is not None:
        assert before.chain == after.chain
    # each of the `keep` newest restorable seqs still restores, as its own newest
    restorable = [
        e.seq
        for e in entries
        if (p := select_restore_point(TASK, [x for x in entries if x.seq <= e.seq])) is not None
        and p.seq == e.seq
    ]
    for seq in restorable[-keep:]:
        point = select_restore_point(TASK, [e for e in kept if e.seq <= seq])
        assert point is not None and point.seq == seq
