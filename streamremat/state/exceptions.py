"""Errors of the checkpoint state layer.

One module so callers can catch the whole layer with ``StateError`` and tell the
recoverable cases (a bad frame: fall back) from the fatal ones (a misuse).
"""

from __future__ import annotations

__all__ = [
    "CheckpointSequenceError",
    "CheckpointStoreUnavailable",
    "CorruptCheckpoint",
    "StateError",
    "UnsupportedCheckpointVersion",
]


class StateError(Exception):
    """Base class of every error raised by ``streamremat.state``."""


class CorruptCheckpoint(StateError):
    """A stored checkpoint frame failed verification (checksum, length, magic,
    incomplete chunks). Restore skips it and falls back to an older one."""


class UnsupportedCheckpointVersion(CorruptCheckpoint):
    """The frame was written by a format version this build cannot read.

    A subclass of ``CorruptCheckpoint`` because restore treats it the same way
    (fall back), but the message tells the operator to upgrade rather than to
    suspect the disk.
    """


class CheckpointSequenceError(StateError, ValueError):
    """An append would not keep ``seq`` strictly increasing for its task.

    Restoring picks the newest seq, so a stale or reused seq could silently
    shadow newer state; this is a bug in the caller, never retried.
    """


class CheckpointStoreUnavailable(StateError):
    """A store cannot be opened or reached (RocksDB open failed, broker down)."""
