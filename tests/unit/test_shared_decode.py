"""Several operators on one topic decode each live record once between them
(``PartitionTasks``); their outputs are what each gives alone, and the results what
the brute-force reference computes."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from streamremat import Collect, Count, Max, Operator, Sum, Tumbling
from streamremat.core.records import Record
from streamremat.core.recovery import PartitionTasks
from streamremat.core.task import Task
from tests.unit.reference import RefWindow, run_reference

SIZE_MS = 100


def _ops() -> list[Operator]:
    return [
        Operator(name="sums", source="in", sink="a", window=Tumbling(SIZE_MS),
                 aggregate={"n": Count(), "total": Sum("x")}),
        Operator(name="max", source="in", sink="b", window=Tumbling(SIZE_MS), aggregate=Max("x")),
        Operator(name="all", source="in", sink="c", window=Tumbling(SIZE_MS), aggregate=Collect()),
        # runs user code on the value: decodes for itself
        Operator(name="user", source="in", sink="d", window=Tumbling(SIZE_MS),
                 aggregate=Sum(lambda v: v["x"] * 2)),
    ]


values = st.one_of(
    st.builds(lambda x: json.dumps({"x": x}).encode(), st.integers(-50, 50)),
    st.sampled_from([b"{not json", b'{"y": 1}', None]),  # dead letters, each its reason
)
streams = st.lists(
    st.tuples(st.sampled_from([b'"a"', b'"b"', b'"c"']), st.integers(0, 1000), values),
    max_size=60,
)


def _outputs(tasks: list[Task], batches: list[list[Record]]) -> list[list[Any]]:
    pt = PartitionTasks(tasks, None, {})
    per_task: list[list[Any]] = [[] for _ in tasks]
    for batch in batches:
        for i, (_, out) in enumerate(pt.process(batch)):
            per_task[i].append((out.results, [(d.record.offset, d.stage, d.reason)
                                               for d in out.dead_letters],
                                [late.record.offset for late in out.late]))
    return per_task


@settings(max_examples=150, deadline=None)
@given(stream=streams, cut=st.integers(1, 20))
def test_shared_decode_gives_each_operator_its_own_outputs(stream: list[Any], cut: int) -> None:
    records = [Record(k, v, 1000 + t, i) for i, (k, t, v) in enumerate(stream)]
    batches = [records[i : i + cut] for i in range(0, len(records), cut)]
    together = [Task(op) for op in _ops()]
    # (the native fold reads raw values itself: its tasks take no share)
    native = [t.fast is not None and t.fast.native is not None for t in together]
    assert [t.shares_decoded for t in together] == [not native[0], not native[1], True, False]
    shared = _outputs(together, batches)
    for i, op in enumerate(_ops()):
        alone = _outputs([Task(op)], batches)[0]
        assert shared[i] == alone, op.name
    # and the first operator's results are the reference's
    good = [(r.key, r.timestamp, json.loads(r.value)) for r in records
            if r.value is not None and r.value.startswith(b'{"x"')]
    ref = run_reference(RefWindow("tumbling", SIZE_MS), [(k, t, v) for k, t, v in good],
                        lambda vs: {"n": len(vs), "total": sum(v["x"] for v in vs)})
    emitted = [(r.key, r.start_ms, r.end_ms, r.value)
               for batch in shared[0] for r in batch[0]]
    assert emitted == ref.emissions
