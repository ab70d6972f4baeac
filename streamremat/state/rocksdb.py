"""The local checkpoint store: one RocksDB (rocksdict) per worker state dir.

Keys are ``b"ck/<task>/<seq as 16 hex digits>"`` so one task's frames are a
contiguous, seq-ordered key range and many tasks share one DB. There is no
separate "newest seq" index: the newest key of the range *is* the index, so
there is nothing that could disagree with the frames.

The methods are ``async`` for the interface but do their work inline: a
synced WriteBatch of a checkpoint is a few milliseconds, cheaper than a hop to
a thread.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from typing import Any

import rocksdict

from streamremat.state.base import CheckpointStore
from streamremat.state.chain import (
    RestorePoint,
    StoredEntry,
    decode_entry,
    plan_prune,
    select_restore_point,
)
from streamremat.state.exceptions import CheckpointSequenceError, CheckpointStoreUnavailable
from streamremat.state.frame import (
    DEFAULT_COMPRESS_MIN_BYTES,
    CheckpointFrame,
    TaskId,
    encode_frame,
)

__all__ = ["RocksDBCheckpointStore", "corrupt_latest"]

log = logging.getLogger("streamremat.state")

_NAMESPACE = b"ck/"


def _prefix(task: TaskId) -> bytes:
    return _NAMESPACE + task.to_bytes() + b"/"


def _key(task: TaskId, seq: int) -> bytes:
    return _prefix(task) + b"%016x" % seq


def _options() -> Any:
    options = rocksdict.Options(raw_mode=True)
    options.create_if_missing(True)
    options.set_paranoid_checks(True)
    return options


def _open(path: str | os.PathLike[str]) -> Any:
    try:
        return rocksdict.Rdict(os.fspath(path), _options())
    except Exception as exc:
        raise CheckpointStoreUnavailable(
            f"cannot open the checkpoint RocksDB at {os.fspath(path)!r}: {exc}. If it is damaged, "
            "move it away: tasks then restore from the Kafka replica or replay the source"
        ) from exc


def _newest_key(db: Any, prefix: bytes) -> bytes | None:
    it = db.iter()
    it.seek_for_prev(prefix + b"\xff")
    if it.valid():
        key: bytes = it.key()
        if key.startswith(prefix):
            return key
    return None


def _seq_of(key: bytes) -> int:
    return int(key.rsplit(b"/", 1)[1], 16)


class RocksDBCheckpointStore(CheckpointStore):
    """Checkpoint frames of many tasks in one local RocksDB."""

    name = "rocksdb"

    def __init__(
        self,
        path: str | os.PathLike[str],
        compress_min_bytes: int | None = DEFAULT_COMPRESS_MIN_BYTES,
    ) -> None:
        self.path = os.fspath(path)
        self._compress_min_bytes = compress_min_bytes
        self._db: Any = _open(self.path)
        self._sync = rocksdict.WriteOptions()
        self._sync.sync = True

    async def append(self, frame: CheckpointFrame) -> None:
        """Store one checkpoint frame atomically and durably.

        1. Check ``frame.seq`` is above the task's newest stored seq (read from
           the key range), else raise ``CheckpointSequenceError``.
        2. Encode the frame: header with offset and stream time, payload,
           checksum. Data and offset are one value, so they cannot diverge.
        3. Put it in ONE ``WriteBatch`` under ``ck/<task>/<seq>``.
        4. Write the batch with ``sync=True``: RocksDB appends it to the WAL and
           fsyncs before returning, so once this returns the checkpoint
           survives a crash or power loss; if it raises, nothing was written.
        """
        last = self._last_seq(frame.task)
        if last is not None and frame.seq <= last:
            raise CheckpointSequenceError(
                f"{frame.task}: seq {frame.seq} is not above the stored seq {last}; "
                "use RestorePoint.next_seq or last_seq() + 1"
            )
        batch = rocksdict.WriteBatch(raw_mode=True)
        batch.put(_key(frame.task, frame.seq), encode_frame(frame, self._compress_min_bytes))
        self._db.write(batch, self._sync)

    async def load(self, task: TaskId) -> RestorePoint | None:
        return select_restore_point(task, self._scan(task))

    async def prune(self, task: TaskId, keep: int) -> int:
        """Delete, in one WriteBatch, what the ``keep`` newest restorable
        checkpoints do not need. Not synced: a lost prune only keeps old frames."""
        doomed = plan_prune(self._scan(task), keep)
        if doomed:
            batch = rocksdict.WriteBatch(raw_mode=True)
            for seq in doomed:
                batch.delete(_key(task, seq))
            self._db.write(batch)
        return len(doomed)

    async def last_seq(self, task: TaskId) -> int | None:
        return self._last_seq(task)

    async def close(self) -> None:
        self._db.close()

    def _last_seq(self, task: TaskId) -> int | None:
        key = _newest_key(self._db, _prefix(task))
        return None if key is None else _seq_of(key)

    def _scan(self, task: TaskId) -> list[StoredEntry]:
        """Read every stored frame of ``task``, never raising on damaged data.

        A damaged block stops a forward iterator, so on error the range is also
        read backwards from its end: a bad newest frame must not hide older
        ones, and a bad old block must not hide newer ones. A gap that neither
        direction could read becomes one unreadable entry, which breaks chains
        across it.
        """
        prefix = _prefix(task)
        entries: dict[int, StoredEntry] = {}
        forward_error = self._read_range(task, prefix, entries, reverse=False)
        if forward_error is None:
            return list(entries.values())
        forward_end = max(entries, default=-1)
        backward_error = self._read_range(task, prefix, entries, reverse=True)
        gap_seq = forward_end + 1
        if gap_seq not in entries:
            entries[gap_seq] = StoredEntry(gap_seq, None, f"unreadable in RocksDB: {forward_error}")
        if backward_error is not None:
            log.warning("%s: RocksDB read errors in both directions: %s", task, backward_error)
        return list(entries.values())

    def _read_range(
        self, task: TaskId, prefix: bytes, into: dict[int, StoredEntry], reverse: bool
    ) -> Exception | None:
        try:
            for key, value in self._iter_range(prefix, reverse):
                seq = _seq_of(key)
                if reverse and seq in into:
                    break  # met the part the forward pass read
                into[seq] = decode_entry(task, seq, value)
        except Exception as exc:  # rocksdict raises plain Exception on corruption
            return exc
        return None

    def _iter_range(self, prefix: bytes, reverse: bool) -> Iterator[tuple[bytes, bytes]]:
        it = self._db.iter()
        if reverse:
            it.seek_for_prev(prefix + b"\xff")
        else:
            it.seek(prefix)
        while it.valid():
            key: bytes = it.key()
            if not key.startswith(prefix):
                break
            yield key, it.value()
            if reverse:
                it.prev()
            else:
                it.next()
        it.status()


def corrupt_latest(
    path: str | os.PathLike[str], task: TaskId, seq: int | None = None, mode: str = "flip"
) -> int:
    """Fault-injection helper: damage the newest (or the given) frame of ``task``
    in the RocksDB at ``path``, which must not be open. Return the damaged seq.

    ``mode="flip"`` inverts one byte in the middle of the value (what a bad
    sector does); ``"garbage"`` replaces the value; ``"truncate"`` halves it.
    """
    db = _open(path)
    try:
        if seq is None:
            newest = _newest_key(db, _prefix(task))
            if newest is None:
                raise LookupError(f"no checkpoint of {task} in {os.fspath(path)!r}")
            seq = _seq_of(newest)
        key = _key(task, seq)
        value = db.get(key)
        if value is None:
            raise LookupError(f"no checkpoint of {task} seq {seq} in {os.fspath(path)!r}")
        if mode == "flip":
            mid = len(value) // 2
            damaged = value[:mid] + bytes([value[mid] ^ 0xFF]) + value[mid + 1 :]
        elif mode == "garbage":
            damaged = b"\x00garbage\xff" * 4
        elif mode == "truncate":
            damaged = value[: len(value) // 2]
        else:
            raise ValueError(f"mode must be 'flip', 'garbage' or 'truncate', got {mode!r}")
        db.put(key, damaged)
        return seq
    finally:
        db.close()
