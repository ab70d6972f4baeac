"""Commits that run in the background while the worker's loop processes the next
batches (``PartitionRunner.start_commit``), on the real broker: batches are folded
while a commit is in flight, and the sink still holds exactly the reference's
results, each once (the outputs of those batches go into the next transaction)."""

from __future__ import annotations

import asyncio
import collections
import time
from typing import Any

import orjson
import pytest

from streamremat import App, Count, Operator, Sum, Tumbling
from streamremat.core.records import SourceRecord
from streamremat.runtime.kafka import ProducerRecord, consume_all, end_offsets, produce
from streamremat.runtime.partition import PartitionRunner
from streamremat.runtime.settings import CheckpointSettings, WorkerSettings
from streamremat.runtime.worker import Worker
from tests.expect import RefOperator, expected_output, results_of, rows_as_produced
from tests.integration.group_offsets import committed_total
from tests.unit.reference import RefWindow

PARTITIONS = 2
EVENTS = 20_000


def _count_sum(values: list[dict[str, Any]]) -> dict[str, int]:
    return {"n": len(values), "total": sum(v["x"] for v in values)}


@pytest.mark.timeout(240)
async def test_batches_fold_during_a_commit_and_every_result_is_committed_once(
    kafka_bootstrap: str, new_topic: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, sink = new_topic(partitions=PARTITIONS), new_topic(partitions=PARTITIONS)
    base_ms = int(time.time() * 1000) - 200_000  # recent: the broker's retention keeps it
    records = [ProducerRecord(b"k%d" % (i % 50), orjson.dumps({"x": i % 7}), base_ms + i * 5,
                              i % PARTITIONS) for i in range(EVENTS)]
    await produce(kafka_bootstrap, source, records)
    op = Operator(name="agg", source=source, sink=sink, window=Tumbling(1_000),
                  aggregate={"n": Count(), "total": Sum("x")})

    during_commit = collections.Counter[str]()
    process = PartitionRunner.process

    def counting(self: PartitionRunner, batch: list[SourceRecord]) -> None:
        during_commit["batches"] += 1
        if getattr(self, "committing", None) is not None:
            during_commit["while committing"] += 1
        process(self, batch)

    monkeypatch.setattr(PartitionRunner, "process", counting)
    # Small batches and frequent commits: many batches per commit; checkpoints (which
    # commit with the loop held) only after going live and at the end.
    settings = WorkerSettings(
        bootstrap_servers=kafka_bootstrap, state_dir=str(tmp_path / "state"),
        commit_interval_s=0.05, session_timeout_ms=6_000, max_batch_records=100,
        checkpoints=CheckpointSettings(policy="fixed", interval_s=300),
    )
    worker = Worker(App(f"pipelined-{source[-8:]}", [op]), settings)
    task = asyncio.create_task(worker.run(handle_signals=False))
    deadline = time.monotonic() + 120
    try:
        while await committed_total(kafka_bootstrap, worker.group_id, source,
                                    PARTITIONS) < EVENTS:
            assert not task.done(), f"worker stopped early with {task.result()}"
            assert time.monotonic() < deadline, "worker did not catch up in time"
            await asyncio.sleep(0.2)
    finally:
        worker.stop()
    assert await asyncio.wait_for(task, 60) == 0

    assert during_commit["while committing"] > 0, (during_commit, worker.group_id, source)
    ref = expected_output(RefOperator(op.name, source, sink, RefWindow("tumbling", 1_000),
                                      ("x",), _count_sum), rows_as_produced(records))
    got = await consume_all(kafka_bootstrap, sink, isolation_level="read_committed")
    assert results_of((r.key, r.value) for r in got) == ref.results
    assert sum((await end_offsets(kafka_bootstrap, source)).values()) == EVENTS
