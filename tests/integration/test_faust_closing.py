"""The faust bridge builds a closing's results a slice at a time, as the worker
does (``tests/integration/test_large_closing.py``), and each result record has
its own idempotency header.

Nothing here is timed. "A slice at a time" is asserted as: between two turns of
a ticker coroutine, the partition built at most ``RESULT_SLICE`` results
(the keys the operator's ``output`` function saw). Before, ``FaustPartition.emit``
built every result of the batch in one synchronous call, inside ``process``.
The partition is the bridge's ``FaustPartition`` on the real broker, with the
producer the bridge makes; the expected sink comes from the brute-force reference.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from streamremat.core.closing import RESULT_SLICE
from streamremat.core.operator import default_output
from streamremat.core.topology import compile_app
from streamremat.metrics.sensor import Sensor
from streamremat.runtime.kafka import TopicSpec, consume_all, create_topics, produce
from streamremat.runtime.lifecycle import Phase
from streamremat.runtime.outputs import H_STAGE
from streamremat.runtime.scheduling import CheckpointScheduler
from streamremat.runtime.settings import Guarantee
from streamremat.state.rocksdb import RocksDBCheckpointStore
from tests.integration.owners import HOUR_MS, expected_results, hour_operator, records, settings

pytest.importorskip("faust", reason="the faust extra is part of `make venv`")
from streamremat.integrations.faust.bridge import FaustPartition
from streamremat.integrations.faust.outputs import H_IDEMPOTENCY, idempotency_key

KEYS = 5 * RESULT_SLICE + 123
#: its ``output`` raises: the result goes to the dead letters, not the sink
BROKEN = "key-000005"


async def test_a_closing_over_many_keys_is_built_a_slice_at_a_time(
    kafka_bootstrap: str, new_topic: Any, tmp_path: Path
) -> None:
    source = new_topic(1, {"retention.ms": "-1"})
    keys: set[Any] = set()  # built, once each (a failing slice is built again, one by one)

    def counted(key: Any, start_ms: int, end_ms: int, value: Any) -> Any:
        keys.add(key)
        if key == BROKEN:
            raise ValueError("injected output failure")
        return default_output(key, start_ms, end_ms, value)

    op = dataclasses.replace(hour_operator(source), output=counted)
    await create_topics(kafka_bootstrap, [TopicSpec(op.sink, 4),
                                          TopicSpec(op.dead_letter_topic, 1)])
    base = (int(time.time() * 1000) // HOUR_MS - 3) * HOUR_MS
    sent = records([b"key-%06d" % i for i in range(KEYS)], base)  # the last one closes
    await produce(kafka_bootstrap, source, sent)

    tp = TopicPartition(source, 0)
    s = dataclasses.replace(settings(kafka_bootstrap, tmp_path), guarantee=Guarantee.AT_LEAST_ONCE)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all",
                                enable_idempotence=True)  # as the bridge makes it
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap, enable_auto_commit=False)
    local = RocksDBCheckpointStore(tmp_path / "ck.rocksdb")
    await producer.start()
    await consumer.start()
    consumer.assign([tp])
    runner = FaustPartition(tp, compile_app(op).stages, settings=s, group_id="faust-closing",
                            producer=producer, local=local, replica=None,
                            scheduler=CheckpointScheduler(s.checkpoints), sensor=Sensor())

    async def never_committed(_tp: TopicPartition) -> tuple[int | None, str]:
        return None, ""

    seen: list[int] = []  # results built, at each turn of the ticker
    try:
        await runner.recover(consumer, never_committed)
        assert runner.phase is Phase.LIVE
        fetched: list[Any] = []
        while len(fetched) < len(sent):
            fetched.extend((await consumer.getmany(tp, timeout_ms=1_000)).get(tp, []))
        runner.process(fetched[:-1])  # every key in the open window
        await runner.deliver()
        assert not keys
        done = asyncio.Event()

        async def tick() -> None:
            while not done.is_set():
                seen.append(len(keys))
                await asyncio.sleep(0)

        ticker = asyncio.create_task(tick())
        await asyncio.sleep(0)
        try:
            runner.process(fetched[-1:])  # the closer
            await runner.deliver()
        finally:
            done.set()
            await ticker
        seen.append(len(keys))
    finally:
        await runner.close()  # a faust partition leaves the shared producer alone
        await producer.stop()
        await consumer.stop()
        await local.close()

    assert len(keys) == KEYS
    steps = [b - a for a, b in itertools.pairwise(seen)]
    assert max(steps) <= RESULT_SLICE, (max(steps), len(seen))
    assert sum(1 for s in steps if s) >= KEYS // RESULT_SLICE
    # The sink: the reference's results but the broken one, each record with the
    # idempotency key of its own window and key.
    want = expected_results(sent)
    broken = [r for r in want if r[0] == BROKEN.encode()]
    assert len(broken) == 1
    del want[broken[0]]
    out = await consume_all(kafka_bootstrap, op.sink)
    got: dict[Any, int] = {}
    for r in out:
        value = orjson.loads(r.value or b"")
        start, end = value["start_ms"], value["end_ms"]
        assert dict(r.headers)[H_IDEMPOTENCY] == idempotency_key(op.name, 0, start, end,
                                                                 r.key or b""), r
        row = (r.key, start, end, (value["value"]["n"], value["value"]["total"]))
        got[row] = got.get(row, 0) + 1
    assert got == dict(want)
    dead = await consume_all(kafka_bootstrap, op.dead_letter_topic)
    assert [(r.key, dict(r.headers)[H_STAGE]) for r in dead] == [(BROKEN.encode(), b"output")]
