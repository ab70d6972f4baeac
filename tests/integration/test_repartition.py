"""Re-keyed operators on the real broker: one result per new key and window, on any
number of source partitions, equal to the reference computed over all records per key."""

from __future__ import annotations

import asyncio
import collections
import logging
import random
import re
import time
from datetime import timedelta
from typing import Any

import orjson
import pytest
from aiokafka import TopicPartition
from aiokafka.admin import RecordsToDelete

from streamremat import App, Count, Operator, Sum, Tumbling
from streamremat.core.topology import repartition_topic
from streamremat.runtime.kafka import (
    KafkaAdminError,
    ProducerRecord,
    admin_client,
    beginning_offsets,
    consume_all,
    end_offsets,
    produce,
    topic_config,
    topic_partitions,
)
from streamremat.runtime.outputs import partition_for
from streamremat.runtime.settings import CheckpointSettings, WorkerSettings
from streamremat.runtime.worker import Worker
from tests.integration.group_offsets import committed_by_partition
from tests.integration.timing import LONG_SESSION_MS
from tests.unit.reference import RefWindow, run_reference

PARTITIONS = 4
SHOPS = ("north", "south", "east", "west", "centre", "harbour", "airport")
MINUTE = 60_000
GRACE_MS = 20 * MINUTE  # covers the whole data span: no record is late anywhere


def revenue_operator(source: str, sink: str) -> Operator:
    """The README's operator, on fresh topics."""
    return Operator(
        name="revenue-per-shop",
        source=source,
        sink=sink,
        window=Tumbling(timedelta(minutes=1), grace_ms=GRACE_MS),
        aggregate={"orders": Count(), "revenue": Sum("amount")},
        key_by=lambda order: order["shop"],
    ).filter(lambda order: order["amount"] > 0)


def orders(n: int, base_ms: int, seed: int) -> tuple[list[ProducerRecord], int]:
    """Keyless orders round-robin over the partitions, event time over ~10 minutes,
    some with amount <= 0 (filtered) and some malformed (dead letters)."""
    rng = random.Random(seed)
    out, bad = [], 0
    for i in range(n):
        value: bytes = orjson.dumps({"shop": rng.choice(SHOPS), "amount": rng.randint(-3, 40)})
        if i % 101 == 0:
            value, bad = (b"{not json" if i % 2 else orjson.dumps({"amount": 3})), bad + 1
        ts = base_ms + i * 10 * MINUTE // n + rng.randint(0, 5_000)
        out.append(ProducerRecord(None, value, ts, i % PARTITIONS))
    return out, bad


def reference(records: list[ProducerRecord]) -> collections.Counter[Any]:
    """Per shop, over all its records whatever their source partition."""
    per_key: dict[bytes, list[tuple[bytes, int, Any]]] = collections.defaultdict(list)
    for r in records:
        try:
            order = orjson.loads(r.value or b"")
            shop, amount = order["shop"], order["amount"]
        except (orjson.JSONDecodeError, KeyError):
            continue
        if amount > 0:
            key = orjson.dumps(shop)
            per_key[key].append((key, r.timestamp_ms or 0, amount))
    window = RefWindow("tumbling", MINUTE, grace=GRACE_MS)
    expected: collections.Counter[Any] = collections.Counter()
    for recs in per_key.values():
        out = run_reference(window, recs, lambda xs: {"orders": len(xs), "revenue": sum(xs)})
        expected.update((k, s, e, orjson.dumps(v, option=orjson.OPT_SORT_KEYS))
                        for k, s, e, v in out.emissions)
    return expected


async def read_sink(bootstrap: str, sink: str) -> collections.Counter[Any]:
    got: collections.Counter[Any] = collections.Counter()
    for r in await consume_all(bootstrap, sink, isolation_level="read_committed"):
        v = orjson.loads(r.value or b"")
        got[(r.key, v["start_ms"], v["end_ms"],
             orjson.dumps(v["value"], option=orjson.OPT_SORT_KEYS))] += 1
    return got


async def wait_count(bootstrap: str, topic: str, n: int, task: asyncio.Task[int],
                     timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            have = len(await consume_all(bootstrap, topic, isolation_level="read_committed"))
        except KafkaAdminError:  # the worker has not created it yet
            have = 0
        if have >= n:
            return
        assert not task.done(), f"worker stopped early with {task.result()}"
        assert time.monotonic() < deadline, f"{topic}: {have} of {n} records after {timeout_s} s"
        await asyncio.sleep(0.5)


async def wait_forwarded(bootstrap: str, group: str, source: str, task: asyncio.Task[int],
                         timeout_s: float = 90) -> None:
    """Wait until the group committed ``source`` to its end: the repartition stage
    forwarded every record (its forwards commit with those offsets)."""
    ends = await end_offsets(bootstrap, source)
    deadline = time.monotonic() + timeout_s
    async with admin_client(bootstrap) as admin:
        while True:
            done = await committed_by_partition(admin, group, source) or {}
            if all(done.get(p, -1) >= end for p, end in ends.items()):
                return
            assert not task.done(), f"worker stopped early with {task.result()}"
            assert time.monotonic() < deadline, f"{source}: committed {done}, end {ends}"
            await asyncio.sleep(0.3)


@pytest.mark.timeout(240)
async def test_readme_example_on_four_partitions(kafka_bootstrap: str, new_topic: Any,
                                                 tmp_path: Any) -> None:
    source = new_topic(PARTITIONS, {"retention.ms": "-1"})
    op = revenue_operator(source, f"{source}-out")
    app = App(f"rp-{source}", [op])
    base = int(time.time() * 1000) - 30 * MINUTE
    data, bad = orders(3_000, base, seed=7)
    # Closers, sent once the data is through the repartition stage: far enough
    # ahead to close every data window on every repartition partition.
    closers = [ProducerRecord(None, orjson.dumps({"shop": s, "amount": 1}),
                              base + 10 * MINUTE + GRACE_MS + 2 * MINUTE, i % PARTITIONS)
               for i, s in enumerate(SHOPS)]
    expected = reference(data + closers)
    settings = WorkerSettings(
        bootstrap_servers=kafka_bootstrap, state_dir=str(tmp_path / "state"),
        commit_interval_s=0.2, session_timeout_ms=LONG_SESSION_MS,
        checkpoints=CheckpointSettings(policy="fixed", interval_s=1.0),
    )
    worker = Worker(app, settings)
    run = asyncio.create_task(worker.run(handle_signals=False))
    try:
        await produce(kafka_bootstrap, source, data)
        topic = repartition_topic(app.name, op.name)
        await wait_forwarded(kafka_bootstrap, app.group_id, source, run)
        await produce(kafka_bootstrap, source, closers)
        await wait_count(kafka_bootstrap, op.sink, sum(expected.values()), run)
    finally:
        worker.stop()
    assert await asyncio.wait_for(run, 60) == 0

    got = await read_sink(kafka_bootstrap, op.sink)
    per_window = collections.Counter((k, s) for k, s, _, _ in got.elements())
    assert max(per_window.values()) == 1, "a (shop, window) has more than one result"
    assert len({k for k, _ in per_window}) == len(SHOPS)
    assert got == expected
    # The repartition topic: as many partitions as the source, event time as timestamp,
    # a time retention covering the kept checkpoints.
    forwarded = await consume_all(kafka_bootstrap, topic, isolation_level="read_committed")
    assert len(await topic_partitions(kafka_bootstrap, topic)) == PARTITIONS
    assert all(r.partition == partition_for(r.key, PARTITIONS) for r in forwarded)
    assert sorted(r.timestamp_ms for r in forwarded) == sorted(
        r.timestamp_ms or 0 for r in data + closers if _valid(r))
    config = await topic_config(kafka_bootstrap, topic)
    assert int(config["retention.ms"]) == settings.repartition_retention_ms
    dead = await consume_all(kafka_bootstrap, op.dead_letter_topic)
    assert len(dead) == bad


@pytest.mark.timeout(240)
async def test_purged_repartition_topic_still_restores(kafka_bootstrap: str, new_topic: Any,
                                                       tmp_path: Any,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    """Checkpoints every 0.3 s, two kept: the worker deletes repartition records below
    the older one. A new worker on another machine (no local state: the replica)
    restores from above the deleted range and the output is still the reference."""
    caplog.set_level(logging.INFO, logger="streamremat.worker")
    source = new_topic(PARTITIONS, {"retention.ms": "-1"})
    op = revenue_operator(source, f"{source}-out")
    app = App(f"rp-{source}", [op])
    topic = repartition_topic(app.name, op.name)
    base = int(time.time() * 1000) - 30 * MINUTE
    data, _ = orders(4_000, base, seed=11)

    def settings(machine: str) -> WorkerSettings:
        return WorkerSettings(
            bootstrap_servers=kafka_bootstrap, state_dir=str(tmp_path / machine),
            commit_interval_s=0.2, session_timeout_ms=LONG_SESSION_MS,
            checkpoints=CheckpointSettings(policy="fixed", interval_s=0.3, keep=2),
        )

    worker = Worker(app, settings("a"))
    run = asyncio.create_task(worker.run(handle_signals=False))
    first = data[:2_400]
    try:
        for i in range(0, len(first), 300):  # checkpoints at many offsets
            await produce(kafka_bootstrap, source, first[i:i + 300])
            await asyncio.sleep(0.5)
        deadline = time.monotonic() + 30
        while not any((await beginning_offsets(kafka_bootstrap, topic)).values()):
            assert time.monotonic() < deadline, "no repartition records were deleted"
            await asyncio.sleep(0.3)
    finally:
        worker.stop()
    assert await asyncio.wait_for(run, 60) == 0
    purged = await beginning_offsets(kafka_bootstrap, topic)

    caplog.clear()
    worker = Worker(app, settings("b"))  # another machine: restores from the replica
    run = asyncio.create_task(worker.run(handle_signals=False))
    closers = [ProducerRecord(None, orjson.dumps({"shop": s, "amount": 1}),
                              base + 10 * MINUTE + GRACE_MS + 2 * MINUTE, i % PARTITIONS)
               for i, s in enumerate(SHOPS)]
    expected = reference(data + closers)
    try:
        await produce(kafka_bootstrap, source, data[2_400:])
        await wait_forwarded(kafka_bootstrap, app.group_id, source, run)
        await produce(kafka_bootstrap, source, closers)
        await wait_count(kafka_bootstrap, op.sink, sum(expected.values()), run)
    finally:
        worker.stop()
    assert await asyncio.wait_for(run, 60) == 0
    assert await read_sink(kafka_bootstrap, op.sink) == expected
    restored = {int(m[1]): int(m[2]) for m in re.finditer(
        re.escape(topic) + r"\[(\d+)\]: recovered: checkpoint offset (\d+)", caplog.text)}
    deleted = [p for p, start in purged.items() if start > 0]
    assert all(restored[p] >= purged[p] for p in deleted), (restored, purged)


def _valid(r: ProducerRecord) -> bool:
    try:
        order = orjson.loads(r.value or b"")
        return "shop" in order and order["amount"] > 0
    except (orjson.JSONDecodeError, KeyError):
        return False


@pytest.mark.timeout(120)
async def test_tuner_bounds_the_interval_by_the_repartition_topics_retention(
    kafka_bootstrap: str, new_topic: Any, tmp_path: Any
) -> None:
    """The windowed stage's source is the repartition topic: its retention (here
    40 s) is the T_retention of that stage's tuner, and the tuner picks below it."""
    source = new_topic(PARTITIONS, {"retention.ms": "-1"})
    op = revenue_operator(source, f"{source}-out")
    app = App(f"rp-{source}", [op])
    topic = repartition_topic(app.name, op.name)
    settings = WorkerSettings(
        bootstrap_servers=kafka_bootstrap, state_dir=str(tmp_path / "state"),
        commit_interval_s=0.2, session_timeout_ms=LONG_SESSION_MS, repartition_retention_s=40,
        checkpoints=CheckpointSettings(policy="adaptive", min_interval_s=1,
                                       max_interval_s=600, rto_s=600),
    )
    worker = Worker(app, settings)
    run = asyncio.create_task(worker.run(handle_signals=False))
    try:
        data, _ = orders(400, int(time.time() * 1000) - 30 * MINUTE, seed=5)
        await produce(kafka_bootstrap, source, data)
        deadline = time.monotonic() + 60
        while len([tp for tp in worker.runners if tp.topic == topic]) < PARTITIONS:
            assert not run.done() and time.monotonic() < deadline
            await asyncio.sleep(0.2)
        for tp, runner in list(worker.runners.items()):
            decision = runner.scheduler.decision(time.time(), 0.0)
            if tp.topic == topic:
                assert decision.t_retention_s == pytest.approx(20.0)  # 0.5 x 40 s
                assert decision.interval_s <= 20.0
            else:
                assert decision.t_retention_s == float("inf")  # the source keeps all
    finally:
        worker.stop()
    assert await asyncio.wait_for(run, 60) == 0
    assert (await topic_config(kafka_bootstrap, topic))["retention.ms"] == "40000"


@pytest.mark.timeout(120)
async def test_a_gap_in_the_repartition_topic_goes_through_the_gap_policy(
    kafka_bootstrap: str, new_topic: Any, tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Records of the repartition topic that the windowed stage never read are
    deleted: its restart is a retention gap, and ``fail`` (the default) stops the
    worker with the error naming the repartition topic, committing nothing."""
    source = new_topic(PARTITIONS, {"retention.ms": "-1"})
    op = revenue_operator(source, f"{source}-out")
    app = App(f"rp-{source}", [op])
    topic = repartition_topic(app.name, op.name)
    data, _ = orders(800, int(time.time() * 1000) - 30 * MINUTE, seed=3)
    settings = WorkerSettings(
        bootstrap_servers=kafka_bootstrap, state_dir=str(tmp_path / "state"),
        commit_interval_s=0.2, session_timeout_ms=LONG_SESSION_MS,
        checkpoints=CheckpointSettings(policy="fixed", interval_s=3600, replicate=False),
    )
    worker = Worker(app, settings)
    run = asyncio.create_task(worker.run(handle_signals=False))
    try:
        await produce(kafka_bootstrap, source, data)
        await wait_forwarded(kafka_bootstrap, app.group_id, source, run)
    finally:
        worker.stop()
    assert await asyncio.wait_for(run, 60) == 0  # checkpoints at the clean stop
    # Forwards the windowed stage has not read yet (as if a stage-1 worker had run
    # on), then deleted: the checkpoint offset is below the log start now.
    forwarded = await consume_all(kafka_bootstrap, topic)
    p = forwarded[0].partition
    again = [ProducerRecord(r.key, r.value, r.timestamp_ms, p)
             for r in forwarded if r.partition == p][:50]
    await produce(kafka_bootstrap, topic, again)
    end = (await end_offsets(kafka_bootstrap, topic))[p]
    async with admin_client(kafka_bootstrap) as admin:
        await admin.delete_records({TopicPartition(topic, p): RecordsToDelete(end - 10)})

    caplog.clear()
    code = await asyncio.wait_for(Worker(app, settings).run(handle_signals=False), 60)
    assert code == 2
    assert any(f"{topic}[{p}]" in r.getMessage() and "below the log start offset" in
               r.getMessage() for r in caplog.records), caplog.text[-3000:]
