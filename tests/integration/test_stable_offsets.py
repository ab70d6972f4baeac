"""Committed offsets at recovery: stable ones only, and missing ones said (real broker).

1. Another producer's transaction holds the sink results of ``[600, 1200)`` and the
   group's offset 1200, still pending, when a worker restores the partition from
   its checkpoint at 600. aiokafka's OffsetFetch would return 600 and the worker
   would emit those results a second time; it must wait until the transaction
   completes and replay to 1200 instead (``runtime/offsets.py``). The sink must
   then equal the brute-force reference exactly: nothing duplicated.
2. A checkpoint exists but the group has no committed offset (expired, deleted, or
   a new ``--group-id`` on the same state dir): the worker says so in the log and
   in ``streamremat_committed_offset_missing_total``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer, TopicPartition

from streamremat.runtime.kafka import produce
from streamremat.runtime.worker import Worker
from tests.integration.gaps_support import (
    committed,
    make_records,
    read_sink,
    reference_emissions,
)
from tests.integration.test_retention_gaps import Metrics, _app, _messages, _run_until, _settings

pytestmark = pytest.mark.timeout(180)


async def _wait_logged(caplog: pytest.LogCaptureFixture, texts: tuple[str, ...],
                       task: asyncio.Task[int], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not any(text in _messages(caplog) for text in texts):
        assert not task.done(), f"worker stopped with {task.result()}\n{_messages(caplog)}"
        assert time.monotonic() < deadline, f"none of {texts} logged\n{_messages(caplog)}"
        await asyncio.sleep(0.05)


async def test_recovery_waits_for_a_pending_transaction_of_its_offsets(
    kafka_bootstrap: str, new_topic: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="streamremat.worker")
    source = new_topic(1, {"retention.ms": "-1"})
    sink = f"{source}-out"
    app = _app(source)
    records = make_records(1_800, int(time.time() * 1000) - 60_000, seed=12)
    await produce(kafka_bootstrap, source, records[:600])
    first = Worker(app, _settings(kafka_bootstrap, tmp_path / "a"))
    assert await _run_until(first, source, 600) == 0  # checkpoint and commit at 600
    await produce(kafka_bootstrap, source, records[600:])

    # The previous owner's last transaction: the results of [600, 1200) and offset 1200.
    done_600 = len(reference_emissions(records[:600]))
    results = reference_emissions(records[:1200])[done_600:]
    assert results
    zombie = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap,
                              transactional_id=f"zombie-{uuid.uuid4().hex[:8]}")
    await zombie.start()
    try:
        await zombie.begin_transaction()
        for key, start, end, value in results:
            payload = {"start_ms": start, "end_ms": end, "value": json.loads(value)}
            await zombie.send(sink, json.dumps(payload).encode(), key=key, partition=0)
        await zombie.send_offsets_to_transaction({TopicPartition(source, 0): (1200, "")},
                                                 first.group_id)
        worker = Worker(app, _settings(kafka_bootstrap, tmp_path / "a"))
        caplog.clear()
        task = asyncio.create_task(worker.run(handle_signals=False))
        try:
            # It waits for the transaction (or, if it did not, has recovered already).
            await _wait_logged(caplog, ("are pending in a transaction; waiting",
                                        f"{source}[0]: recovered: "), task)
            await zombie.commit_transaction()
            deadline = time.monotonic() + 60
            while (await committed(kafka_bootstrap, worker.group_id, source) or 0) < 1800:
                assert not task.done(), f"worker stopped with {task.result()}"
                assert time.monotonic() < deadline, _messages(caplog)
                await asyncio.sleep(0.2)
        finally:
            worker.stop()
        assert await asyncio.wait_for(task, 60) == 0
    finally:
        await zombie.stop()
    expected = Counter(reference_emissions(records))
    assert sum(expected.values()) > 50
    got = await read_sink(kafka_bootstrap, sink)
    assert got == expected, f"{sum((got - expected).values())} results emitted twice"
    text = _messages(caplog)
    assert (f"{source}[0]: recovered: checkpoint offset 600, committed offset 1200, replayed "
            "600 records" in text), text


async def test_a_checkpoint_without_committed_offsets_is_said(
    kafka_bootstrap: str, new_topic: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="streamremat.worker")
    source = new_topic(1, {"retention.ms": "-1"})
    app = _app(source)
    records = make_records(1_200, int(time.time() * 1000) - 60_000, seed=13)
    await produce(kafka_bootstrap, source, records[:600])
    assert await _run_until(Worker(app, _settings(kafka_bootstrap, tmp_path / "a")),
                            source, 600) == 0
    await produce(kafka_bootstrap, source, records[600:])
    # The same state dir, a group without offsets (as after offsets.retention.minutes).
    group = f"{app.group_id}-renamed"
    metrics = Metrics(app)
    worker = Worker(app, _settings(kafka_bootstrap, tmp_path / "a", group_id=group),
                    metrics.sensor)
    missing: list[float | None] = []
    assert await _run_until(worker, source, 1200, lambda: missing.append(
        metrics.value("streamremat_committed_offset_missing_total"))) == 0
    assert missing == [1.0]
    text = _messages(caplog)
    assert (f"{source}[0]: a checkpoint at offset 600 exists but group {group} has no committed "
            "offset" in text), text
    assert (f"{source}[0]: recovered: checkpoint offset 600, committed offset none "
            "(from checkpoint offset 600)" in text), text
    expected = Counter(reference_emissions(records))
    assert await read_sink(kafka_bootstrap, f"{source}-out") == expected
