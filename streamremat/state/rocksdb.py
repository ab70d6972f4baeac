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

import asyncio
import logging
import os
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
# How many seqs past a damaged block a scan probes for readable frames.
_MAX_SKIP = 256


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
        if "lock" in str(exc).lower():  # RocksDB's LOCK file: another process has it open
            raise CheckpointStoreUnavailable(
                f"the checkpoint RocksDB at {os.fspath(path)!r} is in use by another live "
                "worker process; give each worker on this host its own --state-dir "
                "(STREAMREMAT_STATE_DIR), or stop the other worker first"
            ) from exc
        raise CheckpointStoreUnavailable(
            f"cannot open the checkpoint RocksDB at {os.fspath(path)!r}: {exc}. If it is damaged, "
            "move it away: tasks then restore from the Kafka replica or replay the source"
        ) from exc


def _newest_key(db: Any, prefix: bytes) -> bytes | None:
    """The newest key in ``prefix``'s range; raises when RocksDB cannot read it."""
    it = db.iter()
    it.seek_for_prev(prefix + b"\xff")
    if it.valid():
        key: bytes = it.key()
        if key.startswith(prefix):
            return key
    it.status()
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
        # Encoding (zstd, checksum) and the write in a worker thread: a full frame of
        # millions of entries is tens of MB. (rocksdict holds the GIL in ``write``.)
        await asyncio.to_thread(self._put, frame)

    def _put(self, frame: CheckpointFrame) -> None:
        batch = rocksdict.WriteBatch(raw_mode=True)
        batch.put(_key(frame.task, frame.seq), encode_frame(frame, self._compress_min_bytes))
        self._db.write(batch, self._sync)

    async def load(self, task: TaskId) -> RestorePoint | None:
        # Reading and verifying every frame (decompress, checksum): off the event loop.
        return select_restore_point(task, await asyncio.to_thread(self._scan, task))

    async def prune(self, task: TaskId, keep: int) -> int:
        """Delete, in one WriteBatch, what the ``keep`` newest restorable
        checkpoints do not need. Not synced: a lost prune only keeps old frames."""
        doomed = plan_prune(await asyncio.to_thread(self._scan, task), keep)
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
        try:
            key = _newest_key(self._db, _prefix(task))
        except Exception:  # a damaged block at the end: the scan recovers around it
            return max((e.seq for e in self._scan(task)), default=None)
        return None if key is None else _seq_of(key)

    def _scan(self, task: TaskId) -> list[StoredEntry]:
        """Read every stored frame of ``task``, never raising on damaged data.

        A damaged block stops an iterator, and a bad newest frame must not hide
        older ones, nor a bad old block newer ones. So on an error the seq after
        the last good one is recorded as unreadable (which breaks chains across
        it) and reading resumes by seeking to the following seqs, up to
        ``_MAX_SKIP`` of them.
        """
        prefix = _prefix(task)
        entries: dict[int, StoredEntry] = {}
        error = self._read_range(task, prefix, prefix, entries)
        while error is not None:
            gap = max(entries, default=-1) + 1
            entries.setdefault(gap, StoredEntry(gap, None, f"unreadable in RocksDB: {error}"))
            log.warning("%s: RocksDB read error after seq %d: %s", task, gap - 1, error)
            for probe in range(gap + 1, gap + 1 + _MAX_SKIP):
                error = self._read_range(task, prefix, _key(task, probe), entries)
                if error is None or max(entries) > gap:
                    break  # done, or read past the damage (and maybe hit more)
            else:
                break  # nothing readable within reach
        return list(entries.values())

    def _read_range(
        self, task: TaskId, prefix: bytes, start: bytes, into: dict[int, StoredEntry]
    ) -> Exception | None:
        """Decode ``prefix``'s keys from ``start`` on into ``into``; return the
        read error that stopped it, if any."""
        try:
            it = self._db.iter()
            it.seek(start)
            while it.valid():
                key: bytes = it.key()
                if not key.startswith(prefix):
                    break
                seq = _seq_of(key)
                into[seq] = decode_entry(task, seq, it.value())
                it.next()
            it.status()
        except Exception as exc:  # rocksdict raises plain Exception on corruption
            return exc
        return None


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
