"""How far a closing whose results span several transactions got, per operator.

A closing's windows come out in one order, the same in every run (``core/closing.py``:
by close time, start, key; within one operator the close time grows with the
end, so ``(end, start, key)`` is that order). All windows with one ``(end, start)``
close in one batch, whatever the batches are (they close together, when stream
time passes their close time), so a position in that order is ``(end, start, n)``:
every window before the windows ``(end, start)``, and the first ``n`` of them.

Committed as offset metadata (``commit_meta``: ``cl``) with the offset of the
batch that closed them, it tells the next owner, which replays to that offset
and closes the same windows again, which of them are out already: it skips
exactly those (``fixed``, ``listed``), results and failures alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from streamremat.core.closing import FixedSlice
from streamremat.core.records import FailedResult, WindowResult

#: (end_ms, start_ms, n): a position in an operator's order of closed windows
Marker = tuple[int, int, int]


@dataclass(frozen=True)
class Hold:
    """Where the transactions of a closing commit until all of it is out: the
    first offset of the batch that closed it, and the stream times there."""

    offset: int
    stream_times: dict[str, int]


class ClosingProgress:
    """Per operator: the position of the last window sent (or skipped), and the
    markers a commit stores."""

    def __init__(self) -> None:
        #: what the commits of this owner store (``cl``): per operator, the last
        #: window out; from a recovery, the last one the previous owner committed
        self.markers: dict[str, Marker] = {}
        #: operators whose marker this owner's sending reached or passed: a commit
        #: of everything sent so far covers it, and drops it
        self._reached: set[str] = set()
        #: per operator, the position of the last window seen (sent or skipped)
        self._pos: dict[str, Marker] = {}

    def resume(self, markers: dict[str, Marker]) -> None:
        """Start from the markers committed by the previous owner."""
        self.markers = dict(markers)
        self._reached.clear()
        self._pos.clear()

    def __contains__(self, name: str) -> bool:
        return name in self.markers

    def committed_all(self) -> None:
        """A commit covered every window sent so far, with the offset past the
        batches that closed them: the markers reached are no longer needed."""
        for name in self._reached:
            self.markers.pop(name, None)
        self._reached.clear()

    def _advance(self, name: str, end: int, start: int, count: int) -> Marker:
        """Move ``name``'s position over ``count`` windows of ``(end, start)``."""
        pos = self._pos.get(name)
        before = pos[2] if pos is not None and pos[:2] == (end, start) else 0
        new = self._pos[name] = (end, start, before + count)
        marker = self.markers.get(name)
        if marker is None or new > marker:
            self.markers[name] = new
        if marker is None or (end, start) >= marker[:2]:
            self._reached.add(name)
        return new

    def fixed(self, name: str, piece: FixedSlice) -> FixedSlice | None:
        """``piece`` without the windows already committed (None: all of them)."""
        end, start, count = piece.end, piece.start, piece.windows
        marker = self.markers.get(name)
        pos = self._pos.get(name)
        before = pos[2] if pos is not None and pos[:2] == (end, start) else 0
        self._advance(name, end, start, count)
        if marker is None or (end, start) > marker[:2]:
            return piece
        if (end, start) < marker[:2]:
            return None
        skip = min(max(0, marker[2] - before), count)
        if skip == count:
            return None
        return piece.tail(skip) if skip else piece

    def listed(self, name: str, results: Sequence[WindowResult],
               failed: list[FailedResult]) -> tuple[Sequence[WindowResult], list[FailedResult]]:
        """A built slice (``results``, and ``failed``: the windows of it whose
        ``result`` raised, both in the closing's order) without the windows
        already committed."""
        marker = self.markers.get(name)
        if not failed and (marker is None or (
                results and (results[0].end_ms, results[0].start_ms) > marker[:2])):
            for (end, start), n in _groups([(r.end_ms, r.start_ms) for r in results]):
                self._advance(name, end, start, n)
            return results, failed
        windows = sorted([((r.end_ms, r.start_ms, r.key), r) for r in results]
                         + [((f.end_ms, f.start_ms, f.key), f) for f in failed],
                         key=lambda pair: pair[0])
        kept_results: list[WindowResult] = []
        kept_failed: list[FailedResult] = []
        for (end, start, _), window in windows:
            position = self._advance(name, end, start, 1)
            if marker is not None and position <= marker:
                continue  # committed by the previous owner
            if isinstance(window, WindowResult):
                kept_results.append(window)
            else:
                kept_failed.append(window)
        return kept_results, kept_failed


def _groups(keys: list[tuple[int, int]]) -> list[tuple[tuple[int, int], int]]:
    """Runs of equal ``(end, start)`` and their lengths, in order."""
    out: list[tuple[tuple[int, int], int]] = []
    for key in keys:
        if out and out[-1][0] == key:
            out[-1] = (key, out[-1][1] + 1)
        else:
            out.append((key, 1))
    return out
