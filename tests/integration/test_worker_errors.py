"""What a new user sees on the real broker when the source or the address is wrong,
and on a fresh group (issue 10 item 9)."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.records_to_delete import RecordsToDelete

from streamremat import App, Count, Operator, Tumbling
from streamremat.runtime.kafka import ProducerRecord, produce
from streamremat.runtime.settings import CheckpointSettings, WorkerSettings
from streamremat.runtime.worker import Worker
from tests.integration.timing import LONG_SESSION_MS


def _app(source: str) -> App:
    return App(f"e-{source}"[:90], [Operator(name="n", source=source, sink=f"{source}-out",
                                             window=Tumbling(1_000), aggregate=Count())])


def _settings(bootstrap: str, tmp_path: Path) -> WorkerSettings:
    return WorkerSettings(bootstrap_servers=bootstrap, state_dir=str(tmp_path / "state"),
                          commit_interval_s=0.2, session_timeout_ms=LONG_SESSION_MS,
                          checkpoints=CheckpointSettings(policy="fixed", interval_s=1,
                                                         replicate=False))


def _errors(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(r.getMessage() for r in caplog.records if r.levelname == "ERROR"
                     and r.name.startswith("streamremat"))


async def test_missing_source_topic_says_so(kafka_bootstrap: str, tmp_path: Path,
                                            caplog: pytest.LogCaptureFixture) -> None:
    source = f"never-created-{time.time_ns()}"
    code = await asyncio.wait_for(
        Worker(_app(source), _settings(kafka_bootstrap, tmp_path)).run(handle_signals=False), 60
    )
    assert code == 2
    errors = _errors(caplog)
    assert f"topic {source!r} does not exist" in errors, errors
    assert "error 3" not in errors


async def test_wrong_bootstrap_does_not_advise_creating_the_topic(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    code = await asyncio.wait_for(
        Worker(_app("clicks"), _settings("127.0.0.1:1", tmp_path)).run(handle_signals=False), 60
    )
    assert code == 2
    errors = _errors(caplog)
    assert "cannot reach Kafka at 127.0.0.1:1" in errors and "--bootstrap" in errors, errors
    assert "create it first" not in errors


async def test_fresh_group_logs_no_committed_offset(
    kafka_bootstrap: str, new_topic: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Retention deleted the first records: the new group starts at the log start,
    which is not a committed offset."""
    caplog.set_level(logging.INFO, logger="streamremat")  # the recovered line is INFO
    source = new_topic(1, {"retention.ms": "-1"})
    now = int(time.time() * 1000)
    await produce(kafka_bootstrap, source,
                  [ProducerRecord(b"k", orjson.dumps({"i": i}), now + i, 0) for i in range(50)])
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        await admin.delete_records({TopicPartition(source, 0): RecordsToDelete(20)})
    finally:
        await admin.close()
    worker = Worker(_app(source), _settings(kafka_bootstrap, tmp_path))
    task = asyncio.create_task(worker.run(handle_signals=False))
    try:
        deadline = time.monotonic() + 120
        while not any(": recovered: " in r.getMessage() for r in caplog.records):
            assert not task.done() and time.monotonic() < deadline, _errors(caplog)
            await asyncio.sleep(0.1)
    finally:
        worker.stop()
    assert await asyncio.wait_for(task, 60) == 0
    line = next(r.getMessage() for r in caplog.records if ": recovered: " in r.getMessage())
    assert "committed offset none (new group, from offset 20)" in line, line
    assert "committed offset 20" not in line


class FailsHandingOver(Worker):
    """A bug while handing partitions over (inside aiokafka's rebalance listener)."""

    async def _hand_over(self, tps: list[TopicPartition]) -> None:
        if tps:
            raise RuntimeError("injected bug in the hand-over")
        await super()._hand_over(tps)


async def test_an_internal_error_in_the_rebalance_listener_stops_the_worker(
    kafka_bootstrap: str, new_topic: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """aiokafka only logs what a listener raises; the worker must still exit 3 and abort."""
    caplog.set_level(logging.INFO, logger="streamremat")
    source = new_topic(1)
    now = int(time.time() * 1000)
    await produce(kafka_bootstrap, source,
                  [ProducerRecord(b"k", orjson.dumps({"i": i}), now + i, 0) for i in range(20)])
    worker = FailsHandingOver(_app(source), _settings(kafka_bootstrap, tmp_path))
    task = asyncio.create_task(worker.run(handle_signals=False))
    other = None
    try:
        deadline = time.monotonic() + 120
        while not any(": recovered: " in r.getMessage() for r in caplog.records):
            assert not task.done() and time.monotonic() < deadline, _errors(caplog)
            await asyncio.sleep(0.1)
        # A second member joins the group: the rebalance revokes the worker's partition.
        other = AIOKafkaConsumer(source, bootstrap_servers=kafka_bootstrap,
                                 group_id=worker.group_id, enable_auto_commit=False)
        await other.start()
        code = await asyncio.wait_for(asyncio.shield(task), 60)
    finally:
        worker.stop()
        if other is not None:
            await other.stop()
    assert code == 3
    failed = [r for r in caplog.records if r.getMessage().startswith("internal error")]
    assert failed and failed[0].exc_info is not None, _errors(caplog)
    assert "injected bug in the hand-over" in str(failed[0].exc_info[1])
    assert worker.runners == {}  # aborted and dropped, nothing handed over
