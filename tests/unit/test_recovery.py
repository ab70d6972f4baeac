"""The pure recovery code (``streamremat.core.recovery``) that the worker and the
TestDriver share: restore decisions, the replay split, the replay horizon."""

from __future__ import annotations

from typing import Any

import orjson

from streamremat import Count, Operator, Sum, Tumbling
from streamremat.core.records import Record
from streamremat.core.recovery import (
    PartitionTasks,
    Restore,
    restore_task,
)
from streamremat.core.task import Task
from streamremat.testing import TestDriver


def _op(name: str = "o", size: int = 100, **kw: Any) -> Operator:
    return Operator(name=name, source="in", sink="out", window=Tumbling(size),
                    aggregate={"n": Count(), "s": Sum("x")}, **kw)


def _records(times: list[int]) -> list[Record]:
    return [Record(b"k", orjson.dumps({"x": i}), t, i) for i, t in enumerate(times)]


def test_restore_task_outcomes() -> None:
    op = _op()
    task = Task(op)
    task.process(_records([1, 2, 3]))
    chain = [task.snapshot(full=True)]

    restored = restore_task(op, 0, chain, 3, committed=3, log_start=0)
    assert restored.outcome is Restore.RESTORED
    assert restored.task.next_offset == 3
    assert restored.task.snapshot(full=True) == task.snapshot(full=True)

    beyond = restore_task(op, 0, chain, 3, committed=2, log_start=1)
    assert beyond.outcome is Restore.BEYOND_COMMITTED
    assert (beyond.task.next_offset, beyond.task.stream_time_ms) == (1, None)

    other = Operator(name="o", source="in", sink="out", window=Tumbling(50), aggregate=Count())
    refused = restore_task(other, 0, chain, 3, committed=3, log_start=0)
    assert refused.outcome is Restore.REFUSED
    assert "different window or aggregation" in str(refused.error)
    assert refused.task.next_offset == 0

    none = restore_task(op, 0, None, None, committed=None, log_start=7)
    assert (none.outcome, none.task.next_offset) == (Restore.NO_CHECKPOINT, 7)


def test_replay_emits_nothing_below_committed_and_splits_a_batch_there() -> None:
    op = _op(size=10)
    records = _records([1, 5, 12, 15, 25, 31, 42])

    # A checkpoint at offset 2 and a commit at offset 5, then one batch across both.
    task = Task(op)
    task.process(records[:2])
    tasks = PartitionTasks([restore_task(op, 0, [task.snapshot(full=True)], 2, 5, 0).task],
                           committed=5, horizons={})
    assert (tasks.start, tasks.replay_until, tasks.replaying) == (2, 5, True)
    outputs = tasks.process(records)  # offsets 0, 1 were fetched before the seek: skipped
    assert not tasks.replaying and tasks.position == 7
    emitted = [r for _, out in outputs for r in out.results]
    # Windows that closed below offset 5 were emitted before the crash; only the
    # ones closed by offsets 5 and 6 come out now.
    clean_after = Task(op)
    clean_after.process(records[:5])
    assert emitted and emitted == clean_after.process(records[5:]).results


def test_reached_ends_a_replay_with_nothing_left_to_read() -> None:
    tasks = PartitionTasks([Task(_op())], committed=4, horizons={})
    tasks.reached(3)
    assert tasks.replaying
    tasks.reached(5)  # e.g. the last offsets were transaction markers
    assert not tasks.replaying and tasks.position == 4


def test_tasks_restored_at_different_offsets_each_skip_what_they_have() -> None:
    a, b = _op("a", size=10), _op("b", size=10)
    records = _records([1, 3, 8, 11, 14, 27])
    ta = Task(a)
    ta.process(records[:4])
    tb = Task(b)
    tb.process(records[:1])
    tasks = PartitionTasks(
        [restore_task(a, 0, [ta.snapshot(full=True)], 4, 6, 0).task,
         restore_task(b, 0, [tb.snapshot(full=True)], 1, 6, 0).task],
        committed=6, horizons={},
    )
    assert tasks.start == 1
    tasks.process(records[1:])
    whole = Task(a)
    whole.process(records)
    for task in tasks.tasks:
        assert task.snapshot(full=True) == whole.snapshot(full=True)


def test_driver_replay_uses_the_committed_horizon_like_the_worker() -> None:
    """Recovery in the driver skips, undecoded, the records whose windows all
    closed before the committed offset's stream time, as the worker's replay does:
    the map step never sees them again."""
    seen: list[int] = []

    def spy(value: dict[str, int]) -> dict[str, int]:
        seen.append(value["x"])
        return value

    op = _op(size=100).map(spy)
    driver = TestDriver(op)
    for i, t in enumerate([10, 20, 150, 160, 230, 250]):
        driver.send("k", {"x": i}, timestamp_ms=t)
    before = driver.emitted()
    driver.crash()
    seen.clear()
    driver.recover()  # no checkpoint: replay [0, 6) with horizon 250
    # Windows [0, 100) and [100, 200) closed before stream time 250: their records
    # are skipped; only the open window [200, 300) is rebuilt.
    assert seen == [4, 5]
    driver.send("k", {"x": 6}, timestamp_ms=400)
    assert driver.emitted()[: len(before)] == before
    assert [(e.start_ms, e.value) for e in driver.emitted()[len(before):]] == [
        (200, {"n": 2, "s": 9})
    ]
