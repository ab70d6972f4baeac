"""A backlogged worker makes progress on every assigned partition (issue 10 item 8):
all records are produced before the worker starts; early in the catch-up every
partition's committed offset has moved, and no partition is far behind another."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import orjson
from aiokafka.admin import AIOKafkaAdminClient

from streamremat import App, Count, Operator, Tumbling
from streamremat.runtime.kafka import ProducerRecord, end_offsets, produce
from streamremat.runtime.settings import CheckpointSettings, WorkerSettings
from streamremat.runtime.worker import Worker
from tests.integration.group_offsets import committed_by_partition
from tests.integration.timing import LONG_SESSION_MS

PARTITIONS = 4
#: Enough for the catch-up to span many commits on an idle machine too: with 12,000
#: CI's idle run committed 800 then 12,000 per partition, no sample in the middle
#: (a commit covers ~2-11k records a partition here; 50,000 gave 11-12 middle samples).
PER_PARTITION = 50_000


async def test_backlog_progresses_on_every_partition(
    kafka_bootstrap: str, new_topic: Any, tmp_path: Path
) -> None:
    source = new_topic(PARTITIONS, {"retention.ms": "-1"})
    base = int(time.time() * 1000) - 3_600_000
    await produce(kafka_bootstrap, source, [
        ProducerRecord(b"k%d" % (i % 50), orjson.dumps({"i": i}), base + i, i % PARTITIONS)
        for i in range(PARTITIONS * PER_PARTITION)
    ])
    ends = await end_offsets(kafka_bootstrap, source)
    total = sum(ends.values())
    app = App(f"f-{source}"[:90], [Operator(name="n", source=source, sink=f"{source}-out",
                                            window=Tumbling(1_000), aggregate=Count())])
    worker = Worker(app, WorkerSettings(
        bootstrap_servers=kafka_bootstrap, state_dir=str(tmp_path / "state"),
        commit_interval_s=0.2, session_timeout_ms=LONG_SESSION_MS, max_batch_records=400,
        checkpoints=CheckpointSettings(policy="fixed", interval_s=3600, replicate=False),
    ))
    task = asyncio.create_task(worker.run(handle_signals=False))
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    samples: list[dict[int, int]] = []
    try:
        deadline = time.monotonic() + 240
        while True:
            assert not task.done() and time.monotonic() < deadline, samples[-3:]
            found = await committed_by_partition(admin, worker.group_id, source)
            committed = {p: 0 for p in range(PARTITIONS)}
            committed.update(found or {})  # None: a fresh broker's coordinator not ready
            samples.append(committed)
            if sum(committed.values()) >= total:
                break
            await asyncio.sleep(0.1)
    finally:
        await admin.close()
        worker.stop()
    assert await asyncio.wait_for(task, 60) == 0
    # Every sample from a quarter to three quarters of the catch-up: each partition
    # has moved, and the slowest has at least a third of the fastest's progress.
    middle = [s for s in samples if total / 4 <= sum(s.values()) <= 3 * total / 4]
    assert middle, samples
    spreads = [min(s.values()) / max(s.values()) for s in middle]
    print(f"spread (slowest/fastest committed) during catch-up: min {min(spreads):.2f}, "
          f"samples {len(middle)}")
    assert all(min(s.values()) > 0 for s in middle), middle
    assert min(spreads) >= 1 / 3, list(zip(spreads, middle, strict=True))
