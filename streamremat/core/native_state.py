"""Tumbling and hopping state held in the native table (``native/src/table.rs``)
instead of Python dicts, for the fast-path shapes (``core/fastpath.py``).

``NativeWindowState`` is a ``FixedWindowState`` whose (key, accumulator) entries
live in a ``streamremat_native.Table``: per window end the keys end to end in one
buffer and the accumulators as numbers (no Python object per entry: ~4x less
memory than the dicts, and nothing for the cyclic GC to walk). What is per window
stays here in Python (first offsets, pending recompute groups, which groups the
last encode wrote as recompute), so the methods below are ``FixedWindowState``'s
with the entry work handed to the table: the same results in the same order, the
same late records, the same checkpoint bytes (``tests/unit/test_native_state.py``
holds them to the Python state byte for byte).

A closing window is taken out of the table whole (``take_sorted``) and read in
key order natively, in ``core/closing.py``'s bounded steps: its slices
(``FixedSlice`` over the table's rows) reach the sink's encoder with no Python
object per key (``STREAMREMAT_NATIVE_CLOSE=0``: sorted and popped in Python).

The encode of a checkpoint and the decode of a restore run in the table with
the GIL released (the runtime calls them in a worker thread,
``runtime/checkpointing.py`` and ``runtime/restoring.py``), so the event loop
runs on meanwhile.

**What the table can't hold exactly, Python holds.** The table takes ints that
fit 64 bits and floats. A value past that (a sum overflowing i64, an int past 64
bits in a restored checkpoint, a string Min, a float Min/Max to encode: its JSON
text is orjson's) makes the table decline before changing anything, and the
state converts itself back to ``FixedWindowState``'s dicts, losslessly (every
entry, its insertion order and its dirty mark), and goes on as the Python state
from then on. Converting rather than choosing per operator up front, because
whether such a value comes is a property of the data, not of the operator: a
Sum over ints stays native for as long as it fits 64 bits, which is always in
practice, and one odd record costs one conversion, not the whole run.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import Any, cast

from streamremat.core import closing
from streamremat.core.aggregators import Aggregator
from streamremat.core.closing import NOTHING, ClosedWindows, FixedSlice, fixed_windows
from streamremat.core.records import FailedResult, SourceRecord, WindowResult
from streamremat.core.window_state import (
    RECOMPUTE,
    SIZE_SAMPLE,
    Failure,
    FixedWindowState,
    Group,
)

_native: Any
try:
    import streamremat_native as _native
except ImportError:
    _native = None
#: a build without it (or none): the closing's keys are sorted and popped in Python
_take_sorted: Callable[[Any, int, int], Any] | None = getattr(_native, "take_sorted", None)

#: False: a closing's keys are sorted, and its accumulators built, in Python
#: (``closing.fixed_windows`` over ``Table.take``: the A/B of the native close)
native_close = os.environ.get("STREAMREMAT_NATIVE_CLOSE", "1") != "0"

#: what ``Table.encode`` writes of a window
_PLAN_RECOMPUTE, _PLAN_WHOLE, _PLAN_DIRTY = 0, 1, 2


class NativeWindowState(FixedWindowState):
    """``FixedWindowState`` with its entries in a native table (``table`` None:
    converted back to the dicts, every method is then ``FixedWindowState``'s)."""

    def __init__(self, agg: Aggregator, size_ms: int, advance_ms: int, grace_ms: int,
                 table: Any) -> None:
        super().__init__(agg, size_ms, advance_ms, grace_ms)
        self.table: Any = table

    def to_python(self) -> None:
        """Hand every entry to ``FixedWindowState``'s dicts, losslessly (insertion
        order and dirty marks included); the table is not used again."""
        table, self.table = self.table, None
        if table is None:
            return
        for end, accs, dirty in table.materialize():
            self.windows[end] = accs
            if dirty is not None:
                self.dirty[end] = dirty

    # -- folding -------------------------------------------------------------------

    def fold_native(self, folder: Any, records: list[SourceRecord]
                    ) -> tuple[list[int], list[int]] | None:
        """The native fold of a whole batch (``FastPath.fold``): (late indices, their
        event times), or None with nothing changed (the general path then runs it)."""
        got = self.table.fold(folder, records, self.stream_time)
        if got is None:
            return None
        late, late_times, self.stream_time, firsts = got
        for end, offset in firsts:
            self.firsts[end] = offset
        return late, late_times

    def fold_columns(self, srcs: Sequence[SourceRecord], keys: list[bytes], times: list[int],
                     columns: list[list[Any]]) -> list[int] | None:
        """The Python fast path's proven columns folded by the table (``FastPath.fold``,
        for a batch the native reader declined): the late indices, or None, unchanged."""
        got = self.table.add_columns(keys, times, columns, self.stream_time)
        if got is None:
            return None
        late, self.stream_time, firsts = got
        for end, i in firsts:
            self.firsts[end] = srcs[i].offset
        return cast(list[int], late)

    def add_batch(
        self, srcs: list[SourceRecord], keys: list[bytes], times: list[int], items: list[Any],
        failed: list[Failure],
    ) -> list[int]:
        if self.table is not None:
            got = self.table.add_items(_listed(keys), _listed(times), _listed(items),
                                       self.stream_time)
            if got is not None:
                late, self.stream_time, firsts = got
                for end, i in firsts:
                    self.firsts[end] = srcs[i].offset
                return cast(list[int], late)
            self.to_python()  # an item only Python folds exactly
        return super().add_batch(srcs, keys, times, items, failed)

    def refold(
        self, srcs: list[SourceRecord], keys: list[bytes], times: list[int], items: list[Any]
    ) -> None:
        if self.table is not None:
            firsts = self.table.refold(list(self.pending), _listed(keys), _listed(times),
                                       _listed(items))
            if firsts is not None:
                for end, i in firsts:
                    self.firsts[end] = srcs[i].offset
                return
            self.to_python()
        super().refold(srcs, keys, times, items)

    def _unknown_first(self, t: int) -> None:
        if self.table is None:
            super()._unknown_first(t)
            return
        ends = set(self.table.ends())
        for end in self._ends(t):
            if end in ends:
                self.firsts[end] = None
                self.table.mark(end)

    # -- closing -------------------------------------------------------------------

    def close(self, failed: list[FailedResult]) -> ClosedWindows:
        if self.table is None:
            return super().close(failed)
        limit = self.stream_time - self.grace
        self.closed_through = self.stream_time
        ending = sorted(end for end in self.table.ends() if end <= limit)
        if not ending:
            return NOTHING
        for end in ending:
            self.firsts.pop(end, None)
        if _take_sorted is not None and native_close:
            wins = [_take_sorted(self.table, end, closing.RESULT_SLICE) for end in ending]
            return ClosedWindows(sum(map(len, wins)),
                                 _sorted_slices(ending, wins, self.agg.result, self.size,
                                                failed))
        # each taken window reads as the dict fixed_windows expects (len, keys, pop)
        taken = [(end, self.table.take(end)) for end in ending]
        return fixed_windows(cast(Any, taken), self.agg.result, self.size, failed)

    # -- checkpoints ---------------------------------------------------------------

    def encode(self, full: bool, recompute: Collection[int] = ()) -> bytes:
        if self.table is None:
            return super().encode(full, recompute)
        return self.encode_after(b"", full, recompute)

    def encode_after(self, head: bytes, full: bool, recompute: Collection[int] = ()) -> bytes:
        """``head`` + ``encode(full, recompute)``, written into one buffer natively."""
        if self.table is None:
            return super().encode_after(head, full, recompute)
        grace, firsts, pending = self.grace, self.firsts, self.pending
        windows = set(self.table.ends())
        rc = {e for e in (g - grace for g in recompute)
              if e in windows and firsts.get(e) is not None}
        rc.update(e for e in pending if e in windows)
        if full:
            ends = windows
        else:
            ends = set(self.table.dirty_ends()) | rc
            ends.update(e for e in self._recomputed if e in windows)
        plan = []
        for end in sorted(ends):
            first = pending.get(end, firsts.get(end))
            mark = 0 if first is None else first + 1
            if end in rc:
                plan.append((end, mark, _PLAN_RECOMPUTE))
            else:
                whole = full or end in self._recomputed
                plan.append((end, mark, _PLAN_WHOLE if whole else _PLAN_DIRTY))
        out = self.table.encode(head, plan)
        if out is None:  # an accumulator only Python encodes (a float Min/Max)
            self.to_python()
            return super().encode_after(head, full, recompute)
        self.table.clear_dirty()
        self._recomputed = rc
        self.last_replay_from = min((pending.get(e, firsts.get(e)) or 0 for e in rc),
                                    default=None)
        return cast(bytes, out)

    def apply(self, body: bytes, version: int) -> None:
        if self.table is None:
            super().apply(body, version)
            return
        self.apply_at(bytes(body), 0, version)

    def apply_at(self, payload: bytes, start: int, version: int) -> None:
        if self.table is not None:
            raw = payload if type(payload) is bytes else bytes(payload)
            events = self.table.apply(raw, start, version)
            if events is not None:
                for end, mark, kind in events:
                    first = mark - 1 if mark else None
                    if kind == RECOMPUTE:
                        self.pending[end] = self.firsts[end] = cast(int, first)
                    else:
                        self.pending.pop(end, None)
                        self.firsts[end] = first
                return
            self.to_python()  # Python reads it (and says what is wrong, if anything)
        FixedWindowState.apply(self, payload[start:], version)

    def after_restore(self) -> None:
        if self.table is None:
            super().after_restore()
            return
        limit = self.stream_time - self.grace
        for end in [e for e in self.table.ends() if e <= limit]:
            self.table.drop_window(end)
            self.firsts.pop(end, None)
            self.pending.pop(end, None)
        self.table.clear_dirty()
        self.dirty = {}
        self._recomputed = set(self.pending)

    def groups(self) -> list[Group]:
        if self.table is None:
            return super().groups()
        sizes = self.table.sizes(self.exact_sizes, SIZE_SAMPLE)
        if sizes is None:
            self.to_python()
            return super().groups()
        grace, pending, firsts = self.grace, self.pending, self.firsts
        return [(end + grace, size, firsts.get(end)) for end, size in sizes
                if end not in pending]

    # -- gauges --------------------------------------------------------------------

    def open_windows(self) -> int:
        if self.table is None:
            return super().open_windows()
        return cast(int, self.table.open_windows())

    def open_keys(self) -> int:
        if self.table is None:
            return super().open_keys()
        return cast(int, self.table.open_keys())

    def entry_bytes(self) -> int | None:
        """Bytes of memory the table's entries take (None: the Python dicts hold them)."""
        return None if self.table is None else cast(int, self.table.nbytes())


def _sorted_slices(ends: list[int], wins: list[Any], result: Callable[[Any], Any], size: int,
                   failed: list[FailedResult]) -> Iterator[Sequence[WindowResult]]:
    """``closing.fixed_windows``' slices of windows the table sorts itself (``take_sorted``):
    the same steps (``in_order``'s), each slice's keys and numbers held natively."""
    for end, win in zip(ends, wins, strict=True):
        start = end - size
        while (rows := win.step()) is not None:
            yield FixedSlice(start, end, None, None, result, failed, rows) if rows else []


def _listed(xs: Sequence[Any]) -> list[Any]:
    return xs if type(xs) is list else list(xs)
