"""The in-memory state of one task's windows, one class per window family:
``FixedWindowState`` here (tumbling, hopping), the per-key ones (sessions,
sliding) in ``keyed_state.py``.

Each class keeps its open windows, advances stream time, decides lateness per
record, closes windows at the end of a batch, and encodes itself for
checkpoints (full, or only what changed since the last checkpoint).

Closing at the end of a batch gives the same results as closing after every
record: stream time only grows, so a window that would have closed mid-batch
has a close time <= the stream time of every later record of the batch, and
each of those records is late for it. Results are ordered by
``(close time, start, key)``, which is what per-record closing yields too, so
output never depends on how records were split into batches.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from streamremat.core.aggregators import Aggregator, Count
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
from streamremat.core.records import FailedResult, WindowResult

#: Stream time before the first record.
NO_TIME = -(2**62)

#: (index in the batch, reason) of a record whose fold raised
Failure = tuple[int, str]


class WindowState:
    """What the task needs of a window family's state."""

    def __init__(self, agg: Aggregator) -> None:
        self.agg = agg
        self.stream_time = NO_TIME
        #: stream time at the end of the last ``close``; windows closing at or before it are gone.
        self.closed_through = NO_TIME

    #: For replay skipping: the latest close time of the windows a record at ``t``
    #: belongs to, when it depends on ``t`` alone (None: it doesn't, never skip).
    #: A record whose windows all close by the replay's end stream time can only
    #: touch windows that close during the replay, before any output matters.
    last_close_ms: Callable[[int], int] | None = None

    def add_batch(
        self, keys: list[bytes], times: list[int], items: list[Any], failed: list[Failure]
    ) -> list[int]:
        """Fold the records into their windows; return the indices of late records.

        A record whose ``add`` (or, for sessions, ``merge``) raises is appended to
        ``failed`` as (index, reason) and leaves stream time alone: it goes to the
        dead letters like any bad record. (Windows it was already added to, and
        what a raising ``add`` did to its accumulator before raising, stay.)
        """
        raise NotImplementedError

    def close(self, failed: list[FailedResult]) -> list[WindowResult]:
        """Close every window whose close time <= stream time; return their results.
        A window whose ``merge`` or ``result`` raises goes to ``failed`` instead."""
        raise NotImplementedError

    def encode(self, full: bool) -> bytes:
        """Encode all state (``full``) or what changed since the last encode; resets dirty."""
        raise NotImplementedError

    def apply(self, body: bytes) -> None:
        """Apply an encoded full state or delta on top of the current state."""
        raise NotImplementedError

    def after_restore(self) -> None:
        """Rebuild indexes and drop windows already closed at the restored stream time."""
        raise NotImplementedError

    def open_windows(self) -> int:
        raise NotImplementedError

    def open_keys(self) -> int:
        raise NotImplementedError


def results_or_failures(
    result: Callable[[Any], Any],
    windows: list[tuple[bytes, int, int, Any]],
    failed: list[FailedResult],
) -> list[WindowResult]:
    """``result`` of each (key, start, end, accumulator); the ones that raise go to
    ``failed``. The slow path, taken only for a batch of windows where one raised."""
    out: list[WindowResult] = []
    for key, start, end, acc in windows:
        try:
            out.append(WindowResult(key, start, end, result(acc)))
        except Exception as exc:
            failed.append(FailedResult(key, start, end, "result", reason_of(exc)))
    return out


class FixedWindowState(WindowState):
    """Tumbling and hopping windows: accumulators by window end, then by key."""

    def __init__(self, agg: Aggregator, size_ms: int, advance_ms: int, grace_ms: int) -> None:
        super().__init__(agg)
        self.size = size_ms
        self.advance = advance_ms
        self.grace = grace_ms
        self.windows: dict[int, dict[bytes, Any]] = {}
        self.dirty: dict[int, set[bytes]] = {}
        # Count() needs no call per record: the accumulator is the number itself.
        self._plain_count = type(agg) is Count and not agg.needs_value
        # The newest window containing t starts at the last multiple of advance <= t.
        self.last_close_ms = lambda t: t - t % advance_ms + size_ms + grace_ms

    def add_batch(
        self, keys: list[bytes], times: list[int], items: list[Any], failed: list[Failure]
    ) -> list[int]:
        if self.advance == self.size:
            return self._add_tumbling(keys, times, items, failed)
        return self._add_hopping(keys, times, items, failed)

    def _add_tumbling(
        self, keys: list[bytes], times: list[int], items: list[Any], failed: list[Failure]
    ) -> list[int]:
        st, size, grace = self.stream_time, self.size, self.grace
        windows, dirty = self.windows, self.dirty
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
                        cur = windows.setdefault(end, {})
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
                # The failed record must not move stream time: take it back out.
                skip = {j for j, _ in failed}
                st = max([start_st, *(times[j] for j in range(i) if j not in skip)])
                first = i + 1
        self.stream_time = st
        return late

    def _add_hopping(
        self, keys: list[bytes], times: list[int], items: list[Any], failed: list[Failure]
    ) -> list[int]:
        st, size, advance, grace = self.stream_time, self.size, self.advance, self.grace
        windows, dirty = self.windows, self.dirty
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
                    acc = cur.get(key)
                    cur[key] = add(zero() if acc is None else acc, item)
                    cur_dirty = dirty.get(end)
                    if cur_dirty is None:
                        cur_dirty = dirty[end] = set()
                    cur_dirty.add(key)
            except Exception as exc:
                failed.append((i, reason_of(exc)))
                continue
            st = now
            if is_late:
                late.append(i)
        self.stream_time = st
        return late

    def close(self, failed: list[FailedResult]) -> list[WindowResult]:
        limit = self.stream_time - self.grace
        self.closed_through = self.stream_time
        ending = sorted(end for end in self.windows if end <= limit)
        results: list[WindowResult] = []
        result, size = self.agg.result, self.size
        for end in ending:
            accs = self.windows.pop(end)
            self.dirty.pop(end, None)
            start = end - size
            try:
                done = [WindowResult(key, start, end, result(accs[key])) for key in sorted(accs)]
            except Exception:  # one raised: find which, window by window
                done = results_or_failures(result, [(k, start, end, accs[k]) for k in sorted(accs)],
                                           failed)
            results.extend(done)
        return results

    def encode(self, full: bool) -> bytes:
        out = bytearray()
        encode = self.agg.encode
        if full:
            chosen = {end: sorted_in_runs(accs) for end, accs in self.windows.items()}
        else:
            chosen = {
                end: sorted_in_runs(keys) for end, keys in self.dirty.items()
                if end in self.windows
            }
        self.dirty = {}
        write_uvarint(out, len(chosen))
        for end in sorted(chosen):
            accs = self.windows[end]
            write_svarint(out, end)
            write_uvarint(out, len(chosen[end]))
            for key in chosen[end]:
                write_bytes(out, key)
                write_bytes(out, encode(accs[key]))
        return bytes(out)

    def apply(self, body: bytes) -> None:
        decode = self.agg.decode
        n_windows, pos = read_uvarint(body, 0)
        for _ in range(n_windows):
            end, pos = read_svarint(body, pos)
            n_keys, pos = read_uvarint(body, pos)
            accs = self.windows.setdefault(end, {})
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
        self.dirty = {}

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
