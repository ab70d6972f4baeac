"""`streamremat loadgen` against the real broker: topic creation, pacing, SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import orjson

from streamremat.dev.loadgen import HEADER, LoadgenConfig, run_loadgen
from streamremat.dev.sync import run_sync
from streamremat.runtime.kafka import consume_all, delete_topics, end_offsets, topic_partitions

ROOT = Path(__file__).resolve().parents[2]
NewTopic = Callable[..., str]


def loadgen(bootstrap: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "streamremat", "loadgen", "--bootstrap", bootstrap, *args]


def near_now(ts_ms: int, slack_s: float = 600) -> bool:
    return abs(ts_ms / 1000 - time.time()) < slack_s


async def test_cli_creates_the_topic_and_produces_every_event(kafka_bootstrap: str) -> None:
    topic = f"loadgen-{uuid.uuid4().hex[:8]}"
    try:
        proc = await asyncio.create_subprocess_exec(
            *loadgen(kafka_bootstrap, "--topic", topic, "--partitions", "3", "--events", "400",
                     "--rate", "2000", "--keys", "50", "--bad-ratio", "0.1", "--late-ratio",
                     "0.1", "--late-by", "120", "--seed", "1"),
            cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, err.decode()
        assert b"sent 400 records" in out

        assert len(await topic_partitions(kafka_bootstrap, topic)) == 3
        got = await consume_all(kafka_bootstrap, topic)
        assert len(got) == 400
        assert len({r.partition for r in got}) == 3
        tags = Counter(dict(r.headers).get(HEADER, b"").split(b":")[0] for r in got)
        assert tags[b"bad"] > 10 and tags[b"late"] > 10
        for r in got:
            tag = dict(r.headers).get(HEADER)
            assert near_now(r.timestamp_ms + (120_000 if tag == b"late" else 0), 60)
            if tag is None:
                value = orjson.loads(r.value or b"")
                assert r.key == value["user"].encode()
        # One key, one partition: what a keyed operator relies on.
        partitions_of: dict[bytes | None, set[int]] = {}
        for r in got:
            partitions_of.setdefault(r.key, set()).add(r.partition)
        assert all(len(p) == 1 for p in partitions_of.values())
    finally:
        await delete_topics(kafka_bootstrap, [topic])


async def test_missing_topic_without_partitions_is_an_error(kafka_bootstrap: str) -> None:
    topic = f"loadgen-missing-{uuid.uuid4().hex[:8]}"
    proc = await asyncio.create_subprocess_exec(
        *loadgen(kafka_bootstrap, "--topic", topic, "--events", "10"),
        cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 2
    assert b"--partitions" in err


async def test_rate_is_paced(kafka_bootstrap: str, new_topic: NewTopic) -> None:
    topic = new_topic(partitions=2)
    started = time.monotonic()
    stats = await run_loadgen(
        LoadgenConfig(kafka_bootstrap, topic, kind="orders", rate=300, events=450, keys=20)
    )
    elapsed = time.monotonic() - started
    assert stats.sent == 450
    assert 1.2 < elapsed < 10  # 450 events at 300/s: ~1.5 s, not a burst
    got = await consume_all(kafka_bootstrap, topic)
    assert len(got) == 450
    assert all(near_now(r.timestamp_ms, 60) for r in got)
    assert {orjson.loads(r.value or b"")["category"].encode() for r in got} == {
        r.key for r in got
    }


def test_sigterm_stops_cleanly_with_everything_sent(
    kafka_bootstrap: str, new_topic: NewTopic
) -> None:
    topic = new_topic(partitions=2)
    proc = subprocess.Popen(
        loadgen(kafka_bootstrap, "--topic", topic, "--rate", "500"),
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if sum(run_sync(end_offsets(kafka_bootstrap, topic)).values()) >= 300:
                break
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err.decode()
    summary = out.decode()
    assert "sent " in summary
    sent = int(summary.split("sent ", 1)[1].split()[0])
    assert sent >= 300
    assert len(run_sync(consume_all(kafka_bootstrap, topic))) == sent  # nothing lost in flight
