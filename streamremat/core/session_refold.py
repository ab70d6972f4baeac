"""Sessions under a rematerialization plan: their checkpoint body (version 2) and
the replay that rebuilds the sessions a checkpoint wrote as *recompute*.

Why the replay is exact. A pending session ``S`` (key ``k``, span
``[first, last]``, first record at ``o``) was built in the failure-free run only
from records at offsets ``>= o``: a session that took an earlier record would
have given ``S`` that record's smaller offset when merged. The replay starts at
the earliest pending session's first record, with stream time set to what it
was just after that record, and leaves out the records whose fold raised (they
moved no stream time; a session a raising fold touched has an unknown first
offset and is never recomputed), so every record sees the failure-free stream
time. It runs the session logic for the keys of pending sessions on a scratch
copy that starts empty. A record that in the failure-free run joined a session
older than the replay forms a fragment here whose span lies inside that
session's; a record that touches the fragment would have touched that session
then, so no record of ``S`` ever meets a fragment, and ``S``'s own sub-sessions
see the same records, times and merges as before. The scratch session with
``S``'s key and span is ``S``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from streamremat.core.codec import (
    read_bytes,
    read_svarint,
    read_uvarint,
    sorted_in_runs,
    write_bytes,
    write_svarint,
    write_uvarint,
)
from streamremat.core.exceptions import StateFormatError
from streamremat.core.records import SourceRecord

if TYPE_CHECKING:
    from streamremat.core.keyed_state import SessionState


class _Pending:
    """The accumulator of a restored session that waits for its replay."""

    def __repr__(self) -> str:
        return "PENDING"


PENDING: Any = _Pending()

STORED = 0
RECOMPUTE = 1


def encode_sessions(state: SessionState, full: bool, recompute: Collection[int]) -> bytes:
    """Version 2: the offsets of failed folds still needed (at or after the
    smallest known first offset), then per key its sessions, each as span, first
    offset (+1, 0 unknown), stream time after its first record, then ``STORED``
    and the accumulator or ``RECOMPUTE``. A delta writes the dirty keys and every
    key whose set of recompute sessions changed (a session that is stored again
    is written whole; one that turns recompute drops its older accumulator)."""
    reach = state.gap + 1 + state.grace
    groups = set(recompute)
    sessions = state.sessions
    rc_now: dict[bytes, frozenset[int]] = {}
    if groups or state.refolding is not None:
        for key, mine in sessions.items():
            firsts = frozenset(
                s[0] for s in mine
                if s[2] is PENDING or (s[3] >= 0 and s[1] + reach in groups)
            )
            if firsts:
                rc_now[key] = firsts
    last = state._recomputed
    if full:
        keys = sorted_in_runs(sessions)
    else:
        changed = {k for k in rc_now.keys() | last.keys() if rc_now.get(k) != last.get(k)}
        keys = sorted_in_runs(state.dirty | changed)
    state.dirty = set()
    state._recomputed = rc_now
    out = bytearray()
    _write_failed(state, out)
    encode = state.agg.encode
    write_uvarint(out, len(keys))
    for key in keys:
        write_bytes(out, key)
        entries = sessions.get(key, ())
        rc = rc_now.get(key, frozenset())
        write_uvarint(out, len(entries))
        for a, b, acc, o, st in entries:
            write_svarint(out, a)
            write_uvarint(out, b - a)
            write_uvarint(out, o + 1)
            write_svarint(out, st - a)
            if a in rc:
                out.append(RECOMPUTE)
            else:
                out.append(STORED)
                write_bytes(out, encode(acc))
    # Recompute sessions of keys a delta did not rewrite need their replay too.
    state.last_replay_from = min(
        (s[3] for key, firsts in rc_now.items() for s in sessions[key] if s[0] in firsts),
        default=None,
    )
    return bytes(out)


def _write_failed(state: SessionState, out: bytearray) -> None:
    failed = state.failed_offsets
    if failed:
        floor = min((s[3] for mine in state.sessions.values() for s in mine if s[3] >= 0),
                    default=None)
        # The smallest known first offset never decreases, so this is for good.
        failed[:] = [] if floor is None else [o for o in failed if o >= floor]
    write_uvarint(out, len(failed))
    prev = 0
    for o in failed:
        write_uvarint(out, o - prev)
        prev = o


def apply_sessions(state: SessionState, body: bytes, version: int) -> None:
    """Apply a full or delta session body; version 1 (no offsets) restores every
    session with an unknown first offset."""
    decode = state.agg.decode
    pos = 0
    if version >= 2:
        n_failed, pos = read_uvarint(body, pos)
        failed, prev = [], 0
        for _ in range(n_failed):
            step, pos = read_uvarint(body, pos)
            prev += step
            failed.append(prev)
        state.failed_offsets = failed
    n_keys, pos = read_uvarint(body, pos)
    for _ in range(n_keys):
        key, pos = read_bytes(body, pos)
        n, pos = read_uvarint(body, pos)
        entries = []
        for _ in range(n):
            a, pos = read_svarint(body, pos)
            span, pos = read_uvarint(body, pos)
            if version < 2:
                raw, pos = read_bytes(body, pos)
                entries.append([a, a + span, decode(raw), -1, a])
                continue
            o1, pos = read_uvarint(body, pos)
            st, pos = read_svarint(body, pos)
            kind = body[pos]
            pos += 1
            if kind == RECOMPUTE:
                if o1 == 0:
                    raise StateFormatError("a recompute session without a first offset")
                acc = PENDING
            elif kind == STORED:
                raw, pos = read_bytes(body, pos)
                acc = decode(raw)
            else:
                raise StateFormatError(f"unknown session kind {kind}")
            entries.append([a, a + span, acc, o1 - 1, a + st])
        if entries:
            state.sessions[key] = entries
        else:
            state.sessions.pop(key, None)
    if pos != len(body):
        raise StateFormatError("trailing bytes after SessionState state")


def merge_sessions(a: list[Any], b: list[Any], merge: Callable[[Any, Any], Any]) -> list[Any]:
    """Two sessions bridged by a record: span, merged accumulators, and the first
    record of the earlier one by offset (unknown if either is unknown)."""
    if a[3] < 0 or b[3] < 0:
        o, st = -1, a[4]
    else:
        o, st = (a[3], a[4]) if a[3] <= b[3] else (b[3], b[4])
    return [a[0], max(a[1], b[1]), merge(a[2], b[2]), o, st]


@dataclass
class Refold:
    """The replay rebuilding a restored state's pending sessions (module docstring)."""

    #: (offset of the earliest pending session's first record, stream time just after it)
    start_at: tuple[int, int]
    keys: frozenset[bytes]
    failed: frozenset[int]
    st: int
    scratch: dict[bytes, list[list[Any]]] = field(default_factory=dict)

    @classmethod
    def start(cls, state: SessionState) -> Refold:
        pending = [(s[3], s[4], key) for key, mine in state.sessions.items()
                   for s in mine if s[2] is PENDING]
        o, st, _ = min(pending)
        return cls((o, st), frozenset(k for _, _, k in pending),
                   frozenset(state.failed_offsets), st)

    def feed(
        self, state: SessionState, srcs: list[SourceRecord], keys: list[bytes],
        times: list[int], items: list[Any],
    ) -> None:
        """The session logic of ``SessionState.add_batch`` for the pending keys, on
        the scratch sessions; every other record only moves stream time."""
        gap, reach = state.gap, state.gap + 1 + state.grace
        add, zero, merge = state.agg.add, state.agg.zero, state.agg.merge
        o_min, st = self.start_at[0], self.st
        wanted, failed, scratch = self.keys, self.failed, self.scratch
        for i, t in enumerate(times):
            offset = srcs[i].offset
            if offset < o_min or offset in failed:
                continue
            now = t if t > st else st
            key = keys[i]
            if key not in wanted:
                st = now
                continue
            mine = scratch.setdefault(key, [])
            touching = [s for s in mine if s[0] - gap <= t <= s[1] + gap and s[1] + reach > now]
            st = now
            try:
                if not touching:
                    if t + reach <= now:
                        continue
                    mine.append([t, t, add(zero(), items[i]), offset, now])
                    mine.sort(key=lambda s: s[0])
                    continue
                merged = touching[0]
                for other in touching[1:]:
                    merged = merge_sessions(merged, other, merge)
                merged = [min(merged[0], t), max(merged[1], t), add(merged[2], items[i]),
                          merged[3], merged[4]]
            except Exception:
                # Only a fragment of a session older than the replay can get here (a
                # raise in a pending session's lineage would have made its first offset
                # unknown); the failure-free run folded this record without error, so
                # stream time moves as it did then.
                continue
            kept = [s for s in mine if not any(s is x for x in touching)]
            kept.append(merged)
            kept.sort(key=lambda s: s[0])
            scratch[key] = kept
        self.st = st

    def finish(self, state: SessionState, exact: bool) -> None:
        """Put each rebuilt session in place of its placeholder; ``exact``: raise if
        one is missing or its first record or the stream time differ."""
        if exact and self.st != state.stream_time:
            raise StateFormatError(
                f"recomputing sessions ended at stream time {self.st}, the checkpoint says "
                f"{state.stream_time}: the source or the operator changed since"
            )
        dropped = False
        for key in self.keys:
            mine = state.sessions.get(key)
            if not mine:
                continue
            rebuilt = {(s[0], s[1]): s for s in self.scratch.get(key, ())}
            keep = []
            for s in mine:
                if s[2] is PENDING:
                    got = rebuilt.get((s[0], s[1]))
                    if got is None or got[3] != s[3] or got[4] != s[4]:
                        if exact:
                            raise StateFormatError(
                                f"recomputing session [{s[0]}, {s[1]}] of key {key!r} did not "
                                "rebuild it: the source or the operator changed since"
                            )
                        dropped = True
                        continue
                    s[2] = got[2]
                keep.append(s)
            if keep:
                state.sessions[key] = keep
            else:
                del state.sessions[key]
        if dropped:  # records were skipped: the close heap must forget what is gone
            state.after_restore()
