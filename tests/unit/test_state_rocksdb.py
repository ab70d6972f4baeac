"""RocksDB-only behaviour: damage below the frame level (SST blocks), open failures."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from streamremat.state import CheckpointStoreUnavailable, RocksDBCheckpointStore
from streamremat.state.rocksdb import corrupt_latest
from tests.unit.test_state_contract import TASK, delta, full


async def test_damaged_sst_block_of_newest_frame_falls_back(tmp_path: Path) -> None:
    path = tmp_path / "state"
    store = RocksDBCheckpointStore(path)
    await store.append(full(1, os.urandom(20_000)))
    for seq in (2, 3, 4):
        # ~20 KB incompressible values: one data block each, so one flip hits one frame
        frame = dataclasses.replace(delta(seq, 1), payload=b"MARK%d" % seq + os.urandom(20_000))
        await store.append(frame)
    store._db.flush()
    await store.close()
    [sst] = list(path.glob("*.sst"))
    data = bytearray(sst.read_bytes())
    data[data.index(b"MARK4") + 100] ^= 0xFF
    sst.write_bytes(bytes(data))

    store = RocksDBCheckpointStore(path)
    point = await store.load(TASK)
    assert point is not None
    assert [f.seq for f in point.chain] == [1, 2, 3]
    assert "seq 4" in point.fallbacks[0] and "Corruption" in point.fallbacks[0]
    assert await store.last_seq(TASK) == 4
    await store.append(full(5))
    assert (await store.last_seq(TASK)) == 5
    await store.close()


@pytest.mark.parametrize("mode", ["flip", "garbage", "truncate"])
async def test_corrupt_latest_modes_are_all_detected(tmp_path: Path, mode: str) -> None:
    path = tmp_path / "state"
    store = RocksDBCheckpointStore(path)
    await store.append(full(1))
    await store.append(delta(2, 1))
    await store.close()
    assert corrupt_latest(path, TASK, mode=mode) == 2
    store = RocksDBCheckpointStore(path)
    point = await store.load(TASK)
    assert point is not None and point.seq == 1 and len(point.fallbacks) == 1
    await store.close()


def test_corrupt_latest_without_checkpoint_says_so(tmp_path: Path) -> None:
    with pytest.raises(LookupError, match="no checkpoint"):
        corrupt_latest(tmp_path / "state", TASK)


def test_unopenable_db_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "state"
    blocker.write_text("not a directory")
    with pytest.raises(CheckpointStoreUnavailable, match="move it away"):
        RocksDBCheckpointStore(blocker)
