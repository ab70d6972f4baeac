"""``streamremat tune`` on the real broker: a stopped app and a live one (issue 14 item 5)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson

from streamremat import App, Count, Operator, Tumbling
from streamremat.runtime.explain import explain_app, format_explanations
from streamremat.runtime.kafka import ProducerRecord, end_offsets, produce
from streamremat.runtime.settings import CheckpointSettings, WorkerSettings
from streamremat.runtime.worker import Worker
from streamremat.tuning import TunerConfig, recovery_from_backlog

PARTITIONS = 2
RETENTION_MS = 7_200_000


def _app(source: str) -> App:
    op = Operator(name="n", source=source, sink=f"{source}-out", window=Tumbling(1_000),
                  aggregate={"n": Count()})
    return App(f"tune-{source}", [op])


def _records(n: int, base_ms: int) -> list[ProducerRecord]:
    return [ProducerRecord(b"k%d" % (i % 7), orjson.dumps({"i": i}), base_ms + i, i % PARTITIONS)
            for i in range(n)]


def _settings(bootstrap: str, tmp_path: Any, replicate: bool) -> WorkerSettings:
    return WorkerSettings(
        bootstrap_servers=bootstrap, state_dir=str(tmp_path / "state"), commit_interval_s=0.2,
        session_timeout_ms=3_000,
        checkpoints=CheckpointSettings(policy="adaptive", min_interval_s=0.5, max_interval_s=1.0,
                                       rto_s=60.0, replicate=replicate),
    )


async def _run_until_checkpointed(worker: Worker, bootstrap: str, source: str) -> asyncio.Task[int]:
    """Start ``worker``; return once every partition has a checkpoint at its end."""
    task = asyncio.create_task(worker.run(handle_signals=False))
    ends = await end_offsets(bootstrap, source)
    deadline = time.monotonic() + 120
    while True:
        assert not task.done(), f"worker stopped early with {task.result()}"
        assert time.monotonic() < deadline, "no checkpoint at the end offsets in time"
        runners = list(worker.runners.values())
        if len(runners) == PARTITIONS and all(
            r.feed.checkpointed_at == ends[r.tp.partition] for r in runners
        ):
            return task
        await asyncio.sleep(0.2)


async def test_tune_a_stopped_app(kafka_bootstrap: str, new_topic: Any, tmp_path: Any) -> None:
    """Stopped cleanly at the source's end, asked an hour later: recovery is the
    downtime (nothing to replay), never the checkpoint's age; --no-replica reads
    only the local store and says so; T_retention is the worker's."""
    source = new_topic(PARTITIONS, {"retention.ms": str(RETENTION_MS)})
    app = _app(source)
    await produce(kafka_bootstrap, source, _records(3_000, int(time.time() * 1000) - 60_000))
    settings = _settings(kafka_bootstrap, tmp_path, replicate=False)
    worker = Worker(app, settings)
    task = await _run_until_checkpointed(worker, kafka_bootstrap, source)
    worker.stop()
    assert await asyncio.wait_for(task, 60) == 0

    rows = await explain_app(app, settings, now_s=time.time() + 3_600)
    assert len(rows) == PARTITIONS
    for row in rows:
        d = row.decision
        assert d is not None and row.checkpoint_offset == row.end_offset
        assert row.source == "rocksdb"
        assert d.backlog_records == 0
        assert d.predicted_recovery_s is not None and d.worst_case_recovery_s is not None
        assert d.predicted_recovery_s < d.downtime_s * 1.01  # r decayed to ~0: D
        assert d.worst_case_recovery_s >= d.predicted_recovery_s
        assert d.t_retention_s == RETENTION_MS / 1000 / 2
    text = format_explanations(rows)
    assert "read from the local state dir" in text and "replica" not in text
    assert "kafka" not in text


async def test_tune_a_live_app(kafka_bootstrap: str, new_topic: Any, tmp_path: Any) -> None:
    """While the worker runs and records keep arriving: the prediction is the
    backlog a replay would read (end offset - checkpoint offset), at the rates the
    worker measured; the worst case bounds it."""
    source = new_topic(PARTITIONS, {"retention.ms": str(RETENTION_MS)})
    app = _app(source)
    base = int(time.time() * 1000) - 60_000
    await produce(kafka_bootstrap, source, _records(2_000, base))
    settings = _settings(kafka_bootstrap, tmp_path, replicate=True)
    worker = Worker(app, settings)
    task = await _run_until_checkpointed(worker, kafka_bootstrap, source)
    try:
        for i in range(6):  # keep the source growing so that r > 0 and a backlog exists
            await produce(kafka_bootstrap, source, _records(1_000, base + 2_000 + i * 1_000))
            await asyncio.sleep(0.5)
        rows = await explain_app(app, settings)
    finally:
        worker.stop()
    assert await asyncio.wait_for(task, 60) == 0
    assert len(rows) == PARTITIONS
    for row in rows:
        d = row.decision
        assert d is not None and row.checkpoint_offset is not None and row.end_offset is not None
        assert d.backlog_records == row.end_offset - row.checkpoint_offset
        assert d.ingest_rate_eps > 0
        # mu as measured, or (no backlog phase yet) the prior speed-up over ingest
        mu = d.replay_rate_eps or TunerConfig().prior_sigma * d.ingest_rate_eps
        assert d.predicted_recovery_s == recovery_from_backlog(
            d.downtime_s, d.backlog_records, d.ingest_rate_eps, mu)
        assert d.worst_case_recovery_s is not None
        assert d.worst_case_recovery_s >= d.predicted_recovery_s
        assert d.policy == "adaptive"
    assert "policy adaptive: interval" in format_explanations(rows)
