"""Full checkpoints and restores of a large state run off the event loop: the loop
keeps turning while they encode or decode, the bytes are those of the on-loop
encoding, and the restored state is the state that was checkpointed.

Nothing here is timed: "off the loop" is asserted as "a ticker coroutine ran many
times during one write / one restore" (before, a write or a restore never
suspended, so the ticker could not run at all while it lasted)."""

from __future__ import annotations

import asyncio
import gc
import random
from collections.abc import Awaitable
from pathlib import Path
from typing import TypeVar

import pytest
from aiokafka import TopicPartition
from hypothesis import given
from hypothesis import strategies as st

from streamremat import Collect, Count, Hopping, Operator, Session, Sum
from streamremat.core import keyed_state, window_state
from streamremat.core.codec import SORT_RUN, sorted_in_runs
from streamremat.core.records import Record
from streamremat.core.task import Task
from streamremat.core.topology import Stage, StageKind
from streamremat.metrics.sensor import Sensor
from streamremat.runtime import gc_tuning
from streamremat.runtime.checkpointing import Checkpointer
from streamremat.runtime.restoring import restore_stages
from streamremat.runtime.scheduling import CheckpointScheduler
from streamremat.runtime.settings import CheckpointSettings
from streamremat.state.frame import TaskId
from streamremat.state.rocksdb import RocksDBCheckpointStore

T = TypeVar("T")
KEYS = 40_000  # more than one sort run per window (``codec.SORT_RUN``)
BASE_MS = 1_700_000_040_000  # a multiple of the advance: each record is in 2 windows


def _count_sum() -> Operator:
    return Operator(name="big", source="in", sink="out", window=Hopping(120_000, 60_000),
                    aggregate={"n": Count(), "total": Sum("amount")})


def _filled(op: Operator, keys: int, seed: int = 3) -> Task:
    """A task fed one to three records per key, keys in random order."""
    rng = random.Random(seed)
    order = [k for k in range(keys) for _ in range(1 + k % 3)]
    rng.shuffle(order)
    task = Task(op)
    for i in range(0, len(order), 5_000):
        task.process([
            Record(b"key-%d" % k, b'{"amount":%d}' % rng.randrange(1000),
                   BASE_MS + rng.randrange(50_000), i + j)
            for j, k in enumerate(order[i : i + 5_000])
        ])
    return task


async def _beside_ticker(work: Awaitable[T]) -> tuple[T, int]:
    """Run ``work``; return its result and how often another coroutine ran meanwhile."""
    ticks = 0
    done = False

    async def tick() -> None:
        nonlocal ticks
        while not done:
            await asyncio.sleep(0)
            ticks += 1

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0)  # the ticker starts waiting before the work does
    ticks = 0
    try:
        result = await work
    finally:
        done = True
        await ticker
    return result, ticks


@given(st.lists(st.binary(max_size=6), unique=True, max_size=200), st.integers(1, 9))
def test_sorted_in_runs_is_sorted(keys: list[bytes], run: int) -> None:
    assert sorted_in_runs(dict.fromkeys(keys), run) == sorted(keys)


def _old_sort(monkeypatch: pytest.MonkeyPatch) -> None:
    """The encoders as they were: one ``sorted`` per window or key set."""
    monkeypatch.setattr(window_state, "sorted_in_runs", lambda keys: sorted(keys))
    monkeypatch.setattr(keyed_state, "sorted_in_runs", lambda keys: sorted(keys))


@pytest.mark.parametrize("make", [
    _count_sum,
    lambda: Operator(name="s", source="in", sink="out", window=Session(60_000),
                     aggregate=Collect("amount")),
], ids=["hopping-count-sum", "session-collect"])
async def test_full_checkpoint_off_the_loop_is_todays_bytes_and_restores(
    make: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert callable(make)
    op = make()
    task = _filled(op, KEYS)
    assert task.open_keys() == KEYS > SORT_RUN  # the merge of sort runs is exercised
    store = RocksDBCheckpointStore(tmp_path / "db")
    settings = CheckpointSettings(replicate=False)
    ck = Checkpointer(0, settings, store, None, CheckpointScheduler(settings), Sensor())
    task_id = TaskId(op.name, "in", 0)
    ck.add_task(task_id, 0)
    seen_writing: list[bool] = []

    async def watch() -> None:
        while not done.is_set():
            seen_writing.append(getattr(ck, "writing", False))
            await asyncio.sleep(0)

    done = asyncio.Event()
    watcher = asyncio.create_task(watch())
    _, ticks = await _beside_ticker(ck.write([task], task.next_offset or 0, clean=False))
    done.set()
    await watcher
    assert ticks >= 20, f"the event loop ran only {ticks} times during the write"
    assert any(seen_writing) and not ck.writing  # step 1: state held still meanwhile

    point = await store.load(task_id)
    assert point is not None and len(point.chain) == 1
    stored = point.chain[0].payload
    _old_sort(monkeypatch)  # the same records, encoded on the loop by the old code
    original = _filled(op, KEYS)
    assert stored == original.snapshot(True)

    restored, ticks = await _beside_ticker(restore_stages(
        TopicPartition("in", 0), [Stage(op.name, StageKind.WINDOW, "in", op)],
        point.offset, 0, store, None, Sensor()))
    assert ticks >= 20, f"the event loop ran only {ticks} times during the restore"
    back = restored.tasks[0]
    assert isinstance(back, Task)
    assert vars(back.state).keys() == vars(original.state).keys()
    for name in ("windows", "sessions", "stream_time", "closed_through"):
        assert getattr(back.state, name, None) == getattr(original.state, name, None), name
    assert back.next_offset == original.next_offset
    assert back.snapshot(True) == stored
    await store.close()


def test_gc_paused_nests_and_restores_the_collector() -> None:
    assert gc.isenabled()
    with gc_tuning.paused():
        assert not gc.isenabled()
        with gc_tuning.paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_tuning.paused():
            pass
        assert not gc.isenabled()  # a collector that was off stays off
    finally:
        gc.enable()


def test_gc_paused_freezes_what_it_built_while_tuned() -> None:
    gc.unfreeze()
    gc_tuning.start()
    try:
        with gc_tuning.paused():
            built = [[i] for i in range(1_000)]
            assert gc.get_count()[0] >= len(built)  # all young: one collection would walk them
        assert gc.get_freeze_count() >= len(built)  # frozen before the collector ran again
    finally:
        gc_tuning.stop()
    assert gc.get_freeze_count() == 0
