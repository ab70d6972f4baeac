"""The results of the windows one batch closed, built on demand and in slices.

Closing a window drops it from the state at once (the state is then exactly
that of a closed window); its results, one per key in key order, are built
only when asked for. A window over a million keys then costs the batch that
closes it nothing but the drop: the runtime builds, serializes and sends its
results ``RESULT_SLICE`` at a time, giving the event loop back between slices
(heartbeats, other partitions), and a replay, which emits nothing, never
builds them at all. Every slice is a bounded piece of work, the key sort
included (runs of ``RESULT_SLICE`` keys, merged lazily), and the order is that
of ``sorted``: results never depend on how they were sliced.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar, cast, overload

from streamremat.core.exceptions import reason_of
from streamremat.core.records import FailedResult, WindowResult

#: The most results (or keys sorted) one step of a closing builds.
RESULT_SLICE = 1_024

_T = TypeVar("_T")

#: A closed window of a per-key state (sessions, sliding): (close time, start,
#: key, end, accumulator); results go in the order of the first three.
Closed = tuple[int, int, bytes, int, Any]


def in_order(items: Iterable[_T], count: int, key: Callable[[_T], Any] | None = None,
             slice_size: int = RESULT_SLICE) -> Iterator[list[_T]]:
    """``sorted(items, key=key)`` (``count`` items) in lists of at most
    ``slice_size``. Past one slice, the items are sorted in runs of
    ``slice_size`` (an empty list after each run: the step's work was the sort)
    and merged lazily, so no step sorts or merges more than ``slice_size``.
    ``items`` is read to the end before the first item is yielded: the caller
    may then change a dict it iterates (drop what each slice used)."""
    if count <= slice_size:
        yield sorted(items, key=key)  # type: ignore[type-var, arg-type]
        return
    it = iter(items)
    runs = []
    while run := list(itertools.islice(it, slice_size)):
        runs.append(sorted(run, key=key))  # type: ignore[type-var, arg-type]
        yield []
    merged = heapq.merge(*runs, key=key)  # type: ignore[arg-type]
    while piece := list(itertools.islice(merged, slice_size)):
        yield piece


class _BuiltLazily(Sequence[WindowResult]):
    """A list of results built when first read (``_all``): read as a sequence,
    equal to a list of the same results or to another of its kind."""

    def _all(self) -> list[WindowResult]:
        raise NotImplementedError

    def __iter__(self) -> Iterator[WindowResult]:
        return iter(self._all())

    @overload
    def __getitem__(self, index: int) -> WindowResult: ...
    @overload
    def __getitem__(self, index: slice) -> list[WindowResult]: ...
    def __getitem__(self, index: int | slice) -> WindowResult | list[WindowResult]:
        return self._all()[index]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, type(self)):
            return self._all() == other._all()
        return isinstance(other, list) and self._all() == other

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._all()!r})"


class ClosedWindows(_BuiltLazily):
    """The results of the windows one batch closed, in order (``(close time,
    start, key)``), built from ``slices`` as they are needed.

    Read as a sequence, it builds every result not taken yet. ``next_slice``
    takes the next slice instead (what the runtime does for a large closing);
    a slice taken so is not part of the sequence any more. A window whose
    ``result`` raises goes to the ``failed`` list given to ``close`` when its
    slice is built, so the dead letters of a closing are complete only once
    every slice was built. ``bool`` is cheap: true while results may remain
    (they may all fail)."""

    __slots__ = ("_built", "_slices", "pending")

    def __init__(self, pending: int = 0,
                 slices: Iterator[Sequence[WindowResult]] | None = None) -> None:
        #: windows closed whose result is not built yet (an upper bound of the results)
        self.pending = pending
        self._built: list[WindowResult] = []
        self._slices = slices

    @classmethod
    def of(cls, results: list[WindowResult]) -> ClosedWindows:
        """Results built already (a closing that had to build them anyway)."""
        closed = cls()
        closed._built = results
        return closed

    def next_slice(self) -> Sequence[WindowResult] | None:
        """The next results (at most ``RESULT_SLICE``, maybe none: that step sorted
        keys, or every window of it failed); None once every one was taken."""
        if self._built:
            built, self._built = self._built, []
            return built
        if self._slices is None:
            return None
        piece = next(self._slices, None)
        if piece is None:
            self._slices = None
            self.pending = 0
        else:
            taken = piece.windows if type(piece) is FixedSlice else len(piece)
            self.pending = max(0, self.pending - taken)
        return piece

    def _all(self) -> list[WindowResult]:
        if self._slices is not None:
            self._built.extend(itertools.chain.from_iterable(self._slices))
            self._slices = None
            self.pending = 0
        return self._built

    def __bool__(self) -> bool:
        return bool(self._built) or self._slices is not None

    def __len__(self) -> int:
        return len(self._all())



#: a closing that closed nothing (nothing to take: safe to share)
NOTHING = ClosedWindows()


def fixed_windows(closing: list[tuple[int, dict[bytes, Any]]], result: Callable[[Any], Any],
                  size: int, failed: list[FailedResult]) -> ClosedWindows:
    """The results of closed tumbling/hopping windows, ``(end, accumulators by
    key)`` in order of end (all of one end close together), by key within one."""
    return ClosedWindows(sum(len(accs) for _, accs in closing),
                         _fixed_slices(closing, result, size, failed))


def _fixed_slices(closing: list[tuple[int, dict[bytes, Any]]], result: Callable[[Any], Any],
                  size: int, failed: list[FailedResult]) -> Iterator[Sequence[WindowResult]]:
    # Each accumulator is dropped as its slice is taken: a million of them are
    # not freed in one go at the end.
    for end, accs in closing:
        start = end - size
        pop = accs.pop
        for keys in in_order(accs, len(accs), slice_size=RESULT_SLICE):
            yield FixedSlice(start, end, keys, [pop(key) for key in keys], result, failed)


class FixedSlice(_BuiltLazily):
    """One slice of a closed tumbling/hopping window: its keys and accumulators,
    whose results are built when first read. The runtime may encode the
    accumulators for the sink without building them (``encoded``). ``bool`` is
    cheap: true when it holds windows (their results may all fail).

    A slice of the native table's closing (``rows``: a ``streamremat_native.WinRows``)
    holds its keys and accumulators natively: ``keys`` and ``accs`` are built from
    them only when read, which the native encoder never needs."""

    __slots__ = ("_accs", "_built", "_encoded", "_failed", "_keys", "_result", "end", "rows",
                 "start")

    def __init__(self, start: int, end: int, keys: list[bytes] | None, accs: list[Any] | None,
                 result: Callable[[Any], Any], failed: list[FailedResult],
                 rows: Any = None) -> None:
        self.start, self.end, self._keys, self._accs, self.rows = start, end, keys, accs, rows
        self._result, self._failed = result, failed
        self._built: list[WindowResult] | None = None
        self._encoded = False

    @property
    def keys(self) -> list[bytes]:
        if self._keys is None:
            self._keys = self.rows.keys()
        return cast(list[bytes], self._keys)

    @property
    def accs(self) -> list[Any]:
        if self._accs is None:
            self._accs = self.rows.accs()
        return cast(list[Any], self._accs)

    def encoded(self, encode: Callable[[FixedSlice], _T | None]) -> _T | None:
        """``encode(self)``: the sink records of the slice without building its
        results, or None (then read the results). Only before they are read,
        once: an encoder writes the results of built-in aggregations, which never
        fail, so none of the slice's windows goes to ``failed``."""
        if self._built is not None or self._encoded:
            return None
        got = encode(self)
        self._encoded = got is not None
        return got

    def _all(self) -> list[WindowResult]:
        if self._built is None:
            start, end, result = self.start, self.end, self._result
            keys, accs = self.keys, self.accs
            try:
                self._built = [WindowResult(key, start, end, result(v))
                               for key, v in zip(keys, accs, strict=True)]
            except Exception:  # one raised: find which
                self._built = results_or_failures(
                    result, [(k, start, end, v) for k, v in zip(keys, accs, strict=True)],
                    self._failed)
        return self._built

    @property
    def windows(self) -> int:
        """The windows of the slice (its results, unless some fail)."""
        return len(self._keys) if self._keys is not None else len(self.rows)

    def tail(self, skip: int) -> FixedSlice:
        """The slice without its first ``skip`` windows (a resumed closing: their
        results were committed before), nothing built; before it is read."""
        return FixedSlice(self.start, self.end, self.keys[skip:], self.accs[skip:],
                          self._result, self._failed)

    def end_counts(self) -> dict[int, int]:
        """Results per window end (one end here), without building them once encoded."""
        n = len(self)
        return {self.end: n} if n else {}

    def __bool__(self) -> bool:
        return self.windows > 0

    def __len__(self) -> int:
        return self.windows if self._encoded else len(self._all())


def closed_windows(closed: list[Closed], result: Callable[[Any], Any],
                   failed: list[FailedResult]) -> ClosedWindows:
    """The results of a per-key state's closed windows, in (close time, start, key) order."""
    if not closed:
        return NOTHING
    return ClosedWindows(len(closed), _closed_slices(closed, result, failed))


def _order(c: Closed) -> tuple[int, int, bytes]:
    return c[0], c[1], c[2]


def _closed_slices(closed: list[Closed], result: Callable[[Any], Any],
                   failed: list[FailedResult]) -> Iterator[list[WindowResult]]:
    for piece in in_order(closed, len(closed), key=_order, slice_size=RESULT_SLICE):
        try:
            yield [WindowResult(key, start, end, result(acc)) for _, start, key, end, acc in piece]
        except Exception:  # one raised: find which
            yield results_or_failures(
                result, [(k, s, e, acc) for _, s, k, e, acc in piece], failed)


def results_or_failures(
    result: Callable[[Any], Any],
    windows: list[tuple[bytes, int, int, Any]],
    failed: list[FailedResult],
) -> list[WindowResult]:
    """``result`` of each (key, start, end, accumulator); the ones that raise go to
    ``failed``. The slow path, taken only for a slice of windows where one raised."""
    out: list[WindowResult] = []
    for key, start, end, acc in windows:
        try:
            out.append(WindowResult(key, start, end, result(acc)))
        except Exception as exc:
            failed.append(FailedResult(key, start, end, "result", reason_of(exc)))
    return out
