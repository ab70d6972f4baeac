"""The in-memory state of one task's windows, one class per window family:
``FixedWindowState`` here (tumbling, hopping), the per-key ones (sessions,
sliding) in ``keyed_state.py``.

Each class keeps its open windows, advances stream time, decides lateness per
record, closes windows at the end of a batch, and encodes itself for
checkpoints (full, or only what changed since the last checkpoint).

Every window family also keeps what exact recomputation needs (DESIGN §9,
``docs/rematerialization.md``): per group of windows with one close time, the
source offset of the first record folded into it (``None``: unknown, e.g. a
record's fold raised in it, or it was restored from a version 1 checkpoint).
A checkpoint may write a group as *recompute* (its first offset instead of its
accumulators); after a restore such a group is *pending* until ``refold`` has
rebuilt it from the replay of ``[first offset, checkpoint offset)`` and
``finish_refold`` installed it.

Closing at the end of a batch gives the same results as closing after every
record: stream time only grows, so a window that would have closed mid-batch
has a close time <= the stream time of every later record of the batch, and
each of those records is late for it. Results are ordered by
``(close time, start, key)``, which is what per-record closing yields too, so
output never depends on how records were split into batches.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection
from typing import Any

from streamremat.core.aggregators import Aggregator, Count
from streamremat.core.closing import NOTHING, ClosedWindows, fixed_windows
from streamremat.core.codec import (
    in_runs,
    read_bytes,
    read_svarint,
    read_uvarint,
    sorted_in_runs,
    write_bytes,
    write_svarint,
    write_uvarint,
)
from streamremat.core.exceptions import StateFormatError, reason_of
from streamremat.core.records import FailedResult, SourceRecord

#: Stream time before the first record.
NO_TIME = -(2**62)

#: (index in the batch, reason) of a record whose fold raised
Failure = tuple[int, str]

#: A group of windows as the planner sees it: (close time, encoded bytes, first
#: offset or None). ``tuning.remat.WindowCandidate`` takes these fields.
Group = tuple[int, int, int | None]

#: Accumulators encoded to estimate a group's bytes when they do not grow with
#: the data (the rest are counted); every one of them when they do.
SIZE_SAMPLE = 8

#: Kinds of a group in a version 2 body.
STORED = 0
RECOMPUTE = 1


class WindowState:
    """What the task needs of a window family's state."""

    def __init__(self, agg: Aggregator) -> None:
        self.agg = agg
        self.stream_time = NO_TIME
        #: stream time at the end of the last ``close``; windows closing at or before it are gone.
        self.closed_through = NO_TIME
        #: the smallest first offset among the groups the last ``encode`` wrote as
        #: recompute (None: none): a replay after a restore of it starts there
        self.last_replay_from: int | None = None

    #: For replay skipping: the latest close time of the windows a record at ``t``
    #: belongs to, when it depends on ``t`` alone (None: it doesn't, never skip).
    #: A record whose windows all close by the replay's end stream time can only
    #: touch windows that close during the replay, before any output matters.
    last_close_ms: Callable[[int], int] | None = None

    #: whether the accumulators grow with the data (``core/remat_state.grows``):
    #: then the planner's byte counts are exact, otherwise sampled
    exact_sizes = True

    def add_batch(
        self, srcs: list[SourceRecord], keys: list[bytes], times: list[int], items: list[Any],
        failed: list[Failure],
    ) -> list[int]:
        """Fold the records into their windows; return the indices of late records.
        ``srcs[i]`` is record i's source record (for its offset).

        A record whose ``add`` (or, for sessions, ``merge``) raises is appended to
        ``failed`` as (index, reason) and leaves stream time alone: it goes to the
        dead letters like any bad record. (Windows it was already added to, and
        what a raising ``add`` did to its accumulator before raising, stay.)
        """
        raise NotImplementedError

    def close(self, failed: list[FailedResult]) -> ClosedWindows:
        """Close every window whose close time <= stream time; return their results
        (built on demand, see ``core.closing``). A window whose ``merge`` or
        ``result`` raises goes to ``failed`` instead."""
        raise NotImplementedError

    def encode(self, full: bool, recompute: Collection[int] = ()) -> bytes:
        """Encode all state (``full``) or what changed since the last encode; resets
        dirty. Groups (close times) in ``recompute`` whose first offset is known, and
        every pending group, are written as recompute: their first offset only."""
        raise NotImplementedError

    def encode_after(self, head: bytes, full: bool, recompute: Collection[int] = ()) -> bytes:
        """``head + encode(full, recompute)`` (a state may write both into one buffer)."""
        return head + self.encode(full, recompute)

    def apply(self, body: bytes, version: int) -> None:
        """Apply an encoded full state or delta (body ``version``) on top of the
        current state."""
        raise NotImplementedError

    def apply_at(self, payload: bytes, start: int, version: int) -> None:
        """``apply`` of the body at ``start`` of ``payload`` (a state may read it in
        place: a checkpoint of millions of entries is tens of MB to copy)."""
        self.apply(payload[start:], version)

    def groups(self) -> list[Group]:
        """The open groups (pending ones excluded: they are recomputed anyway)."""
        return []

    def refold_start(self) -> tuple[int, int] | None:
        """(first offset, stream time just after that record) of the earliest pending
        group: where the replay that rebuilds the pending groups starts."""
        return None

    def refold_wants(self, t: int) -> bool:
        """Whether a record at event time ``t`` can matter to the refold (True: decode
        it); only consulted when event time is the record's timestamp."""
        return True

    def refold(
        self, srcs: list[SourceRecord], keys: list[bytes], times: list[int], items: list[Any]
    ) -> None:
        """Fold replayed records of ``[refold_start, checkpoint offset)`` into the
        pending groups only (every other window is restored already)."""

    def finish_refold(self, exact: bool = True) -> None:
        """The replay reached the checkpoint offset: install the rebuilt groups.
        ``exact``: check they are what the failure-free run had (StateFormatError
        if not); otherwise (records were skipped) keep what was rebuilt."""

    def after_restore(self) -> None:
        """Rebuild indexes and drop windows already closed at the restored stream time."""
        raise NotImplementedError

    def open_windows(self) -> int:
        raise NotImplementedError

    def open_keys(self) -> int:
        raise NotImplementedError


class FixedWindowState(WindowState):
    """Tumbling and hopping windows: accumulators by window end, then by key.

    A group is every key's window with one end (close time ``end + grace``);
    ``firsts[end]`` is its first offset. Recomputing one needs no stream time: a
    window open at the checkpoint was open throughout ``[o_w, c)`` (stream time
    only grows), so every record of that range whose timestamp falls in it was
    added to it, in offset order, and none before ``o_w`` was.
    """

    def __init__(self, agg: Aggregator, size_ms: int, advance_ms: int, grace_ms: int) -> None:
        super().__init__(agg)
        self.size = size_ms
        self.advance = advance_ms
        self.grace = grace_ms
        self.windows: dict[int, dict[bytes, Any]] = {}
        self.dirty: dict[int, set[bytes]] = {}
        #: end -> the offset of the first record folded into the window (None: unknown)
        self.firsts: dict[int, int | None] = {}
        #: end -> first offset of the restored recompute windows not rebuilt yet
        self.pending: dict[int, int] = {}
        #: ends the last encode wrote as recompute (a later store must write them whole)
        self._recomputed: set[int] = set()
        # Count() needs no call per record: the accumulator is the number itself.
        self._plain_count = type(agg) is Count and not agg.needs_value
        # The newest window containing t starts at the last multiple of advance <= t.
        self.last_close_ms = lambda t: t - t % advance_ms + size_ms + grace_ms

    def add_batch(
        self, srcs: list[SourceRecord], keys: list[bytes], times: list[int], items: list[Any],
        failed: list[Failure],
    ) -> list[int]:
        if self.advance == self.size:
            return self._add_tumbling(srcs, keys, times, items, failed)
        return self._add_hopping(srcs, keys, times, items, failed)

    def _add_tumbling(
        self, srcs: list[SourceRecord], keys: list[bytes], times: list[int], items: list[Any],
        failed: list[Failure],
    ) -> list[int]:
        st, size, grace = self.stream_time, self.size, self.grace
        windows, dirty, firsts = self.windows, self.dirty, self.firsts
        plain_count = self._plain_count
        add, zero = self.agg.add, self.agg.zero
        late: list[int] = []
        first, start_st = 0, st
        while True:
            cur_end = NO_TIME
            cur: dict[bytes, Any] = {}
            cur_dirty: set[bytes] = set()
            i = first
            # The loop has no per-record error handling (the common path stays
            # tight); the rare batch where an add raises resumes after the record.
            try:
                for i, t in enumerate(times[first:] if first else times, first):
                    if t > st:
                        st = t
                    end = t - t % size + size
                    if end + grace <= st:
                        late.append(i)
                        continue
                    if end != cur_end:
                        cur_end = end
                        got = windows.get(end)
                        if got is None:
                            got = windows[end] = {}
                            firsts[end] = srcs[i].offset
                        cur = got
                        cur_dirty = dirty.setdefault(end, set())
                    key = keys[i]
                    if plain_count:
                        cur[key] = cur.get(key, 0) + 1
                    else:
                        acc = cur.get(key)
                        cur[key] = add(zero() if acc is None else acc, items[i])
                    cur_dirty.add(key)
                break
            except Exception as exc:
                failed.append((i, reason_of(exc)))
                self._unknown_first(times[i])
                # The failed record must not move stream time: take it back out.
                skip = {j for j, _ in failed}
                st = max([start_st, *(times[j] for j in range(i) if j not in skip)])
                first = i + 1
        self.stream_time = st
        return late

    def _add_hopping(
        self, srcs: list[SourceRecord], keys: list[bytes], times: list[int], items: list[Any],
        failed: list[Failure],
    ) -> list[int]:
        st, size, advance, grace = self.stream_time, self.size, self.advance, self.grace
        windows, dirty, firsts = self.windows, self.dirty, self.firsts
        add, zero = self.agg.add, self.agg.zero
        late: list[int] = []
        for i, t in enumerate(times):
            now = t if t > st else st
            key, item = keys[i], items[i]
            is_late = False
            # Windows containing t start at the multiples of advance in (t - size, t].
            start = t - t % advance
            try:
                while start > t - size:
                    end = start + size
                    start -= advance
                    if end + grace <= now:
                        is_late = True
                        continue
                    cur = windows.get(end)
                    if cur is None:
                        cur = windows[end] = {}
                        firsts[end] = srcs[i].offset
                    acc = cur.get(key)
                    cur[key] = add(zero() if acc is None else acc, item)
                    cur_dirty = dirty.get(end)
                    if cur_dirty is None:
                        cur_dirty = dirty[end] = set()
                    cur_dirty.add(key)
            except Exception as exc:
                failed.append((i, reason_of(exc)))
                self._unknown_first(t)
                continue
            st = now
            if is_late:
                late.append(i)
        self.stream_time = st
        return late

    def _ends(self, t: int) -> list[int]:
        """The ends of the windows containing ``t``."""
        size, advance = self.size, self.advance
        start = t - t % advance
        out = []
        while start > t - size:
            out.append(start + size)
            start -= advance
        return out

    def _unknown_first(self, t: int) -> None:
        """A fold at ``t`` raised: what it left in its windows can't be replayed
        (the raise may have come after some of them, or mid-way through one), so
        their groups are stored from now on; the dirty entry writes that down."""
        for end in self._ends(t):
            if end in self.windows:
                self.firsts[end] = None
                self.dirty.setdefault(end, set())

    def close(self, failed: list[FailedResult]) -> ClosedWindows:
        """Drop the windows that close now; their results are built when asked
        for (``core.closing``): a window over a million keys closes in one step."""
        limit = self.stream_time - self.grace
        self.closed_through = self.stream_time
        ending = sorted(end for end in self.windows if end <= limit)
        if not ending:
            return NOTHING
        closing: list[tuple[int, dict[bytes, Any]]] = []
        for end in ending:
            closing.append((end, self.windows.pop(end)))
            self.dirty.pop(end, None)
            self.firsts.pop(end, None)
        return fixed_windows(closing, self.agg.result, self.size, failed)

    def encode(self, full: bool, recompute: Collection[int] = ()) -> bytes:
        """Version 2: per window end, its first offset (+1, 0 unknown), then either
        ``RECOMPUTE`` or ``STORED`` and the (key, accumulator) pairs: all of them
        in a full, the dirty ones in a delta, all again when the window was written
        as recompute before (the chain holds none of its accumulators)."""
        out = bytearray()
        encode, grace, windows, firsts = self.agg.encode, self.grace, self.windows, self.firsts
        rc = {e for e in (g - grace for g in recompute)
              if e in windows and firsts.get(e) is not None}
        rc.update(e for e in self.pending if e in windows)
        if full:
            ends = set(windows)
        else:
            ends = {e for e in self.dirty if e in windows} | rc
            ends.update(e for e in self._recomputed if e in windows)
        write_uvarint(out, len(ends))
        for end in sorted(ends):
            first = self.pending.get(end, firsts.get(end))
            write_svarint(out, end)
            write_uvarint(out, 0 if first is None else first + 1)
            if end in rc:
                out.append(RECOMPUTE)
                continue
            out.append(STORED)
            accs = windows[end]
            whole = full or end in self._recomputed
            keys = sorted_in_runs(accs if whole else self.dirty.get(end, ()))
            write_uvarint(out, len(keys))
            for key in keys:
                write_bytes(out, key)
                write_bytes(out, encode(accs[key]))
        self.dirty = {}
        self._recomputed = rc
        self.last_replay_from = min((self.pending.get(e, firsts.get(e)) or 0 for e in rc),
                                    default=None)
        return bytes(out)

    def apply(self, body: bytes, version: int) -> None:
        decode = self.agg.decode
        n_windows, pos = read_uvarint(body, 0)
        for _ in range(n_windows):
            end, pos = read_svarint(body, pos)
            first: int | None = None
            if version >= 2:
                raw_first, pos = read_uvarint(body, pos)
                first = raw_first - 1 if raw_first else None
                kind = body[pos]
                pos += 1
                if kind == RECOMPUTE:
                    if first is None:
                        raise StateFormatError("a recompute window without a first offset")
                    self.windows[end] = {}
                    self.pending[end] = self.firsts[end] = first
                    continue
                if kind != STORED:
                    raise StateFormatError(f"unknown window kind {kind}")
            n_keys, pos = read_uvarint(body, pos)
            accs = self.windows.setdefault(end, {})
            self.pending.pop(end, None)
            self.firsts[end] = first
            for _ in range(n_keys):
                key, pos = read_bytes(body, pos)
                raw, pos = read_bytes(body, pos)
                accs[key] = decode(raw)
        if pos != len(body):
            raise StateFormatError("trailing bytes after window state")

    def after_restore(self) -> None:
        # Windows closed since an older checkpoint are implied deleted by stream time,
        # so deltas never need to carry deletes for them.
        limit = self.stream_time - self.grace
        for end in [e for e in self.windows if e <= limit]:
            del self.windows[end]
            self.firsts.pop(end, None)
            self.pending.pop(end, None)
        self.dirty = {}
        # The chain holds these windows as recompute markers.
        self._recomputed = set(self.pending)

    def groups(self) -> list[Group]:
        encode, grace, pending = self.agg.encode, self.grace, self.pending
        out: list[Group] = []
        for end, accs in self.windows.items():
            if end in pending:
                continue
            if self.exact_sizes or len(accs) <= SIZE_SAMPLE:
                size = sum(len(encode(a)) + len(k) for k, a in accs.items())
            else:
                sample = list(itertools.islice(accs.items(), SIZE_SAMPLE))
                size = sum(len(encode(a)) + len(k) for k, a in sample) * len(accs) // len(sample)
            out.append((end + grace, size, self.firsts.get(end)))
        return out

    def refold_start(self) -> tuple[int, int] | None:
        if not self.pending:
            return None
        return min(self.pending.values()), NO_TIME

    def refold_wants(self, t: int) -> bool:
        pending = self.pending
        return any(end in pending for end in self._ends(t))

    def refold(
        self, srcs: list[SourceRecord], keys: list[bytes], times: list[int], items: list[Any]
    ) -> None:
        pending, windows, firsts = self.pending, self.windows, self.firsts
        add, zero = self.agg.add, self.agg.zero
        for i, t in enumerate(times):
            for end in self._ends(t):
                if end not in pending:
                    continue
                cur = windows[end]
                if not cur:
                    firsts[end] = srcs[i].offset
                key = keys[i]
                acc = cur.get(key)
                try:
                    cur[key] = add(zero() if acc is None else acc, items[i])
                except Exception as exc:
                    # The failure-free run's fold did not raise here (a raise makes the
                    # window's first offset unknown, so it is never recomputed).
                    raise StateFormatError(
                        f"recomputing window end {end}: the aggregation raised {exc!r} on a "
                        "record it took before; its add must be deterministic"
                    ) from exc

    def finish_refold(self, exact: bool = True) -> None:
        for end, first in self.pending.items():
            got = self.firsts.get(end)
            if exact and got != first:
                raise StateFormatError(
                    f"recomputing window end {end} started at offset {got}, the checkpoint "
                    f"says {first}: the source or the operator changed since"
                )
            self.firsts[end] = first
        self.pending = {}

    def open_windows(self) -> int:
        return sum(len(accs) for accs in self.windows.values())

    def open_keys(self) -> int:
        if len(self.windows) == 1:
            return len(next(iter(self.windows.values())))
        keys: set[bytes] = set()
        for accs in self.windows.values():
            for run in in_runs(accs):  # no one long C call (checkpoints count in a thread)
                keys.update(run)
        return len(keys)
