"""A closing resumed after a marker emits exactly the windows after it.

The windows of one operator's closings (results and failed ones) are cut at
any point by one owner, whose marker the next owner starts from; it sees the
same windows again in slices of other sizes. What the two send together must
be every window once, in order: checked against the list itself, not the code.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamremat.core.closing import FixedSlice
from streamremat.core.records import FailedResult, WindowResult
from streamremat.runtime.closing_progress import ClosingProgress
from streamremat.runtime.commit_meta import (
    CommitMeta,
    decode_commit_metadata,
    encode_commit_metadata,
)

#: windows: (end, start, key, failed?) in the closing order
Window = tuple[int, int, bytes, bool]


@st.composite
def closings(draw: st.DrawFn) -> list[Window]:
    groups = draw(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 3),
                                     st.integers(1, 8)), min_size=1, max_size=6))
    out: list[Window] = []
    for end, start, keys in sorted(set((e * 10, e * 10 - s, k) for e, s, k in groups)):
        if out and out[-1][:2] == (end, start):
            continue
        for k in range(keys):
            out.append((end, start, b"k%02d" % k, draw(st.booleans())))
    return out


def listed_pieces(windows: list[Window], size: int) -> list[tuple[list[WindowResult],
                                                                  list[FailedResult]]]:
    pieces = []
    for i in range(0, len(windows), size):
        part = windows[i:i + size]
        pieces.append(([WindowResult(k, s, e, 1) for e, s, k, bad in part if not bad],
                       [FailedResult(k, s, e, "result", "x") for e, s, k, bad in part if bad]))
    return pieces


def send(progress: ClosingProgress, windows: list[Window], size: int,
         limit: int | None = None) -> list[tuple[int, int, bytes]]:
    """What one owner sends of ``windows`` in slices of ``size``; ``limit``: it is
    lost after that many slices."""
    sent: list[tuple[int, int, bytes]] = []
    for n, (results, failed) in enumerate(listed_pieces(windows, size)):
        if limit is not None and n == limit:
            break
        kept, kept_failed = progress.listed("op", results, failed)
        sent.extend(sorted([(r.end_ms, r.start_ms, r.key) for r in kept]
                           + [(f.end_ms, f.start_ms, f.key) for f in kept_failed]))
    return sent


@settings(max_examples=300, deadline=None)
@given(closings(), st.integers(1, 5), st.integers(1, 5), st.integers(0, 10))
def test_a_resumed_closing_sends_each_window_once(windows: list[Window], first: int,
                                                  second: int, cut: int) -> None:
    one = ClosingProgress()
    before = send(one, windows, first, limit=cut)
    two = ClosingProgress()
    two.resume(dict(one.markers))
    after = send(two, windows, second)
    assert before + after == [w[:3] for w in windows]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 7), min_size=1, max_size=5), st.integers(1, 6),
       st.integers(0, 8))
def test_a_resumed_fixed_closing_sends_each_window_once(sizes: list[int], second: int,
                                                        cut: int) -> None:
    """Tumbling windows (FixedSlice): one ``(end, start)`` per window end, its
    keys in slices, the first owner lost after ``cut`` slices."""
    failed: list[FailedResult] = []
    ends = [((i + 1) * 10, [b"k%02d" % k for k in range(n)]) for i, n in enumerate(sizes)]

    def slices(size: list[int]) -> list[FixedSlice]:
        out = []
        for end, keys in ends:
            for i in range(0, len(keys), size[0]):
                part = keys[i:i + size[0]]
                out.append(FixedSlice(end - 10, end, part, [1] * len(part), lambda v: v,
                                      failed))
        return out

    one, sent = ClosingProgress(), list[tuple[int, bytes]]()
    for piece in slices([2])[:cut]:
        kept = one.fixed("op", piece)
        if kept is not None:
            sent.extend((kept.end, k) for k in kept.keys)
    two = ClosingProgress()
    two.resume(dict(one.markers))
    for piece in slices([second]):
        kept = two.fixed("op", piece)
        if kept is not None:
            sent.extend((kept.end, k) for k in kept.keys)
    assert sent == [(end, k) for end, keys in ends for k in keys]


def test_markers_are_committed_and_read_back() -> None:
    meta = CommitMeta({"op": 5}, 3, 100, {"op": (60_000, 0, 2048)})
    assert decode_commit_metadata(encode_commit_metadata(meta)) == meta
    # Stream times that do not fit are dropped; the markers never are.
    many = {f"operator-{i:04d}": 10**12 for i in range(200)}
    text = encode_commit_metadata(CommitMeta(many, 3, 100, {"op": (1, 0, 2)}))
    assert decode_commit_metadata(text) == CommitMeta({}, 3, 100, {"op": (1, 0, 2)})


def test_malformed_markers_are_an_error_not_dropped() -> None:
    with pytest.raises(ValueError, match="closing progress"):
        decode_commit_metadata('{"v":1,"cl":{"op":[1,2]}}')
