"""Replay with a horizon (the stream time at the committed offset) skips records whose
windows all close during the replay; the state it ends with, and everything emitted
afterwards, must be exactly those of a full replay."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from streamremat import Count, Hopping, Operator, Session, Sum, Tumbling
from streamremat.core.records import Record
from streamremat.core.task import Task


def _records(times: list[int]) -> list[Record]:
    return [
        Record(b"k%d" % (i % 3), orjson.dumps({"x": i}), t, i) for i, t in enumerate(times)
    ]


windows = st.one_of(
    st.builds(Tumbling, st.integers(1, 50), st.integers(0, 20)),
    st.integers(1, 40).flatmap(
        lambda size: st.builds(Hopping, st.just(size), st.integers(1, size), st.integers(0, 20))
    ),
)


@settings(max_examples=300, deadline=None)
@given(
    window=windows,
    times=st.lists(st.integers(0, 400), min_size=1, max_size=80),
    cuts=st.tuples(st.floats(0, 1), st.floats(0, 1)),
    batch=st.integers(1, 9),
)
def test_replay_with_horizon_ends_in_the_same_state(
    window: Tumbling | Hopping, times: list[int], cuts: tuple[float, float], batch: int
) -> None:
    op = Operator(name="o", source="s", sink="t", window=window,
                  aggregate={"n": Count(), "total": Sum("x")})
    records = _records(times)
    c, k = sorted(int(x * len(records)) for x in cuts)

    reference = Task(op)
    reference.process(records[:k], emit=False)
    horizon = reference.stream_time_ms

    replayed = Task(op)
    replayed.process(records[:c], emit=False)
    for i in range(c, k, batch):
        replayed.process(records[i : min(i + batch, k)], emit=False, horizon_ms=horizon)

    assert replayed.next_offset == reference.next_offset
    assert replayed.snapshot(full=True) == reference.snapshot(full=True)
    after = records[k:]
    assert replayed.process(after).results == reference.process(after).results


def test_horizon_skips_closed_windows_records_and_sessions_never_skip() -> None:
    times = list(range(0, 1000, 10))
    tumbling = Operator(name="o", source="s", sink="t", window=Tumbling(100),
                        aggregate=Count())
    task = Task(tumbling)
    skipped = [r for r in _records(times)
               if task.state.last_close_ms is not None
               and task.state.last_close_ms(r.timestamp or 0) <= 990]
    assert len(skipped) == 90  # all but the window [900, 1000)
    session = Operator(name="o", source="s", sink="t", window=Session(50), aggregate=Count())
    assert Task(session).state.last_close_ms is None
