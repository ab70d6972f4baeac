"""The checkpoint frame codec: round trip, damage detection, compression."""

from __future__ import annotations

import os
import struct

import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from streamremat.state import (
    CheckpointFrame,
    CorruptCheckpoint,
    FrameKind,
    TaskId,
    UnsupportedCheckpointVersion,
    decode_frame,
    encode_frame,
)
from streamremat.state.frame import FLAG_ZSTD

TASK = TaskId("counts", "clicks", 3)


def frame(
    payload: bytes = b"state", seq: int = 7, kind: FrameKind = FrameKind.FULL, **kw: object
) -> CheckpointFrame:
    fields: dict[str, object] = {
        "task": TASK,
        "seq": seq,
        "kind": kind,
        "base_seq": seq if kind is FrameKind.FULL else seq - 1,
        "offset": 1234,
        "stream_time_ms": 1_700_000_000_000,
        "clean": False,
        "meta": b"tuner",
        "payload": payload,
    }
    fields.update(kw)
    return CheckpointFrame(**fields)  # type: ignore[arg-type]


names = st.from_regex(r"[A-Za-z0-9._-]{1,20}", fullmatch=True)


@settings(max_examples=200)
@given(
    task=st.builds(TaskId, names, names, st.integers(0, 10_000)),
    seq=st.integers(1, 2**64 - 1),
    delta=st.booleans(),
    offset=st.integers(0, 2**63 - 1),
    stream_time_ms=st.integers(-(2**63), 2**63 - 1),
    clean=st.booleans(),
    meta=st.binary(max_size=64),
    payload=st.binary(max_size=4096),
    compress_min=st.sampled_from([None, 0, 100]),
)
def test_round_trip(
    task: TaskId,
    seq: int,
    delta: bool,
    offset: int,
    stream_time_ms: int,
    clean: bool,
    meta: bytes,
    payload: bytes,
    compress_min: int | None,
) -> None:
    original = CheckpointFrame(
        task=task,
        seq=seq,
        kind=FrameKind.DELTA if delta else FrameKind.FULL,
        base_seq=seq - 1 if delta else seq,
        offset=offset,
        stream_time_ms=stream_time_ms,
        clean=clean,
        meta=meta,
        payload=payload,
    )
    assert decode_frame(encode_frame(original, compress_min)) == original


@settings(max_examples=25)
@given(payload=st.binary(max_size=40), meta=st.binary(max_size=8))
def test_every_single_byte_flip_is_detected(payload: bytes, meta: bytes) -> None:
    blob = encode_frame(frame(payload, meta=meta))
    for pos in range(len(blob)):
        for mask in (0x01, 0x80, 0xFF):
            damaged = blob[:pos] + bytes([blob[pos] ^ mask]) + blob[pos + 1 :]
            with pytest.raises(CorruptCheckpoint):
                decode_frame(damaged)


@pytest.mark.parametrize("cut", [0, 1, 10, 40, -1, -8, -9])
def test_truncation_is_detected(cut: int) -> None:
    blob = encode_frame(frame(b"x" * 100))
    with pytest.raises(CorruptCheckpoint):
        decode_frame(blob[:cut])
    with pytest.raises(CorruptCheckpoint):
        decode_frame(blob + b"\x00")


def test_large_compressible_payload_is_compressed() -> None:
    payload = b"window-accumulator " * 20_000
    blob = encode_frame(frame(payload))
    assert len(blob) < len(payload) // 10
    assert blob[5] & FLAG_ZSTD
    assert decode_frame(blob).payload == payload


def test_small_or_incompressible_payload_is_stored_raw() -> None:
    small = encode_frame(frame(b"a" * 1000))
    assert not small[5] & FLAG_ZSTD
    noise = os.urandom(200_000)
    raw = encode_frame(frame(noise))
    assert not raw[5] & FLAG_ZSTD
    assert decode_frame(raw).payload == noise
    assert not encode_frame(frame(b"a" * 200_000), compress_min_bytes=None)[5] & FLAG_ZSTD


def test_damaged_compressed_payload_is_detected() -> None:
    blob = bytearray(encode_frame(frame(b"abc" * 50_000)))
    blob[len(blob) // 2] ^= 0x10
    with pytest.raises(CorruptCheckpoint):
        decode_frame(bytes(blob))


def test_future_version_is_reported_as_such() -> None:
    blob = bytearray(encode_frame(frame()))
    blob[4] = 99
    body = bytes(blob[:-8])
    resealed = body + struct.pack(">Q", xxhash.xxh64_intdigest(body))
    with pytest.raises(UnsupportedCheckpointVersion, match="upgrade"):
        decode_frame(resealed)


def test_task_id_string_form_is_stable_and_parses_back() -> None:
    assert str(TASK) == "counts:clicks:3"
    assert TASK.to_bytes() == b"counts:clicks:3"
    assert TaskId.parse("counts:clicks:3") == TASK
    assert TaskId.parse(b"counts:clicks:3") == TASK


@pytest.mark.parametrize(
    "args", [("a/b", "t", 0), ("op", "t:x", 0), ("", "t", 0), ("op", "t", -1), ("op", "t", True)]
)
def test_task_id_rejects_names_that_would_break_keys(args: tuple[str, str, int]) -> None:
    with pytest.raises(ValueError):
        TaskId(*args)


def test_frame_rejects_inconsistent_chain_fields() -> None:
    with pytest.raises(ValueError, match="FULL"):
        frame(kind=FrameKind.FULL, base_seq=3)
    with pytest.raises(ValueError, match="DELTA"):
        frame(kind=FrameKind.DELTA, base_seq=7)
    with pytest.raises(ValueError, match="offset"):
        frame(offset=-1)
