"""The results of a closing, built on demand and taken in slices (``core.closing``),
against the brute-force reference: the same results in the same order however
they are sliced and batched, windows whose ``result`` raises in ``failed``, no
slice above the slice size, and a replay (``emit=False``) builds none."""

from __future__ import annotations

import random
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.strategies import DataObject

from streamremat import JSON, Operator, Sum, Tumbling
from streamremat.core import closing
from streamremat.core.closing import ClosedWindows, in_order
from streamremat.core.records import BatchOutput, Record, WindowResult
from streamremat.core.task import Task
from tests.unit.equivalence_support import AGGREGATIONS, EXAMPLES, KINDS, inputs, windows
from tests.unit.reference import RefWindow, run_reference


@EXAMPLES
@given(items=st.lists(st.integers(-50, 50)), size=st.integers(1, 9))
def test_in_order_is_sorted_in_bounded_pieces(items: list[int], size: int) -> None:
    pieces = list(in_order(iter(items), len(items), slice_size=size))
    assert [x for piece in pieces for x in piece] == sorted(items)
    assert all(len(piece) <= size for piece in pieces)


def _records(records: list[tuple[str, int, dict[str, Any]]]) -> list[Record]:
    return [Record(JSON.dumps(k), JSON.dumps(v), t, i) for i, (k, t, v) in enumerate(records)]


def _taken(out: BatchOutput, size: int) -> list[WindowResult]:
    """Every result of ``out``, taken slice by slice as the runtime does."""
    got: list[WindowResult] = []
    results = out.results
    assert isinstance(results, ClosedWindows)
    while (piece := results.next_slice()) is not None:
        assert len(piece) <= size
        got.extend(piece)
    return got


@pytest.mark.parametrize("kind", KINDS)
@EXAMPLES
@given(data=st.data())
def test_results_taken_in_slices_are_the_references(kind: str, data: DataObject) -> None:
    window, ref_window = data.draw(windows(kind), label="window")
    agg_name = data.draw(st.sampled_from(sorted(AGGREGATIONS)), label="aggregation")
    records = data.draw(inputs(), label="records")
    size = data.draw(st.integers(1, 3), label="slice")
    cuts = sorted(data.draw(st.lists(st.integers(0, len(records)), max_size=5), label="cuts"))
    op = Operator(name="op", source="in", sink="out", window=window,
                  aggregate=AGGREGATIONS[agg_name][0]())
    task = Task(op)
    got: list[Any] = []
    source = _records(records)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(closing, "RESULT_SLICE", size)
        for lo, hi in zip([0, *cuts], [*cuts, len(source)], strict=True):
            out = task.process(source[lo:hi])
            if hi > lo:
                got.extend(_taken(out, size))
            assert not out.failed
    ref = run_reference(ref_window, [(JSON.dumps(k), t, v) for k, t, v in records],
                        AGGREGATIONS[agg_name][1])
    assert [(r.key, r.start_ms, r.end_ms, r.value) for r in got] == ref.emissions


class Picky(Sum):
    """A sum whose result raises for multiples of 3."""

    def result(self, acc: Any) -> Any:
        value = super().result(acc)
        if value % 3 == 0:
            raise ValueError(f"{value} is a multiple of 3")
        return value


def test_a_raising_result_fails_its_window_only_in_any_slice() -> None:
    rng = random.Random(7)
    keys = 50
    op = Operator(name="picky", source="in", sink="out", window=Tumbling(1_000),
                  aggregate=Picky("v"))
    rows = [(f"k{rng.randrange(keys)}", rng.randrange(3_000), {"v": rng.randrange(10)})
            for _ in range(400)]
    rows.append(("closer", 10_000, {"v": 1}))
    ref = run_reference(RefWindow("tumbling", 1_000),
                        [(JSON.dumps(k), t, v) for k, t, v in rows],
                        lambda vs: sum(v["v"] for v in vs))
    task = Task(op)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(closing, "RESULT_SLICE", 4)
        outs = [task.process(_records(rows)[i:i + 97]) for i in range(0, len(rows), 97)]
        got = [r for out in outs for r in _taken(out, 4)]
    failed = [f for out in outs for f in out.failed]
    assert [(r.key, r.start_ms, r.end_ms, r.value) for r in got] == [
        e for e in ref.emissions if e[3] % 3]
    assert [(f.key, f.start_ms, f.end_ms) for f in failed] == [
        e[:3] for e in ref.emissions if e[3] % 3 == 0]
    assert all(f.stage == "result" and "multiple of 3" in f.reason for f in failed)


def test_read_as_a_sequence_it_builds_every_result_and_a_replay_builds_none() -> None:
    built = 0

    class Counted(Sum):
        def result(self, acc: Any) -> Any:
            nonlocal built
            built += 1
            return super().result(acc)

    op = Operator(name="n", source="in", sink="out", window=Tumbling(1_000),
                  aggregate=Counted("v"))
    rows = [Record(b"k%d" % k, orjson.dumps({"v": k}), 10, k) for k in range(20)]
    closer = Record(b"z", orjson.dumps({"v": 0}), 5_000, 20)
    replay = Task(op)
    replay.process(rows)
    assert replay.process([closer], emit=False).results == []
    assert built == 0  # the replay dropped the closed windows unbuilt
    live = Task(op)
    live.process(rows)
    out = live.process([closer])
    assert built == 0 and out.results  # not built until read
    assert len(out.results) == 20 and built == 20
    assert [r.key for r in out.results] == sorted(r.key for r in rows)
    assert [r.value for r in out.results] == [int(r.key[1:]) for r in out.results]
