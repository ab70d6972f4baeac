"""Window state kept per key: sessions, and the record buffers of sliding windows.

Both keep, per key, a short list of entries and a heap of the keys' next close
times, so closing visits only the keys with something due. See
``window_state.py`` for what every window family's state does.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Collection
from typing import Any

from streamremat.core import session_refold
from streamremat.core.aggregators import Aggregator
from streamremat.core.closing import Closed, ClosedWindows, closed_windows
from streamremat.core.codec import (
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
from streamremat.core.session_refold import merge_sessions
from streamremat.core.window_state import (
    SIZE_SAMPLE,
    Failure,
    Group,
    WindowState,
)


class _KeyedHeapState(WindowState):
    """Shared bookkeeping for per-key window lists (sessions, sliding buffers).

    ``_due`` is a heap of ``(close time, key)``; ``_registered[key]`` is the one
    live entry per key, always <= the key's earliest pending close time, so
    ``close`` visits only keys that may have something to close.
    """

    def __init__(self, agg: Aggregator) -> None:
        super().__init__(agg)
        self._due: list[tuple[int, bytes]] = []
        self._registered: dict[bytes, int] = {}
        self.dirty: set[bytes] = set()

    def _register(self, key: bytes, close_at: int) -> None:
        current = self._registered.get(key)
        if current is None or close_at < current:
            self._registered[key] = close_at
            heapq.heappush(self._due, (close_at, key))

    def _due_keys(self) -> list[bytes]:
        """Pop and return the keys whose registered close time has been reached."""
        st, due, registered = self.stream_time, self._due, self._registered
        keys: list[bytes] = []
        while due and due[0][0] <= st:
            close_at, key = heapq.heappop(due)
            if registered.get(key) == close_at:
                del registered[key]
                keys.append(key)
        return keys

    def _rebuild_due(self) -> None:
        self._due, self._registered = [], {}

    def _encode_lists(self, full: bool, lists: dict[bytes, Any]) -> bytes:
        """Per key, a list of ``(a, b, acc)`` with ``a <= b``: a session's first and
        last time, or a buffered record's time and arrival stream time. A key
        without entries is written with 0 entries, which deletes it on restore."""
        keys = sorted_in_runs(lists if full else self.dirty)
        self.dirty = set()
        encode = self.agg.encode
        out = bytearray()
        write_uvarint(out, len(keys))
        for key in keys:
            write_bytes(out, key)
            entries = lists.get(key, ())
            write_uvarint(out, len(entries))
            for a, b, acc in entries:
                write_svarint(out, a)
                write_uvarint(out, b - a)
                write_bytes(out, encode(acc))
        return bytes(out)

    def _apply_lists(
        self, body: bytes, lists: dict[bytes, Any], make: Callable[[int, int, Any], Any]
    ) -> None:
        decode = self.agg.decode
        n_keys, pos = read_uvarint(body, 0)
        for _ in range(n_keys):
            key, pos = read_bytes(body, pos)
            n, pos = read_uvarint(body, pos)
            entries = []
            for _ in range(n):
                a, pos = read_svarint(body, pos)
                span, pos = read_uvarint(body, pos)
                raw, pos = read_bytes(body, pos)
                entries.append(make(a, a + span, decode(raw)))
            if entries:
                lists[key] = entries
            else:
                lists.pop(key, None)
        if pos != len(body):
            raise StateFormatError(f"trailing bytes after {type(self).__name__} state")


class SessionState(_KeyedHeapState):
    """Session windows: per key, a list of ``[first, last, acc, o, st]`` sorted by
    first: its time span, accumulator, the offset of its first record (-1:
    unknown) and the stream time just after that record (a merged session takes
    the earliest first record's). A group is every session with one close time
    ``last + gap + 1 + grace``.

    Recomputing a session (``core/session_refold.py``) replays the session logic
    from the earliest pending session's first record, with stream time restarted
    at ``st`` and the records whose fold raised (``failed_offsets``) left out, so
    stream time, lateness and merges are what the failure-free run had.
    """

    def __init__(self, agg: Aggregator, gap_ms: int, grace_ms: int) -> None:
        super().__init__(agg)
        self.gap = gap_ms
        self.grace = grace_ms
        self.sessions: dict[bytes, list[list[Any]]] = {}
        #: offsets of records whose fold raised: they moved no stream time
        self.failed_offsets: list[int] = []
        #: per key, the first times of its sessions the last encode wrote as recompute
        self._recomputed: dict[bytes, frozenset[int]] = {}
        #: the replay rebuilding the pending sessions (``session_refold.Refold``)
        self.refolding: Any = None

    def add_batch(
        self, srcs: list[SourceRecord], keys: list[bytes], times: list[int], items: list[Any],
        failed: list[Failure],
    ) -> list[int]:
        st, gap, grace = self.stream_time, self.gap, self.grace
        reach = gap + 1 + grace  # close time = last + reach
        add, zero, merge = self.agg.add, self.agg.zero, self.agg.merge
        sessions, dirty = self.sessions, self.dirty
        late: list[int] = []
        for i, t in enumerate(times):
            now = t if t > st else st
            key = keys[i]
            mine = sessions.get(key)
            touching = (
                [s for s in mine if s[0] - gap <= t <= s[1] + gap and s[1] + reach > now]
                if mine
                else []
            )
            try:
                if not touching:
                    if t + reach <= now:
                        st = now
                        late.append(i)
                        continue
                    new = [t, t, add(zero(), items[i]), srcs[i].offset, now]
                    if mine is None:
                        sessions[key] = [new]
                    else:
                        mine.append(new)
                        mine.sort(key=lambda s: s[0])
                    self._register(key, t + reach)
                else:
                    merged = touching[0]
                    for other in touching[1:]:
                        merged = merge_sessions(merged, other, merge)
                    merged = [min(merged[0], t), max(merged[1], t), add(merged[2], items[i]),
                              merged[3], merged[4]]
                    assert mine is not None
                    kept = [s for s in mine if not any(s is x for x in touching)]
                    kept.append(merged)
                    kept.sort(key=lambda s: s[0])
                    sessions[key] = kept
            except Exception as exc:
                failed.append((i, reason_of(exc)))
                self._failed_fold(srcs[i].offset, key, touching)
                continue
            st = now
            dirty.add(key)
        self.stream_time = st
        return late

    def _failed_fold(self, offset: int, key: bytes, touching: list[list[Any]]) -> None:
        """A fold raised: the record moved no stream time (the replay must skip it
        too), and what it did to the sessions it touched can't be replayed."""
        self.failed_offsets.append(offset)
        for s in touching:
            s[3] = -1
        if touching:
            self.dirty.add(key)

    def close(self, failed: list[FailedResult]) -> ClosedWindows:
        st, reach = self.stream_time, self.gap + 1 + self.grace
        closed: list[Closed] = []
        for key in self._due_keys():
            keep = []
            for s in self.sessions[key]:
                if s[1] + reach <= st:
                    closed.append((s[1] + reach, s[0], key, s[1], s[2]))
                else:
                    keep.append(s)
            self.dirty.add(key)
            if keep:
                self.sessions[key] = keep
                self._register(key, min(s[1] for s in keep) + reach)
            else:
                del self.sessions[key]
        self.closed_through = st
        return closed_windows(closed, self.agg.result, failed)

    def encode(self, full: bool, recompute: Collection[int] = ()) -> bytes:
        return session_refold.encode_sessions(self, full, recompute)

    def apply(self, body: bytes, version: int) -> None:
        session_refold.apply_sessions(self, body, version)

    def after_restore(self) -> None:
        self._rebuild_due()
        st, reach = self.stream_time, self.gap + 1 + self.grace
        recomputed: dict[bytes, frozenset[int]] = {}
        for key in list(self.sessions):
            keep = [s for s in self.sessions[key] if s[1] + reach > st]
            if keep:
                self.sessions[key] = keep
                self._register(key, min(s[1] for s in keep) + reach)
                pending = frozenset(s[0] for s in keep if s[2] is session_refold.PENDING)
                if pending:
                    recomputed[key] = pending
            else:
                del self.sessions[key]
        self.dirty = set()
        self._recomputed = recomputed
        self.refolding = session_refold.Refold.start(self) if recomputed else None

    def groups(self) -> list[Group]:
        reach, encode, pending = self.gap + 1 + self.grace, self.agg.encode, session_refold.PENDING
        exact = self.exact_sizes
        sample = 0
        size = 0
        out: list[Group] = []
        for key, mine in self.sessions.items():
            for s in mine:
                if s[2] is pending:
                    continue
                if exact or sample < SIZE_SAMPLE:
                    size = len(encode(s[2])) + len(key) + 8
                    sample += 1
                out.append((s[1] + reach, size, s[3] if s[3] >= 0 else None))
        return out

    def refold_start(self) -> tuple[int, int] | None:
        return None if self.refolding is None else self.refolding.start_at

    def refold(
        self, srcs: list[SourceRecord], keys: list[bytes], times: list[int], items: list[Any]
    ) -> None:
        if self.refolding is not None:
            self.refolding.feed(self, srcs, keys, times, items)

    def finish_refold(self, exact: bool = True) -> None:
        if self.refolding is not None:
            self.refolding.finish(self, exact)
            self.refolding = None

    def open_windows(self) -> int:
        return sum(len(s) for s in self.sessions.values())

    def open_keys(self) -> int:
        return len(self.sessions)


class SlidingState(_KeyedHeapState):
    """Sliding windows (Kafka Streams semantics) from a per-key buffer of records.

    Each buffered record is ``(t, seen_at, acc)``: its timestamp, the stream time
    just after it arrived, and an accumulator holding only its item. A window is
    computed when it closes, from the records that arrived while it was open
    (``seen_at < close time``), by merging their accumulators in arrival order.
    Windows: a record's left window ``[t - size, t]`` (``[0, size]`` when
    ``t < size``, as Kafka Streams' ``processEarly``: no negative starts), if a
    record it is the left window of arrived in time, and ``[t + 1, t + 1 + size]``
    when a record at ``t`` and a record inside that range both arrived in time.
    """

    def __init__(self, agg: Aggregator, size_ms: int, grace_ms: int) -> None:
        super().__init__(agg)
        self.size = size_ms
        self.grace = grace_ms
        self.buffers: dict[bytes, list[tuple[int, int, Any]]] = {}

    def add_batch(
        self, srcs: list[SourceRecord], keys: list[bytes], times: list[int], items: list[Any],
        failed: list[Failure],
    ) -> list[int]:
        st, size, grace = self.stream_time, self.size, self.grace
        add, zero = self.agg.add, self.agg.zero
        late: list[int] = []
        for i, t in enumerate(times):
            now = t if t > st else st
            if t + size + 1 + grace <= now:  # every window containing t has closed
                st = now
                late.append(i)
                continue
            try:
                acc = add(zero(), items[i])
            except Exception as exc:
                failed.append((i, reason_of(exc)))
                continue
            st = now
            # Its own (left) window ends at t, or at size for an early record.
            own_close = (t if t > size else size) + 1 + grace
            if own_close <= st:  # its own window has closed
                late.append(i)
            key = keys[i]
            buf = self.buffers.get(key)
            if buf is None:
                buf = self.buffers[key] = []
            buf.append((t, st, acc))
            self._register(key, own_close if own_close > st else t + size + 2 + grace)
            self.dirty.add(key)
        self.stream_time = st
        return late

    def _closing_windows(
        self, buf: list[tuple[int, int, Any]], after: int, upto: int
    ) -> dict[tuple[int, int], int]:
        size, grace = self.size, self.grace
        wins: dict[tuple[int, int], int] = {}
        for t in {r[0] for r in buf}:
            start, end = (t - size, t) if t > size else (0, size)
            left_close = end + 1 + grace
            if after < left_close <= upto:
                wins[(start, end)] = left_close
            right_close = t + size + 2 + grace
            if after < right_close <= upto:
                wins[(t + 1, t + 1 + size)] = right_close
        return wins

    def close(self, failed: list[FailedResult]) -> ClosedWindows:
        st, after, size, grace = self.stream_time, self.closed_through, self.size, self.grace
        merge = self.agg.merge
        closed: list[Closed] = []
        broken: list[tuple[int, int, bytes, int, str]] = []  # windows whose merge raised
        for key in self._due_keys():
            buf = self.buffers[key]
            for (start, end), close_at in self._closing_windows(buf, after, st).items():
                content = [r for r in buf if start <= r[0] <= end and r[1] < close_at]
                # [0, size] is the left window of every record at t <= size.
                created_left = any(r[0] == end or r[0] < size == end for r in content)
                created_right = bool(content) and any(
                    r[0] == start - 1 and r[1] < close_at for r in buf
                )
                if not (created_left or created_right):
                    continue
                acc = content[0][2]
                try:
                    for r in content[1:]:
                        acc = merge(acc, r[2])
                except Exception as exc:
                    broken.append((close_at, start, key, end, reason_of(exc)))
                    continue
                closed.append((close_at, start, key, end, acc))
            # A record is needed until its right window [t+1, t+1+size] has closed.
            buf = [r for r in buf if r[0] + size + 2 + grace > st]
            self.dirty.add(key)
            if buf:
                self.buffers[key] = buf
                self._register(key, self._next_close(buf, st))
            else:
                del self.buffers[key]
        self.closed_through = st
        for _, s, key, e, reason in sorted(broken):
            failed.append(FailedResult(key, s, e, "result", reason))
        return closed_windows(closed, self.agg.result, failed)

    def _next_close(self, buf: list[tuple[int, int, Any]], st: int) -> int:
        size, grace = self.size, self.grace
        return min(
            c
            for r in buf
            for c in ((r[0] if r[0] > size else size) + 1 + grace, r[0] + size + 2 + grace)
            if c > st
        )

    def encode(self, full: bool, recompute: Collection[int] = ()) -> bytes:
        # Always stored: one entry per record, so recomputing one would save only
        # that record's own item (``groups`` is empty: the planner has nothing to do).
        return self._encode_lists(full, self.buffers)

    def apply(self, body: bytes, version: int) -> None:
        self._apply_lists(body, self.buffers, lambda a, b, acc: (a, b, acc))

    def after_restore(self) -> None:
        self._rebuild_due()
        st = self.closed_through
        for key in list(self.buffers):
            buf = [r for r in self.buffers[key] if r[0] + self.size + 2 + self.grace > st]
            if buf:
                self.buffers[key] = buf
                self._register(key, self._next_close(buf, st))
            else:
                del self.buffers[key]
        self.dirty = set()

    def open_windows(self) -> int:
        return sum(len({r[0] for r in buf}) for buf in self.buffers.values())

    def open_keys(self) -> int:
        return len(self.buffers)
