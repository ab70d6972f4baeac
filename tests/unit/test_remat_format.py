"""Checkpoint format with a plan: version 2 bodies, groups flipping between store
and recompute across full + delta chains, version 1 checkpoints, the option."""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest

from streamremat import JSON, Collect, Count, Operator, Session, Tumbling
from streamremat.core.codec import write_bytes, write_svarint, write_uvarint
from streamremat.core.exceptions import ConfigError
from streamremat.core.native_state import NativeWindowState
from streamremat.core.records import Record
from streamremat.core.task import STATE_MAGIC, Task, state_fingerprint
from streamremat.testing import driver_plan_inputs
from streamremat.tuning.remat import Reason, WindowCandidate, plan


def _records(n: int, seed: int = 1) -> list[Record]:
    rng = random.Random(seed)
    out, t = [], 0
    for i in range(n):
        t += rng.randint(0, 4)
        out.append(Record(JSON.dumps(rng.choice("abc")), JSON.dumps({"v": i}),
                          max(0, t - rng.choice([0, 0, 3])), i))
    return out


def _restore(op: Operator, chain: list[bytes], records: list[Record], c: int) -> Task:
    """What recovery does for one task: restore, replay [o_min, c) into the
    recompute groups, install them."""
    task = Task.restore(op, 0, chain)
    task.next_offset = c
    start = task.refold_from
    if start is not None:
        task.refold(records[start:c])
        task.finish_refold()
    return task


@pytest.mark.parametrize("window", [Tumbling(10), Session(3)], ids=["tumbling", "session"])
def test_groups_flip_between_store_and_recompute_across_a_delta_chain(window: Any) -> None:
    op = Operator(name="op", source="in", sink="out", window=window, aggregate=Collect("v"))
    records = _records(120)
    task = Task(op)
    chain: list[bytes] = []
    rng = random.Random(7)
    flips = 0
    previous: set[int] = set()
    for c in range(1, len(records) + 1):
        task.process(records[c - 1 : c])
        if c % 6:
            continue
        groups = [g for g, _, first in task.groups() if first is not None]
        recompute = {g for g in groups if rng.random() < 0.5}
        flips += len(recompute ^ previous)
        previous = recompute
        chain.append(task.snapshot(full=not chain, recompute=recompute))
        assert task.replay_from == min(
            (first for g, _, first in task.groups() if g in recompute and first is not None),
            default=None)
        restored = _restore(op, chain, records, c)
        assert restored.snapshot(full=True) == copy.deepcopy(task).snapshot(full=True)
        # It goes on exactly as the original.
        fork, orig = copy.deepcopy(restored), copy.deepcopy(task)
        assert fork.process(records[c:]).results == orig.process(records[c:]).results
    assert flips > 10  # the chain really flipped groups both ways


def test_recompute_groups_are_written_as_their_first_offset_only() -> None:
    op = Operator(name="op", source="in", sink="out", window=Tumbling(1000),
                  aggregate=Collect("v"))
    task = Task(op)
    task.process(_records(300))
    [(group, size, first)] = task.groups()
    assert first == 0 and size > 300
    stored = copy.deepcopy(task).snapshot(full=True)
    recomputed = task.snapshot(full=True, recompute={group})
    assert len(recomputed) < 40 < size < len(stored)
    assert task.replay_from == 0


def test_version_1_checkpoints_restore_with_unknown_first_offsets() -> None:
    op = Operator(name="op", source="in", sink="out", window=Tumbling(10), aggregate=Count())
    records = _records(40)
    original = Task(op)
    original.process(records[:30])
    # A version 1 body: per window end, (key, accumulator) pairs, no offsets.
    body = bytearray()
    if isinstance(original.state, NativeWindowState):
        original.state.to_python()  # its entries in the dicts read below
    windows = original.state.windows  # type: ignore[attr-defined]
    write_uvarint(body, len(windows))
    for end in sorted(windows):
        write_svarint(body, end)
        write_uvarint(body, len(windows[end]))
        for key in sorted(windows[end]):
            write_bytes(body, key)
            write_bytes(body, op.aggregator.encode(windows[end][key]))
    head = bytearray(STATE_MAGIC) + bytes([1]) + b"F" + state_fingerprint(op)
    write_svarint(head, original.state.stream_time)
    write_svarint(head, original.state.closed_through)
    write_uvarint(head, 31)
    restored = Task.restore(op, 0, [bytes(head + body)])
    groups = restored.groups()
    assert groups and all(first is None for _, _, first in groups)
    chosen = plan(driver_plan_inputs(30), [WindowCandidate(*g) for g in groups])
    assert {g.reason for g in chosen.groups} == {Reason.UNKNOWN_OFFSET}
    assert restored.snapshot(full=True, recompute=[g for g, _, _ in groups]).count(b"\x01") < 5
    assert restored.process(records[30:]).results == original.process(records[30:]).results


def test_a_raising_fold_makes_its_window_unknown() -> None:
    class Picky(Collect):
        def add(self, acc: list[Any], item: Any) -> list[Any]:
            if item == 5:
                raise ValueError("no fives")
            return super().add(acc, item)

    op = Operator(name="op", source="in", sink="out", window=Tumbling(1000), aggregate=Picky("v"))
    task = Task(op)
    out = task.process(_records(10))
    assert [d.record.offset for d in out.dead_letters] == [5]
    assert [first for _, _, first in task.groups()] == [None]


def test_rematerialize_setting_is_checked() -> None:
    with pytest.raises(ConfigError, match=r"rematerialize='always' is not one of 'auto'"):
        Operator(name="op", source="in", sink="out", window=Tumbling(10), aggregate=Count(),
                 rematerialize="always")
