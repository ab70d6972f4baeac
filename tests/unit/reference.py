"""A brute-force reference implementation of DESIGN.md §4, written from the spec.

It shares no code with the engine's window handling: it keeps every record it
accepted, decides lateness per (record, window) from the close times in
``streamremat/core/windows.py``'s docstring, and computes each window's value
from the plain list of items added to it. Slow on purpose: obviously correct
beats fast here.

Close times (smallest stream time at which a window is closed):

* tumbling / hopping ``[start, end)``: ``end + grace``
* sliding ``[start, end]`` inclusive: ``end + 1 + grace`` (no window starts below 0:
  see ``_run_sliding``)
* session ``[first, last]``: ``last + gap + 1 + grace``

Per record ``t``: stream time becomes ``max(stream time, t)``; the record is
added to each of its windows whose close time is still > stream time (late for
the others); then every window whose close time is <= stream time is emitted,
ordered by (close time, start, key bytes).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

#: (key bytes, timestamp ms, item); ``item`` is whatever the result function reads.
RefRecord = tuple[bytes, int, Any]
#: (key bytes, start ms, end ms, value)
RefEmission = tuple[bytes, int, int, Any]
ResultFn = Callable[[list[Any]], Any]


@dataclass(frozen=True)
class RefWindow:
    """Window parameters, independent of the engine's classes."""

    kind: str  # "tumbling" | "hopping" | "sliding" | "session"
    size: int = 0  # tumbling / hopping / sliding size; session gap
    advance: int = 0  # hopping only
    grace: int = 0


@dataclass
class RefOutput:
    emissions: list[RefEmission] = field(default_factory=list)
    #: per emission, the index (into the input) of the record whose arrival closed it
    closed_by: list[int] = field(default_factory=list)
    #: indices (into the input) of records late for at least one of their windows
    late: list[int] = field(default_factory=list)


@dataclass
class _Win:
    key: bytes
    start: int
    end: int
    #: (arrival index, item) of the records added to the window
    members: list[tuple[int, Any]] = field(default_factory=list)


def run_reference(window: RefWindow, records: Sequence[RefRecord], result: ResultFn) -> RefOutput:
    """Process ``records`` one by one; return emissions and late record indices."""
    runners = {
        "tumbling": _run_fixed,
        "hopping": _run_fixed,
        "sliding": _run_sliding,
        "session": _run_session,
    }
    return runners[window.kind](window, records, result)


def _values(members: list[tuple[int, Any]]) -> list[Any]:
    """Items in the order they were added (see ``_run_session`` for merges)."""
    return [item for _, item in members]


# -- tumbling and hopping ---------------------------------------------------------


def _fixed_starts(t: int, size: int, advance: int) -> list[int]:
    """Every start ``k*advance`` (any integer k, so near 0 a hopping window may start
    below 0) with ``start <= t < start + size``."""
    first_k = (t - size) // advance - 1
    starts = (k * advance for k in range(first_k, t // advance + 1))
    return [s for s in starts if s <= t < s + size]


def _run_fixed(window: RefWindow, records: Sequence[RefRecord], result: ResultFn) -> RefOutput:
    size = window.size
    advance = window.size if window.kind == "tumbling" else window.advance
    grace = window.grace
    out = RefOutput()
    stream_time: int | None = None
    open_wins: dict[tuple[bytes, int], _Win] = {}
    for i, (key, t, item) in enumerate(records):
        stream_time = t if stream_time is None else max(stream_time, t)
        late = False
        for start in _fixed_starts(t, size, advance):
            end = start + size
            if end + grace <= stream_time:
                late = True
                continue
            win = open_wins.setdefault((key, start), _Win(key, start, end))
            win.members.append((i, item))
        if late:
            out.late.append(i)
        closing = [w for w in open_wins.values() if w.end + grace <= stream_time]
        closing.sort(key=lambda w: (w.end + grace, w.start, w.key))
        for w in closing:
            del open_wins[(w.key, w.start)]
            out.emissions.append((w.key, w.start, w.end, result(_values(w.members))))
            out.closed_by.append(i)
    return out


# -- sliding (Kafka Streams SlidingWindows) -----------------------------------------


def _run_sliding(window: RefWindow, records: Sequence[RefRecord], result: ResultFn) -> RefOutput:
    """Each record time t has a left window and a right window ``[t + 1, t + 1 + size]``.
    The left window is ``[t - size, t]``, except that no window starts below 0: a
    record with ``t < size`` has ``[0, size]`` (Kafka Streams'
    ``KStreamSlidingWindowAggregate.processEarly`` puts such "early" records in one
    combined window ``[0, size]``). A window exists if a record whose left window it
    is was added to it, or if it holds records and a record at ``start - 1`` was
    accepted (that record's right window). A window holds every record in its range
    that arrived while it was open."""
    size, grace = window.size, window.grace

    def left(t: int) -> tuple[int, int]:
        return (t - size, t) if t >= size else (0, size)

    out = RefOutput()
    stream_time: int | None = None
    #: key -> accepted records as (arrival index, t, stream time after arrival, item)
    accepted: dict[bytes, list[tuple[int, int, int, Any]]] = {}
    emitted: set[tuple[bytes, int]] = set()
    for i, (key, t, item) in enumerate(records):
        previous = stream_time
        stream_time = t if stream_time is None else max(stream_time, t)
        # Windows containing t end in [t, t + size]; the last one closes at t + size + 1 + grace.
        if t + size + 1 + grace <= stream_time:
            out.late.append(i)  # late for every window containing t: dropped
        else:
            if left(t)[1] + 1 + grace <= stream_time:
                out.late.append(i)  # late for its own (left) window at least
            accepted.setdefault(key, []).append((i, t, stream_time, item))
        closing: list[tuple[int, int, bytes, int, list[tuple[int, Any]]]] = []
        for k, recs in accepted.items():
            candidates = {left(r[1]) for r in recs}
            candidates |= {(r[1] + 1, r[1] + 1 + size) for r in recs}
            for start, end in candidates:
                close = end + 1 + grace
                # Only windows closing now: earlier ones were decided at their close.
                if close > stream_time or (previous is not None and close <= previous):
                    continue
                assert (k, start) not in emitted
                members = [(r[0], r[3]) for r in recs if start <= r[1] <= end and r[2] < close]
                at_end = any(left(r[1]) == (start, end) and r[2] < close for r in recs)
                at_left = any(r[1] == start - 1 and r[2] < close for r in recs)
                if at_end or (members and at_left):
                    emitted.add((k, start))
                    closing.append((close, start, k, end, members))
        closing.sort(key=lambda c: (c[0], c[1], c[2]))
        for _, start, k, end, members in closing:
            out.emissions.append((k, start, end, result(_values(members))))
            out.closed_by.append(i)
    return out


# -- session ---------------------------------------------------------------------


def _run_session(window: RefWindow, records: Sequence[RefRecord], result: ResultFn) -> RefOutput:
    gap, grace = window.size, window.grace
    out = RefOutput()
    stream_time: int | None = None
    sessions: dict[bytes, list[_Win]] = {}  # open sessions; start = first, end = last

    def close_time(w: _Win) -> int:
        return w.end + gap + 1 + grace

    for i, (key, t, item) in enumerate(records):
        stream_time = t if stream_time is None else max(stream_time, t)
        mine = sessions.setdefault(key, [])
        touching = [w for w in mine if w.start - gap <= t <= w.end + gap]
        if not touching:
            if t + gap + 1 + grace <= stream_time:
                out.late.append(i)
            else:
                mine.append(_Win(key, t, t, [(i, item)]))
        else:
            # Merging concatenates the sessions' items in time order of the sessions,
            # then adds the new record (Kafka Streams' session merger does the same).
            # Note: so Collect's order is not arrival order across a merge.
            touching.sort(key=lambda w: w.start)
            merged = _Win(
                key,
                min([t] + [w.start for w in touching]),
                max([t] + [w.end for w in touching]),
                [m for w in touching for m in w.members] + [(i, item)],
            )
            sessions[key] = [w for w in mine if not any(w is x for x in touching)] + [merged]
        closing = [w for ws in sessions.values() for w in ws if close_time(w) <= stream_time]
        closing.sort(key=lambda w: (close_time(w), w.start, w.key))
        for w in closing:
            sessions[w.key] = [x for x in sessions[w.key] if x is not w]
            out.emissions.append((w.key, w.start, w.end, result(_values(w.members))))
            out.closed_by.append(i)
    return out


def ref_quantile(values: Sequence[Any], q: float) -> Any:
    """The documented rule of ``Quantiles`` (Hyndman & Fan type 7), from scratch:
    sort everything, find the fractional rank ``(n - 1) * q`` and interpolate
    linearly between its two neighbours (none when it is a whole rank)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q
    below = int(rank)  # rank >= 0: truncation is the floor
    weight = rank - below
    if weight == 0:
        return ordered[below]
    above = ordered[min(below + 1, len(ordered) - 1)]
    return ordered[below] + (above - ordered[below]) * weight
