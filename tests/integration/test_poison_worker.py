"""Poison on the real broker: a failing user function or result encoding goes to the
dead letters once, never stops the worker; an internal error stops it without
committing anything of the failed batch. Outputs are checked against the
brute-force reference (tests/unit/reference.py), not against the engine."""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable
from typing import Any

import orjson
import pytest

import streamremat.runtime.emitting as emitting_module
from streamremat import App, Count, Operator, Sum, Tumbling
from streamremat.runtime.kafka import ProducerRecord, consume_all, end_offsets, produce
from streamremat.runtime.outputs import H_REASON, H_STAGE, H_WINDOW
from streamremat.runtime.settings import CheckpointSettings, WorkerSettings
from streamremat.runtime.worker import Worker
from tests.integration.group_offsets import committed_total
from tests.integration.timing import LONG_SESSION_MS
from tests.unit.poison_support import BIG, PriceTotal
from tests.unit.reference import RefWindow, run_reference

PARTITIONS = 2
SIZE_MS = 1_000


def _clicks(key: Any, start: int, end: int, n: int) -> dict[str, Any]:
    return {"user": key, "start": start, "clicks": n}


def _operators(source: str) -> list[Operator]:
    window = Tumbling(SIZE_MS)
    return [
        Operator(name="sum", source=source, sink=f"{source}-sum", window=window,
                 aggregate={"n": Count(), "total": Sum("x")}),
        Operator(name="price", source=source, sink=f"{source}-price", window=window,
                 aggregate=PriceTotal()),
        Operator(name="users", source=source, sink=f"{source}-users", window=window,
                 aggregate=Count(), output=_clicks),
    ]


def _records(n: int, base_ms: int, first: int = 0, poison: bool = True) -> list[ProducerRecord]:
    """Keys like loadgen's (``b"user-0007"``, not JSON). With ``poison``, three values of
    2**63-1 go to ``user-0003`` on partition 1 (in one or two windows, whose sum
    JSON can't hold), and every 97th record lacks ``price``."""
    out = []
    for i in range(first, first + n):
        x = BIG if poison and 300 <= i < 306 and i % 2 == 1 else i % 7
        value: dict[str, Any] = {"x": x, "price": i % 5}
        if poison and i % 97 == 0:
            del value["price"]
        key = b"user-%04d" % (3 if x == BIG else i % 11)
        out.append(ProducerRecord(key, orjson.dumps(value), base_ms + i * 10, i % PARTITIONS))
    return out


def _reference(records: list[ProducerRecord]) -> dict[str, collections.Counter[Any]]:
    """Per operator, the sink values (key, decoded JSON value) the spec gives."""
    parts: dict[int, list[tuple[bytes, int, dict[str, Any]]]] = collections.defaultdict(list)
    for r in records:
        assert r.value is not None and r.timestamp_ms is not None and r.key is not None
        parts[r.partition or 0].append((r.key, r.timestamp_ms, orjson.loads(r.value)))
    window = RefWindow("tumbling", SIZE_MS)
    want: dict[str, collections.Counter[Any]] = collections.defaultdict(collections.Counter)

    def count_and_sum(vs: list[dict[str, Any]]) -> dict[str, int]:
        return {"n": len(vs), "total": sum(v["x"] for v in vs)}

    def price(vs: list[dict[str, Any]]) -> int:
        return sum(v["price"] for v in vs)

    for recs in parts.values():
        for k, s, e, v in run_reference(window, recs, count_and_sum).emissions:
            if v["total"] < 2**64:
                want["sum"][(k, _json({"start_ms": s, "end_ms": e, "value": v}))] += 1
            else:  # JSON cannot hold it: the window goes to the dead letters
                want["sum-overflow"][(k, f"{s},{e}".encode())] += 1
        # A record whose add raised is a dead letter: it has no effect at all.
        priced = [r for r in recs if "price" in r[2]]
        for k, s, e, v in run_reference(window, priced, price).emissions:
            want["price"][(k, _json({"start_ms": s, "end_ms": e, "value": v}))] += 1
        for k, s, e, v in run_reference(window, recs, len).emissions:
            want["users"][(k, _json(_clicks(k.decode(), s, e, v)))] += 1
    return want


def _json(obj: Any) -> bytes:
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)


async def _wait_committed(worker: Worker, task: asyncio.Task[int], bootstrap: str,
                          topic: str, timeout_s: float = 60) -> None:
    target = sum((await end_offsets(bootstrap, topic)).values())
    deadline = time.monotonic() + timeout_s
    while await committed_total(bootstrap, worker.group_id, topic, PARTITIONS) < target:
        assert not task.done(), f"worker stopped early with {task.result()}"
        assert time.monotonic() < deadline, "worker did not catch up in time"
        await asyncio.sleep(0.2)


def _worker(source: str, bootstrap: str, tmp_path: Any, ops: list[Operator]) -> Worker:
    settings = WorkerSettings(
        bootstrap_servers=bootstrap, state_dir=str(tmp_path / "state"), commit_interval_s=0.2,
        session_timeout_ms=LONG_SESSION_MS,
        checkpoints=CheckpointSettings(policy="fixed", interval_s=0.3),
    )
    return Worker(App(f"w-{source}", ops), settings)


async def _sinks(bootstrap: str, ops: list[Operator]) -> dict[str, collections.Counter[Any]]:
    got: dict[str, collections.Counter[Any]] = {}
    for op in ops:
        sink = await consume_all(bootstrap, op.sink, isolation_level="read_committed")
        got[op.name] = collections.Counter(
            (r.key, _json(orjson.loads(r.value or b""))) for r in sink
        )
    return got


async def test_poison_goes_to_the_dead_letters_once_and_the_rest_is_exact(
    kafka_bootstrap: str, new_topic: Callable[..., str], tmp_path: Any
) -> None:
    source = new_topic(PARTITIONS, {"retention.ms": "-1"})
    records = _records(2_000, int(time.time() * 1000) - 60_000)
    await produce(kafka_bootstrap, source, records)
    operators = _operators(source)
    worker = _worker(source, kafka_bootstrap, tmp_path, operators)
    task = asyncio.create_task(worker.run(handle_signals=False))
    try:
        await _wait_committed(worker, task, kafka_bootstrap, source)
    finally:
        worker.stop()
    assert await asyncio.wait_for(task, 60) == 0

    want = _reference(records)
    assert await _sinks(kafka_bootstrap, operators) == {op.name: want[op.name] for op in operators}
    ops = {op.name: op for op in operators}
    overflows = await consume_all(kafka_bootstrap, ops["sum"].dead_letter_topic)
    assert collections.Counter(
        (r.key, dict(r.headers)[H_WINDOW]) for r in overflows
    ) == want["sum-overflow"] and len(overflows) >= 1
    for r in overflows:
        headers = dict(r.headers)
        assert headers[H_STAGE] == b"output"
        assert b"Integer exceeds 64-bit range" in headers[H_REASON]
    no_price = await consume_all(kafka_bootstrap, ops["price"].dead_letter_topic)
    assert sorted(r.value or b"" for r in no_price) == sorted(
        r.value or b"" for i, r in enumerate(records) if i % 97 == 0
    )
    assert {dict(r.headers)[H_STAGE] for r in no_price} == {b"aggregate"}
    assert await consume_all(kafka_bootstrap, ops["users"].dead_letter_topic) == []


async def test_internal_error_commits_nothing_of_the_failed_batch(
    kafka_bootstrap: str, new_topic: Callable[..., str], tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    """A bug that raises mid-batch (here: while serializing the batch's results, after
    every task's state and the position advanced) stops the worker with exit code 3
    and a traceback; the restart's output equals the reference, nothing lost or
    duplicated."""
    source = new_topic(PARTITIONS, {"retention.ms": "-1"})
    base = int(time.time() * 1000) - 60_000
    first = _records(1_000, base, poison=False)
    second = _records(1_000, base, first=1_000, poison=False)
    await produce(kafka_bootstrap, source, first)
    operators = _operators(source)[:2]  # JSON-free keys reach no output function here
    worker = _worker(source, kafka_bootstrap, tmp_path, operators)
    task = asyncio.create_task(worker.run(handle_signals=False))
    await _wait_committed(worker, task, kafka_bootstrap, source)
    await asyncio.sleep(1.0)  # a checkpoint or two at the committed offset

    # the emitter's serialization of a task's output (natively or not)
    real_to_records = emitting_module.to_sendables

    def broken(*args: Any) -> Any:
        real_to_records(*args)  # state, position and serialization all went through
        raise RuntimeError("injected internal error")

    monkeypatch.setattr(emitting_module, "to_sendables", broken)
    await produce(kafka_bootstrap, source, second)
    with caplog.at_level(logging.ERROR, logger="streamremat.worker"):
        assert await asyncio.wait_for(task, 60) == 3
    internal = [r for r in caplog.records if "internal error" in r.getMessage()]
    assert internal and internal[0].exc_info is not None
    assert await committed_total(kafka_bootstrap, worker.group_id, source, PARTITIONS) == len(first)

    monkeypatch.setattr(emitting_module, "to_sendables", real_to_records)
    restarted = _worker(source, kafka_bootstrap, tmp_path, operators)
    task = asyncio.create_task(restarted.run(handle_signals=False))
    try:
        await _wait_committed(restarted, task, kafka_bootstrap, source)
    finally:
        restarted.stop()
    assert await asyncio.wait_for(task, 60) == 0
    want = _reference(first + second)
    assert await _sinks(kafka_bootstrap, operators) == {op.name: want[op.name] for op in operators}
