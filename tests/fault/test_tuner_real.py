"""The tuner on the real system (issue 5): failures injected on a schedule; every
measured recovery stays within the RTO the tuner was given, and the recovery time
the tuner predicted just before each failure after the first (once it has measured
a recovery) is within a factor of 2 of the measured one. (It was ±50 %; on this
shared 2-core machine the measured few seconds swing by more than that with the
load — seen: predicted 2.7 s / measured 4.6 s under load, 5.1 s / 3.3 s idle —
while a wrong model is off by 10x: the issue 14 scenario predicted 93.8 s for a
6.7 s recovery.)

Recovery is measured as DESIGN §8 defines it: from the kill until the lag is back
to ~0 (the group's committed offsets within half a second of ingest of the end).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from streamremat.dev.ports import free_port_run
from streamremat.runtime.kafka import end_offsets

pytestmark = pytest.mark.fault

ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 2
RATE = 2_000  # events/s into the source
RTO_S = 30.0
FAILURES = 4  # the first, predicted from the prior, is checked against the RTO only


def _start(
    bootstrap: str, source: str, state: Path, port: int, log: Path
) -> subprocess.Popen[bytes]:
    env = dict(os.environ, STREAMREMAT_TUNER_TEST_SOURCE=source)
    cmd = [
        sys.executable, "-m", "streamremat", "worker", "tests.fault.tuner_app:app",
        "--bootstrap", bootstrap, "--state-dir", str(state), "--metrics-port", str(port),
        "--checkpoint-policy", "adaptive", "--rto-seconds", str(RTO_S),
        "--min-interval", "1", "--max-interval", "10",
        "--commit-interval", "0.2", "--session-timeout-ms", "3000", "--max-batch", "1000",
    ]
    with log.open("ab") as out:
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)


def _predicted_recovery_s(port: int) -> float | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as resp:
            text = resp.read().decode()
    except OSError:
        return None
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if line.startswith("streamremat_predicted_recovery_seconds{")]
    return max(values) if values else None


async def _produce_forever(bootstrap: str, topic: str, stop: asyncio.Event) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    i = 0
    try:
        while not stop.is_set():
            now = int(time.time() * 1000)
            for _ in range(RATE // 10):
                value = orjson.dumps({"x": i % 7})
                await producer.send(topic, value, key=b"k%d" % (i % 100), timestamp_ms=now,
                                    partition=i % PARTITIONS)
                i += 1
            await asyncio.sleep(0.1)
    finally:
        await producer.stop()


async def _committed(consumer: Any, topic: str) -> dict[int, int]:
    return {p: await consumer.committed(TopicPartition(topic, p)) or 0
            for p in range(PARTITIONS)}


async def _wait_caught_up(bootstrap: str, consumer: Any, topic: str, timeout_s: float,
                          before: dict[int, int] | None = None) -> None:
    """Until every partition committed past ``before`` (the new worker is at work)
    and the lag is under half a second of ingest."""
    deadline = time.monotonic() + timeout_s
    while True:
        committed = await _committed(consumer, topic)
        ends = await end_offsets(bootstrap, topic)
        lag = sum(ends[p] - committed[p] for p in ends)
        moved = before is None or all(committed[p] > before[p] for p in committed)
        if moved and lag <= RATE // 2:
            return
        assert time.monotonic() < deadline, f"not caught up within {timeout_s} s"
        await asyncio.sleep(0.05)


async def test_recovery_within_rto_and_predicted(kafka_bootstrap: str, new_topic: Any,
                                                 tmp_path: Path) -> None:
    source = new_topic(PARTITIONS, {"retention.ms": "-1"})
    state, log, port = tmp_path / "state", tmp_path / "worker.log", free_port_run(1)
    stop = asyncio.Event()
    producing = asyncio.create_task(_produce_forever(kafka_bootstrap, source, stop))
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap,
                                group_id=f"streamremat-tuner-{source}", enable_auto_commit=False)
    await consumer.start()
    results: list[tuple[float, float]] = []
    # The worker starts behind (a few seconds of backlog), as after any deployment:
    # catching up is how the tuner measures its full speed mu before the first failure.
    await asyncio.sleep(5)
    worker = _start(kafka_bootstrap, source, state, port, log)
    try:
        await asyncio.sleep(10)  # warm up: the tuner measures r, C, L and mu
        await _wait_caught_up(kafka_bootstrap, consumer, source, 60)
        for _ in range(FAILURES):
            await asyncio.sleep(6)
            predicted = _predicted_recovery_s(port)
            assert predicted is not None, "the worker exports no predicted recovery time"
            worker.send_signal(signal.SIGKILL)
            killed = time.monotonic()
            worker.wait()
            at_kill = await _committed(consumer, source)
            worker = _start(kafka_bootstrap, source, state, port, log)
            await _wait_caught_up(kafka_bootstrap, consumer, source, 4 * RTO_S, at_kill)
            results.append((predicted, time.monotonic() - killed))
    finally:
        stop.set()
        await producing
        await consumer.stop()
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=60)
        except subprocess.TimeoutExpired:
            worker.kill()
    report = ", ".join(f"predicted {p:.1f} s / measured {m:.1f} s" for p, m in results)
    print(f"tuner real-system check (RTO {RTO_S:.0f} s): {report}")
    for i, (predicted, measured) in enumerate(results):
        assert measured <= RTO_S, report
        # The first prediction comes before any failure was measured: its downtime
        # D is the prior (session timeout + PRIOR_START_AND_RESTORE_S), a guess no
        # measurement informs. CI saw it 2x either way with the load: predicted
        # 5.0 s / measured 2.4 s idle, 5.0 s / 14.1 s at load 10-14. The model is
        # held to 2x once it has measured a failure.
        if i > 0:
            assert measured / 2 <= predicted <= 2 * measured, report
