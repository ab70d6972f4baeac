"""Task identity and the binary checkpoint frame.

A frame is what every store keeps per checkpoint: a fixed header (identity,
chain position, source offset, stream time), the opaque ``meta`` and ``payload``
from the runtime, and an xxhash64 checksum over everything before it. The state
layer never interprets the payload; it only guarantees that what it returns is
byte for byte what was appended.

Layout (big endian)::

    magic "SRCK" | version u8 | flags u8 | kind u8 | clean u8
    seq u64 | base_seq u64 | offset i64 | stream_time_ms i64
    task_len u16 | meta_len u32 | stored_len u32 | raw_len u32
    task bytes | meta bytes | payload bytes (zstd when FLAG_ZSTD)
    xxh64(all of the above) u64
"""

from __future__ import annotations

import enum
import re
import struct
from dataclasses import dataclass

import xxhash
import zstandard

from streamremat.state.exceptions import CorruptCheckpoint, UnsupportedCheckpointVersion

__all__ = [
    "FORMAT_VERSION",
    "CheckpointFrame",
    "FrameKind",
    "TaskId",
    "decode_frame",
    "encode_frame",
]

MAGIC = b"SRCK"
FORMAT_VERSION = 1
FLAG_ZSTD = 0x01
_KNOWN_FLAGS = FLAG_ZSTD
_HEADER = struct.Struct(">4sBBBBQQqqHIII")
_CHECKSUM = struct.Struct(">Q")
_MIN_LEN = _HEADER.size + _CHECKSUM.size
# Compressing small payloads costs more time than the bytes it saves.
DEFAULT_COMPRESS_MIN_BYTES = 64 * 1024
_ZSTD_LEVEL = 3
# Kafka topic names use this alphabet; operator names follow it so a task's
# string form has no separator inside a part and stays a valid key prefix.
_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")


@dataclass(frozen=True, order=True)
class TaskId:
    """One operator on one source partition: the unit of checkpoint and restore.

    ``str(task)`` is ``"<operator>:<topic>:<partition>"``; it is stable across
    versions because it is part of every stored key.
    """

    operator: str
    topic: str
    partition: int

    def __post_init__(self) -> None:
        for field, value in (("operator", self.operator), ("topic", self.topic)):
            if not _NAME.fullmatch(value):
                raise ValueError(
                    f"TaskId.{field}={value!r}: use 1-249 characters of [A-Za-z0-9._-] "
                    "(the Kafka topic alphabet), so the task can be part of a storage key"
                )
        if isinstance(self.partition, bool) or not isinstance(self.partition, int):
            raise ValueError(f"TaskId.partition must be an int, got {self.partition!r}")
        if self.partition < 0:
            raise ValueError(f"TaskId.partition must be >= 0, got {self.partition}")

    def __str__(self) -> str:
        return f"{self.operator}:{self.topic}:{self.partition}"

    def to_bytes(self) -> bytes:
        """The stable key form (ASCII of ``str(self)``)."""
        return str(self).encode("ascii")

    @classmethod
    def parse(cls, text: str | bytes) -> TaskId:
        """Inverse of ``str()``/``to_bytes()``; raises ``ValueError`` on bad input."""
        if isinstance(text, bytes):
            text = text.decode("ascii")
        parts = text.split(":")
        if len(parts) != 3 or not parts[2].isdigit():
            raise ValueError(f"not a task id (operator:topic:partition): {text!r}")
        return cls(parts[0], parts[1], int(parts[2]))


class FrameKind(enum.IntEnum):
    """FULL: the task's whole open-window state. DELTA: changes since the
    previous checkpoint of the same chain."""

    FULL = 0
    DELTA = 1


@dataclass(frozen=True)
class CheckpointFrame:
    """One checkpoint of one task, as handed to and returned by a store.

    ``base_seq`` is the seq of the FULL frame the chain starts at (``== seq`` for a
    FULL). A DELTA must directly follow its predecessor: seq ``n`` applies on top
    of seq ``n - 1``; a gap breaks the chain at restore. ``offset`` is the next
    source offset to read after applying this frame.
    """

    task: TaskId
    seq: int
    kind: FrameKind
    base_seq: int
    offset: int
    stream_time_ms: int
    clean: bool
    meta: bytes
    payload: bytes

    def __post_init__(self) -> None:
        if not 0 <= self.seq < 2**64:
            raise ValueError(f"seq must be in [0, 2**64), got {self.seq}")
        if self.kind is FrameKind.FULL and self.base_seq != self.seq:
            raise ValueError(f"a FULL frame starts its own chain: base_seq must be seq={self.seq}")
        if self.kind is FrameKind.DELTA and not 0 <= self.base_seq < self.seq:
            raise ValueError(
                f"a DELTA frame's base_seq ({self.base_seq}) must be an older FULL's seq "
                f"(< seq={self.seq})"
            )
        if self.offset < 0:
            raise ValueError(f"offset must be >= 0, got {self.offset}")


def encode_frame(
    frame: CheckpointFrame, compress_min_bytes: int | None = DEFAULT_COMPRESS_MIN_BYTES
) -> bytes:
    """Encode ``frame``; zstd-compress the payload when it has at least
    ``compress_min_bytes`` bytes (``None`` disables) and compression helps."""
    payload = frame.payload
    flags = 0
    if compress_min_bytes is not None and len(payload) >= compress_min_bytes:
        packed = zstandard.ZstdCompressor(level=_ZSTD_LEVEL).compress(payload)
        if len(packed) < len(payload):
            payload, flags = packed, FLAG_ZSTD
    task = frame.task.to_bytes()
    header = _HEADER.pack(
        MAGIC,
        FORMAT_VERSION,
        flags,
        int(frame.kind),
        int(frame.clean),
        frame.seq,
        frame.base_seq,
        frame.offset,
        frame.stream_time_ms,
        len(task),
        len(frame.meta),
        len(payload),
        len(frame.payload),
    )
    body = b"".join((header, task, frame.meta, payload))
    return body + _CHECKSUM.pack(xxhash.xxh64_intdigest(body))


def decode_frame(blob: bytes) -> CheckpointFrame:
    """Verify and decode a frame; raise ``CorruptCheckpoint`` on any mismatch.

    The checksum is verified first, so a damaged header is reported as damage
    rather than as, say, an unknown version.
    """
    if len(blob) < _MIN_LEN:
        raise CorruptCheckpoint(f"frame too short: {len(blob)} bytes < {_MIN_LEN}")
    body, (checksum,) = blob[:-8], _CHECKSUM.unpack(blob[-8:])
    if xxhash.xxh64_intdigest(body) != checksum:
        raise CorruptCheckpoint("frame checksum mismatch")
    (
        magic,
        version,
        flags,
        kind,
        clean,
        seq,
        base_seq,
        offset,
        stream_time_ms,
        task_len,
        meta_len,
        stored_len,
        raw_len,
    ) = _HEADER.unpack_from(body)
    if magic != MAGIC:
        raise CorruptCheckpoint(f"bad magic {magic!r}")
    if version != FORMAT_VERSION:
        raise UnsupportedCheckpointVersion(
            f"checkpoint format version {version}; this build reads {FORMAT_VERSION}: "
            "upgrade streamremat, or delete the checkpoints to restart from the source"
        )
    if flags & ~_KNOWN_FLAGS or kind not in (0, 1) or clean not in (0, 1):
        raise CorruptCheckpoint(f"bad header fields flags={flags} kind={kind} clean={clean}")
    if _HEADER.size + task_len + meta_len + stored_len != len(body):
        raise CorruptCheckpoint("frame length does not match its header")
    pos = _HEADER.size
    task_raw = body[pos : pos + task_len]
    pos += task_len
    meta = body[pos : pos + meta_len]
    payload = body[pos + meta_len :]
    try:
        task = TaskId.parse(task_raw)
        if flags & FLAG_ZSTD:
            payload = zstandard.ZstdDecompressor().decompress(payload, max_output_size=raw_len)
        if len(payload) != raw_len:
            raise CorruptCheckpoint(f"payload is {len(payload)} bytes, header says {raw_len}")
        return CheckpointFrame(
            task=task,
            seq=seq,
            kind=FrameKind(kind),
            base_seq=base_seq,
            offset=offset,
            stream_time_ms=stream_time_ms,
            clean=bool(clean),
            meta=meta,
            payload=payload,
        )
    except (ValueError, UnicodeDecodeError, zstandard.ZstdError) as exc:
        raise CorruptCheckpoint(f"undecodable frame: {exc}") from exc
