"""The checkpoint store contract, run against every implementation.

This module runs it on RocksDB; ``tests/integration/test_state_kafka.py``
imports the same tests and runs them on the Kafka replica by overriding the
``harness`` fixture. A store passes only if it restores exactly what the
shared chain rule says, whatever its I/O.
"""

from __future__ import annotations

import abc
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from streamremat.state import (
    CheckpointFrame,
    CheckpointSequenceError,
    CheckpointStore,
    FrameKind,
    RocksDBCheckpointStore,
    TaskId,
)
from streamremat.state.rocksdb import corrupt_latest

__all__ = [
    "TASK",
    "Harness",
    "delta",
    "full",
    "test_append_load_round_trip",
    "test_chain_of_fulls_and_deltas",
    "test_corrupt_full_falls_back_to_previous_chain",
    "test_corrupt_middle_delta_ends_chain_before_it",
    "test_corrupt_newest_delta_falls_back_to_previous",
    "test_empty_store_loads_none",
    "test_large_frame_round_trip",
    "test_new_full_after_corruption_restores",
    "test_nothing_valid_loads_none",
    "test_prune_keeps_n_restorable",
    "test_reopen_keeps_frames_and_sequence",
    "test_seq_must_increase",
    "test_tasks_are_isolated",
]

TASK = TaskId("counts", "clicks", 1)
# Fixtures run on the session loop (pyproject); clients must stay on one loop.
pytestmark = pytest.mark.asyncio(loop_scope="session")


def full(
    seq: int, payload: bytes = b"", task: TaskId = TASK, clean: bool = False
) -> CheckpointFrame:
    return CheckpointFrame(
        task=task,
        seq=seq,
        kind=FrameKind.FULL,
        base_seq=seq,
        offset=seq * 10,
        stream_time_ms=seq * 1000,
        clean=clean,
        meta=b"meta%d" % seq,
        payload=payload or b"full-%d" % seq,
    )


def delta(seq: int, base: int, task: TaskId = TASK) -> CheckpointFrame:
    return CheckpointFrame(
        task=task,
        seq=seq,
        kind=FrameKind.DELTA,
        base_seq=base,
        offset=seq * 10,
        stream_time_ms=seq * 1000,
        clean=False,
        meta=b"meta%d" % seq,
        payload=b"delta-%d" % seq,
    )


class Harness(abc.ABC):
    """A store under test plus the two things the contract needs beyond the
    interface: damaging a stored frame, and reopening the store."""

    store: CheckpointStore

    @abc.abstractmethod
    async def corrupt(self, task: TaskId, seq: int | None = None) -> int: ...

    @abc.abstractmethod
    async def reopen(self) -> None: ...

    async def append_all(self, *frames: CheckpointFrame) -> None:
        for frame in frames:
            await self.store.append(frame)

    async def chain(self, task: TaskId = TASK) -> list[int] | None:
        point = await self.store.load(task)
        return None if point is None else [f.seq for f in point.chain]


class RocksHarness(Harness):
    def __init__(self, path: Path) -> None:
        self.path = path
        self.store = RocksDBCheckpointStore(path)

    async def corrupt(self, task: TaskId, seq: int | None = None) -> int:
        await self.store.close()
        damaged = corrupt_latest(self.path, task, seq)
        self.store = RocksDBCheckpointStore(self.path)
        return damaged

    async def reopen(self) -> None:
        await self.store.close()
        self.store = RocksDBCheckpointStore(self.path)


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[Harness]:
    h = RocksHarness(tmp_path / "state")
    yield h
    await h.store.close()


async def test_empty_store_loads_none(harness: Harness) -> None:
    assert await harness.store.load(TASK) is None
    assert await harness.store.last_seq(TASK) is None


async def test_append_load_round_trip(harness: Harness) -> None:
    frame = full(1, clean=True)
    await harness.store.append(frame)
    point = await harness.store.load(TASK)
    assert point is not None
    assert point.chain == (frame,)
    assert (point.offset, point.stream_time_ms, point.meta, point.clean) == (
        10,
        1000,
        b"meta1",
        True,
    )
    assert point.fallbacks == ()
    assert point.next_seq == 2
    assert await harness.store.last_seq(TASK) == 1


async def test_chain_of_fulls_and_deltas(harness: Harness) -> None:
    frames = [full(1), delta(2, 1), delta(3, 1), full(4), delta(5, 4), delta(6, 4)]
    await harness.append_all(*frames)
    point = await harness.store.load(TASK)
    assert point is not None
    assert point.chain == tuple(frames[3:])
    assert point.offset == 60


async def test_seq_must_increase(harness: Harness) -> None:
    await harness.append_all(full(1), delta(2, 1))
    with pytest.raises(CheckpointSequenceError):
        await harness.store.append(full(2))
    with pytest.raises(CheckpointSequenceError):
        await harness.store.append(full(1))
    await harness.store.append(full(3))


async def test_prune_keeps_n_restorable(harness: Harness) -> None:
    await harness.append_all(full(1), delta(2, 1), delta(3, 1), full(4), delta(5, 4), delta(6, 4))
    assert await harness.store.prune(TASK, keep=4) == 0
    assert await harness.store.prune(TASK, keep=2) == 3
    assert await harness.chain() == [4, 5, 6]
    # the kept older checkpoint (5) is still restorable when the newest goes bad
    await harness.corrupt(TASK)
    assert await harness.chain() == [4, 5]
    assert await harness.store.prune(TASK, keep=1) == 0


async def test_corrupt_newest_delta_falls_back_to_previous(harness: Harness) -> None:
    await harness.append_all(full(1), delta(2, 1), delta(3, 1))
    assert await harness.corrupt(TASK) == 3
    point = await harness.store.load(TASK)
    assert point is not None
    assert [f.seq for f in point.chain] == [1, 2]
    assert len(point.fallbacks) == 1 and "seq 3" in point.fallbacks[0]
    assert point.next_seq == 4


async def test_corrupt_middle_delta_ends_chain_before_it(harness: Harness) -> None:
    await harness.append_all(full(1), delta(2, 1), delta(3, 1), delta(4, 1))
    await harness.corrupt(TASK, seq=3)
    point = await harness.store.load(TASK)
    assert point is not None
    assert [f.seq for f in point.chain] == [1, 2]
    assert len(point.fallbacks) == 2


async def test_corrupt_full_falls_back_to_previous_chain(harness: Harness) -> None:
    await harness.append_all(full(1), delta(2, 1), full(3), delta(4, 3))
    await harness.corrupt(TASK, seq=3)
    assert await harness.chain() == [1, 2]


async def test_nothing_valid_loads_none(harness: Harness) -> None:
    await harness.append_all(full(1), delta(2, 1))
    await harness.corrupt(TASK, seq=1)
    assert await harness.store.load(TASK) is None
    assert await harness.store.last_seq(TASK) == 2


async def test_new_full_after_corruption_restores(harness: Harness) -> None:
    await harness.append_all(full(1), delta(2, 1))
    await harness.corrupt(TASK)
    point = await harness.store.load(TASK)
    assert point is not None
    await harness.store.append(full(point.next_seq))
    after = await harness.store.load(TASK)
    assert after is not None and [f.seq for f in after.chain] == [3] and after.fallbacks == ()


async def test_large_frame_round_trip(harness: Harness) -> None:
    payload = os.urandom(2_500_000)  # incompressible: stays > 2 MB encoded
    await harness.append_all(full(1, payload), delta(2, 1))
    point = await harness.store.load(TASK)
    assert point is not None
    assert point.chain[0].payload == payload
    await harness.corrupt(TASK, seq=1)
    assert await harness.store.load(TASK) is None


async def test_tasks_are_isolated(harness: Harness) -> None:
    # "...:1" is a string prefix of "...:10": keys must not mix them up
    other = TaskId("counts", "clicks", 10)
    await harness.append_all(full(1), full(1, task=other), delta(2, 1), delta(2, 1, task=other))
    await harness.store.append(full(3, task=other))
    assert await harness.chain() == [1, 2]
    assert await harness.chain(other) == [3]
    await harness.corrupt(TASK)
    assert await harness.chain() == [1]
    assert await harness.chain(other) == [3]
    assert await harness.store.prune(other, keep=1) == 2
    assert await harness.chain() == [1]
    assert await harness.store.last_seq(other) == 3
    assert await harness.store.load(TaskId("counts", "clicks", 2)) is None


async def test_reopen_keeps_frames_and_sequence(harness: Harness) -> None:
    await harness.append_all(full(1), delta(2, 1))
    await harness.reopen()
    assert await harness.chain() == [1, 2]
    with pytest.raises(CheckpointSequenceError):
        await harness.store.append(delta(2, 1))
    await harness.store.append(delta(3, 1))
    assert await harness.chain() == [1, 2, 3]
