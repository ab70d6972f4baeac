"""Chain selection and prune planning, shared by every store.

Stores only do I/O: they list a task's stored frames as ``StoredEntry`` values
(decoded, or with the reason they could not be) and hand them here. Keeping the
fallback rule in one function is what makes the RocksDB store and the Kafka
replica agree on which checkpoint a task restores from.

The rule: a chain is a FULL frame followed by DELTA frames with consecutive
seqs and the FULL's seq as ``base_seq``. A frame is *restorable* when it and
every earlier frame of its chain verify. Restore uses the newest restorable
frame; every newer frame it had to skip is reported in ``fallbacks``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from streamremat.state.exceptions import CorruptCheckpoint
from streamremat.state.frame import CheckpointFrame, FrameKind, TaskId, decode_frame

__all__ = ["RestorePoint", "StoredEntry", "decode_entry", "plan_prune", "select_restore_point"]

log = logging.getLogger("streamremat.state")


@dataclass(frozen=True)
class StoredEntry:
    """One stored seq of a task: its frame, or why it is unreadable."""

    seq: int
    frame: CheckpointFrame | None
    error: str | None = None


@dataclass(frozen=True)
class RestorePoint:
    """What the runtime applies to rebuild a task: ``chain[0]`` is the FULL, the
    rest are DELTAs in seq order, and the last frame is the restore point.

    ``fallbacks`` has one line per newer frame that was skipped (corrupt,
    unreadable, or its chain broken), for a log line and a counter.
    ``next_seq`` is one past the highest seq present in the store, valid or
    not: the seq for the next append (which should be a FULL after a restore).
    """

    task: TaskId
    chain: tuple[CheckpointFrame, ...]
    fallbacks: tuple[str, ...]
    next_seq: int

    @property
    def last(self) -> CheckpointFrame:
        """The frame whose offset/stream time/meta the restored state is at."""
        return self.chain[-1]

    @property
    def seq(self) -> int:
        return self.last.seq

    @property
    def offset(self) -> int:
        return self.last.offset

    @property
    def stream_time_ms(self) -> int:
        return self.last.stream_time_ms

    @property
    def meta(self) -> bytes:
        return self.last.meta

    @property
    def clean(self) -> bool:
        return self.last.clean


def decode_entry(
    task: TaskId, seq: int, blob: bytes | None, error: str | None = None
) -> StoredEntry:
    """Decode one stored value into an entry, never raising.

    A frame stored under another task's or seq's key counts as corrupt: a
    misplaced frame would otherwise restore the wrong state silently.
    """
    if blob is None:
        return StoredEntry(seq, None, error or "unreadable")
    try:
        frame = decode_frame(blob)
    except CorruptCheckpoint as exc:
        return StoredEntry(seq, None, str(exc))
    if frame.task != task or frame.seq != seq:
        return StoredEntry(seq, None, f"frame is {frame.task} seq {frame.seq}, stored elsewhere")
    return StoredEntry(seq, frame)


def _restorable_chains(
    entries: Sequence[StoredEntry],
) -> tuple[list[tuple[CheckpointFrame, ...]], dict[int, str]]:
    """Every restorable chain (one per restorable frame, in seq order) and the
    reason each other seq is not restorable."""
    chains: list[tuple[CheckpointFrame, ...]] = []
    problems: dict[int, str] = {}
    current: list[CheckpointFrame] = []  # the open valid chain; [] once broken
    for entry in sorted(entries, key=lambda e: e.seq):
        frame = entry.frame
        if frame is None:
            problems[entry.seq] = entry.error or "unreadable"
            current = []
        elif frame.kind is FrameKind.FULL:
            current = [frame]
            chains.append(tuple(current))
        elif current and frame.base_seq == current[0].seq and frame.seq == current[-1].seq + 1:
            current.append(frame)
            chains.append(tuple(current))
        else:
            if current and frame.base_seq == current[0].seq:
                why = f"missing delta(s) seq {current[-1].seq + 1}..{frame.seq - 1}"
            else:
                why = f"its chain from FULL seq {frame.base_seq} is not restorable"
            problems[entry.seq] = f"delta not restorable: {why}"
            current = []
    return chains, problems


def select_restore_point(task: TaskId, entries: Iterable[StoredEntry]) -> RestorePoint | None:
    """The newest restorable chain of ``task``, or ``None`` when nothing is.

    Every skipped frame newer than the chosen one is logged as a warning here
    (so a fallback is never silent, even when the result is ``None``) and
    listed in ``fallbacks``.
    """
    entries = list(entries)
    if not entries:
        return None
    chains, problems = _restorable_chains(entries)
    chosen = chains[-1] if chains else None
    floor = chosen[-1].seq if chosen else -1
    fallbacks = tuple(
        f"{task} seq {seq}: {why}" for seq, why in sorted(problems.items()) if seq > floor
    )
    for line in fallbacks:
        log.warning("checkpoint skipped on restore: %s", line)
    if chosen is None:
        log.warning("no restorable checkpoint for %s among %d stored", task, len(entries))
        return None
    next_seq = max(e.seq for e in entries) + 1
    return RestorePoint(task=task, chain=chosen, fallbacks=fallbacks, next_seq=next_seq)


def plan_prune(entries: Iterable[StoredEntry], keep: int) -> list[int]:
    """Seqs to delete so that the ``keep`` newest restorable checkpoints stay
    restorable: everything older than the oldest FULL those chains start at.

    Frames newer than that FULL are never deleted, even unreadable ones; and
    with nothing restorable nothing is deleted (it may be evidence).
    """
    if keep < 1:
        raise ValueError(f"keep must be >= 1 (the newest checkpoint must survive), got {keep}")
    entries = list(entries)
    chains, _ = _restorable_chains(entries)
    if not chains:
        return []
    cutoff = min(chain[0].seq for chain in chains[-keep:])
    return sorted(e.seq for e in entries if e.seq < cutoff)
