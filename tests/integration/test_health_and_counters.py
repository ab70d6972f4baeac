"""/healthz, /ready and the partition-state metric follow the partitions through
restore, replay and live (issue 12 item 5); counters never go back within a
process across rebalances (issue 10 item 9). In-process workers, real broker."""

from __future__ import annotations

import asyncio
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import orjson

from streamremat import App, Count, Operator, Tumbling
from streamremat.dev.ports import free_port_run
from streamremat.metrics.prometheus import PrometheusSensor
from streamremat.runtime.kafka import ProducerRecord, end_offsets, produce
from streamremat.runtime.settings import CheckpointSettings, WorkerSettings
from streamremat.runtime.worker import Worker
from tests.integration.group_offsets import committed_by_partition
from tests.integration.timing import LONG_SESSION_MS

PARTITIONS = 2


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


class Recording(PrometheusSensor):
    """Asks /ready at every state change, from inside the worker's loop: what a
    probe would have seen at that moment."""

    port = 0

    def __init__(self, app: str) -> None:
        super().__init__(app)
        self.seen: list[tuple[int, str, int, str]] = []

    def on_partition_state(self, operator: str, partition: int, state: str) -> None:
        super().on_partition_state(operator, partition, state)
        code, text = _get(self.port, "/ready")
        self.seen.append((partition, state, code, text))


def _app(source: str) -> App:
    return App(f"h-{source}"[:90], [Operator(
        name="n", source=source, sink=f"{source}-out", window=Tumbling(1_000),
        aggregate=Count(),
    )])


def _settings(bootstrap: str, state_dir: Path, **kw: Any) -> WorkerSettings:
    return WorkerSettings(
        bootstrap_servers=bootstrap, state_dir=str(state_dir), commit_interval_s=0.2,
        session_timeout_ms=LONG_SESSION_MS,
        checkpoints=CheckpointSettings(policy="fixed", interval_s=3600, replicate=False), **kw,
    )


async def _produce(bootstrap: str, topic: str, n: int, bad_every: int = 0) -> None:
    now = int(time.time() * 1000) - 60_000
    await produce(bootstrap, topic, [
        ProducerRecord(b"k%d" % (i % 7),
                       b"{nope" if bad_every and i % bad_every == 0 else orjson.dumps({"i": i}),
                       now + i * 5, i % PARTITIONS)
        for i in range(n)
    ])


async def _committed_all(worker: Worker, bootstrap: str, topic: str) -> bool:
    from aiokafka.admin import AIOKafkaAdminClient

    ends = await end_offsets(bootstrap, topic)
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        got = await committed_by_partition(admin, worker.group_id, topic)
    finally:
        await admin.close()
    if got is None:
        return False  # the group's coordinator is still loading or moving
    return all(got.get(p, -1) >= end for p, end in ends.items())


async def _until(predicate: Any, task: asyncio.Task[int], what: str, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while not await predicate():
        assert not task.done(), f"worker exited ({task.result()}) waiting for {what}"
        assert time.monotonic() < deadline, f"no {what} within {timeout_s} s"
        await asyncio.sleep(0.1)


async def test_ready_and_healthz_follow_restore_replay_live(
    kafka_bootstrap: str, new_topic: Any, tmp_path: Path
) -> None:
    source = new_topic(PARTITIONS, {"retention.ms": "-1"})
    await _produce(kafka_bootstrap, source, 6_000)
    app = _app(source)
    first = Worker(app, _settings(kafka_bootstrap, tmp_path / "a"))
    task = asyncio.create_task(first.run(handle_signals=False))
    await _until(lambda: _committed_all(first, kafka_bootstrap, source), task, "commits")
    first.stop()
    assert await asyncio.wait_for(task, 60) == 0

    # Another machine (empty state dir, no replica): it restores nothing and replays
    # everything below the committed offsets before it goes live.
    sensor = Recording(app.name)
    sensor.port = port = free_port_run(1)
    server, _ = sensor.serve(port, "127.0.0.1", stall_s=1.0)
    try:
        code, text = _get(port, "/ready")
        assert code == 503 and "waiting for the consumer group" in text, text
        second = Worker(app, _settings(kafka_bootstrap, tmp_path / "b", health_stall_s=1.0),
                        sensor)
        task = asyncio.create_task(second.run(handle_signals=False))

        async def ready() -> bool:
            return _get(port, "/ready")[0] == 200

        await _until(ready, task, "/ready 200")
        assert _get(port, "/healthz") == (200, "ok\n")
        metrics = _get(port, "/metrics")[1]
        for p in range(PARTITIONS):
            assert (f'streamremat_partition_state{{app="{app.name}",operator="n",'
                    f'partition="{p}",state="live"}} 1.0') in metrics
        assert f'streamremat_group_session_alive{{app="{app.name}"}} 1.0' in metrics
        for p in range(PARTITIONS):
            mine = [(state, code) for q, state, code, _ in sensor.seen if q == p]
            states = [state for state, _ in mine]
            assert states[:1] == ["restoring"] and states[-1] == "live", mine
            assert "replaying" in states, mine
            # Not ready while restoring or replaying.
            assert all(code == 503 for state, code in mine if state != "live"), mine
        texts = [text for _, state, _, text in sensor.seen if state == "replaying"]
        assert any("replaying" in t for t in texts), texts
        second.stop()
        assert await asyncio.wait_for(task, 60) == 0
        await asyncio.sleep(1.5)  # the loop no longer goes round
        code, text = _get(port, "/healthz")
        assert code == 503 and "has not gone round" in text, text
    finally:
        server.shutdown()
        server.server_close()


def _value(sensor: PrometheusSensor, name: str, partition: int, **labels: str) -> float:
    got = sensor.registry.get_sample_value(
        name, {"app": sensor.app, "operator": "n", "partition": str(partition), **labels}
    )
    return 0.0 if got is None else got


async def test_counters_never_go_back_across_rebalances(
    kafka_bootstrap: str, new_topic: Any, tmp_path: Path
) -> None:
    source = new_topic(PARTITIONS, {"retention.ms": "-1"})
    await _produce(kafka_bootstrap, source, 4_000, bad_every=49)
    app = _app(source)
    sensor = PrometheusSensor(app.name)
    one = Worker(app, _settings(kafka_bootstrap, tmp_path / "one"), sensor)
    task_one = asyncio.create_task(one.run(handle_signals=False))
    await _until(lambda: _committed_all(one, kafka_bootstrap, source), task_one, "commits")

    def counters() -> list[float]:
        return [v for p in range(PARTITIONS) for v in (
            _value(sensor, "streamremat_records_in_total", p),
            _value(sensor, "streamremat_dead_letters_total", p, reason="value"),
        )]

    before = counters()
    assert all(v > 0 for v in before), before
    # A second worker joins (each gets one partition), then leaves (one gets both back).
    two = Worker(app, _settings(kafka_bootstrap, tmp_path / "two"))
    task_two = asyncio.create_task(two.run(handle_signals=False))

    async def split() -> bool:
        return len(one.runners) == 1 and len(two.runners) == 1

    await _until(split, task_two, "a 1/1 split")
    during = counters()
    two.stop()
    assert await asyncio.wait_for(task_two, 60) == 0

    async def both_back() -> bool:
        return len(one.runners) == PARTITIONS

    await _until(both_back, task_one, "both partitions back")
    after = counters()
    one.stop()
    assert await asyncio.wait_for(task_one, 60) == 0
    assert all(b <= d <= a for b, d, a in zip(before, during, after, strict=True)), (
        before, during, after)
