"""The native replay reader (``runtime/raw_replay.py``) against aiokafka's records,
on the real broker: the same topic replayed from a start offset inside a batch up
to a committed offset, then live to the end, once through the reader and once
through aiokafka's ``ConsumerRecord``s, must give byte-identical state and the
same results; the results are also held to the brute-force reference
(``tests/unit/reference.py`` through ``tests/expect.py``).

Topics: uncompressed batches; batches of each compression type between
uncompressed ones (the reader leaves compressed batches to aiokafka and takes
the next uncompressed ones back); transactions of two producers overlapping,
committed and aborted, between plain records (aborted records are never
folded); bad records (the native fold declines, the general path must see
them); broker-stamped timestamps (LogAppendTime). Fetches are small, so a
replay spans many fetch responses and batches cross their ends.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from streamremat import RAW, Count, Hopping, Operator, Sum, Tumbling
from streamremat.core import fastpath
from streamremat.core.recovery import PartitionTasks
from streamremat.core.task import Task
from streamremat.runtime.kafka import consume_all, end_offsets
from streamremat.runtime.raw_replay import RawReplay
from tests.expect import RefOperator, SourceRow, canon, expected_output
from tests.unit.reference import RefWindow

pytestmark = pytest.mark.skipif(
    fastpath.native_module is None or not hasattr(fastpath.native_module, "RawRecords")
    or not fastpath.native_enabled, reason="the native extension is not built, or is off")

WINDOW_MS = 2_000
N = 3_000
FETCH_BYTES = 16 * 1024  # many fetch responses per replay


def _op(topic: str, hopping: bool = False) -> Operator:
    window = Hopping(WINDOW_MS, 500, grace_ms=300) if hopping else Tumbling(WINDOW_MS)
    return Operator(name="r", source=topic, sink=f"{topic}-out", window=window,
                    aggregate={"n": Count(), "total": Sum("x")})


def _raw_count(topic: str) -> Operator:
    """A second operator on the same records that folds what ``_op`` declines: a
    count of raw values (no JSON)."""
    return Operator(name="c", source=topic, sink=f"{topic}-count", window=Tumbling(WINDOW_MS),
                    aggregate=Count(), value_serde=RAW)


def _ref(topic: str, hopping: bool = False) -> RefOperator:
    window = (RefWindow("hopping", WINDOW_MS, 500, grace=300) if hopping
              else RefWindow("tumbling", WINDOW_MS))
    return RefOperator(
        name="r", source=topic, sink=f"{topic}-out", window=window,
        fields=("x",), result=lambda vals: {"n": len(vals), "total": sum(v["x"] for v in vals)})


def _rows(n: int, seed: int, bad: bool = False) -> list[tuple[bytes | None, bytes | None, int]]:
    """(key, value, timestamp) of ``n`` records over ~10 windows; with ``bad``,
    about one in 40 has no key, no JSON, no ``x`` or is not an object."""
    rng = random.Random(seed)
    base = int(time.time() * 1000) - 600_000
    out: list[tuple[bytes | None, bytes | None, int]] = []
    for i in range(n):
        key: bytes | None = b"k%d" % rng.randrange(50)
        value: bytes | None = json.dumps({"x": rng.randrange(1000), "i": i}).encode()
        if bad and rng.randrange(40) == 0:
            kind = rng.randrange(4)
            if kind == 0:
                key = None
            elif kind == 1:
                value = b"{not json"
            elif kind == 2:
                value = b'{"y": 1}'
            else:
                value = b'[7]'
        out.append((key, value, base + i * 7))
    return out


async def _send(bootstrap: str, topic: str, rows: list[Any], **producer: Any) -> None:
    p = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, **producer)
    await p.start()
    try:
        futures = [await p.send(topic, key=k, value=v, timestamp_ms=t, partition=0)
                   for k, v, t in rows]
        await asyncio.gather(*futures)
    finally:
        await p.stop()


async def _plain(bootstrap: str, topic: str) -> None:
    await _send(bootstrap, topic, _rows(N, 1))


def _compressed(codec: str) -> Callable[[str, str], Awaitable[None]]:
    async def write(bootstrap: str, topic: str) -> None:
        rows = _rows(N, 2)
        for i in range(0, N, 500):  # compressed and uncompressed batches in turn
            await _send(bootstrap, topic, rows[i:i + 500],
                        compression_type=codec if i % 1000 == 0 else None)
    return write


async def _transactions(bootstrap: str, topic: str) -> None:
    """Two transactional producers with overlapping transactions, one in three of
    them aborted (their records carry x = 10**6: folded, they would show), and
    plain records between."""
    rows = _rows(N, 3)
    tx = [AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"t{j}-{uuid.uuid4()}",
                           linger_ms=5) for j in range(2)]
    plain = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    for p in (*tx, plain):
        await p.start()
    try:
        for step, i in enumerate(range(0, N, 300)):
            chunk = rows[i:i + 300]
            a, b = tx[step % 2], tx[(step + 1) % 2]
            await a.begin_transaction()
            await b.begin_transaction()
            for j, (k, v, t) in enumerate(chunk):
                abort = step % 3 == 2
                if j % 3 == 0:
                    await (await plain.send(topic, key=k, value=v, timestamp_ms=t, partition=0))
                    continue
                prod = a if j % 3 == 1 else b
                if prod is b and abort:
                    v = json.dumps({"x": 10**6, "i": -1}).encode()
                await prod.send(topic, key=k, value=v, timestamp_ms=t, partition=0)
            await a.commit_transaction()
            await (b.abort_transaction() if step % 3 == 2 else b.commit_transaction())
    finally:
        for p in (*tx, plain):
            await p.stop()


async def _bad(bootstrap: str, topic: str) -> None:
    await _send(bootstrap, topic, _rows(N, 4, bad=True))


class _Runner:
    """The part of ``PartitionRunner`` the reader drives (``PartitionRecovery``'s
    ``raw_replayable``, ``replay_raw``) over the real ``PartitionTasks``; the
    consumer, the fetches and the reader are the real ones."""

    def __init__(self, tasks: PartitionTasks) -> None:
        self.partition_tasks = tasks

    @property
    def raw_replayable(self) -> bool:
        return self.partition_tasks.raw_replayable

    @property
    def replay_until(self) -> int:
        return self.partition_tasks.replay_until

    def replay_raw(self, raw: Any) -> bool:
        return self.partition_tasks.replay_raw(raw)


Results = Counter[tuple[str, bytes, int, int, str]]


async def _replay(bootstrap: str, topic: str, ops: list[Operator], start: int, committed: int,
                  horizons: dict[str, int], native: bool) -> tuple[list[bytes], Results, int]:
    """Replay ``[start, committed)`` (horizons: the stream times at ``committed``),
    then live to the end, the way the worker's loop does (``fetch_round``); return
    each task's full snapshot, their live results and how many records the reader
    folded."""
    end = (await end_offsets(bootstrap, topic, "read_committed"))[0]
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
        auto_offset_reset="none", isolation_level="read_committed",
        max_partition_fetch_bytes=FETCH_BYTES, fetch_max_bytes=4 * FETCH_BYTES)
    await consumer.start()
    try:
        reader = RawReplay.install(consumer) if native else None
        assert (reader is not None) == native
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, start)
        each = [Task(op, 0) for op in ops]
        for task in each:
            task.next_offset = start
        tasks = PartitionTasks(each, committed, horizons)
        runners = {tp: _Runner(tasks)}
        results: Results = Counter()
        folded = 0
        deadline = time.monotonic() + 60
        while await consumer.position(tp) < end or tasks.replaying:
            assert time.monotonic() < deadline, "the replay did not reach the end"
            if tasks.replaying:  # (only markers left below the committed offset)
                tasks.reached(await consumer.position(tp))
            if reader is not None:
                folded += sum(reader.fold(reader.parse(runners), runners).values())
                if tp in reader.owned(runners):
                    await reader.wait(0.1)
                    continue
            for records in (await consumer.getmany(tp, timeout_ms=100)).values():
                for task, out in tasks.process(records):
                    results.update((task.operator.name, r.key, r.start_ms, r.end_ms,
                                    canon(r.value)) for r in out.results)
        return [task.snapshot(full=True) for task in each], results, folded
    finally:
        await consumer.stop()


WRITERS: dict[str, Callable[[str, str], Awaitable[None]]] = {
    "plain": _plain,
    "gzip": _compressed("gzip"),
    "snappy": _compressed("snappy"),
    "lz4": _compressed("lz4"),
    "zstd": _compressed("zstd"),
    "transactions": _transactions,
    "bad_records": _bad,
    "log_append_time": _plain,
    "two_operators": _bad,
    "hopping_with_grace": _plain,
}


@pytest.mark.parametrize("layout", list(WRITERS))
async def test_the_native_reader_replays_exactly_as_aiokafka_records(
    kafka_bootstrap: str, new_topic: Any, layout: str
) -> None:
    config = {"retention.ms": "-1"}
    if layout == "log_append_time":
        config["message.timestamp.type"] = "LogAppendTime"
    topic = new_topic(1, config)
    await WRITERS[layout](kafka_bootstrap, topic)
    rows = [SourceRow(r.partition, r.offset, r.key, r.value, r.timestamp_ms)
            for r in await consume_all(kafka_bootstrap, topic)]
    offsets = [r.offset for r in rows]
    start = offsets[len(offsets) // 5] + 1  # (inside a batch: batches hold many records)
    # (two: the count folds what the sum declines, which then goes the general way)
    hopping = layout == "hopping_with_grace"
    ops = [_raw_count(topic), _op(topic)] if layout == "two_operators" else [_op(topic, hopping)]
    # the replay ends at a committed offset inside the topic, or at its end
    for committed in (offsets[len(offsets) * 4 // 5], offsets[-1] + 1):
        # the stream times at the committed offset: what the commit's metadata holds
        horizons = {}
        for op in ops:
            before = Task(op, 0)
            before.next_offset = start
            before.process([SimpleNamespace(offset=r.offset, key=r.key, value=r.value,
                                            timestamp=r.timestamp_ms, headers=())
                            for r in rows if start <= r.offset < committed], emit=False)
            assert before.stream_time_ms is not None
            horizons[op.name] = before.stream_time_ms
        native = await _replay(kafka_bootstrap, topic, ops, start, committed, horizons, True)
        general = await _replay(kafka_bootstrap, topic, ops, start, committed, horizons, False)
        assert native[2] > 0, "the native reader folded nothing"
        if layout in ("plain", "transactions", "log_append_time", "hopping_with_grace"):
            assert native[2] == sum(1 for r in rows if start <= r.offset < committed)
        assert native[0] == general[0], f"{layout}: states differ at committed {committed}"
        assert native[1] == general[1], f"{layout}: live results differ"
        expected = expected_output(_ref(topic, hopping), [r for r in rows if r.offset >= start])
        live = Counter({("r", *res): sum(1 for _p, o in expected.closed_by[res] if o >= committed)
                        for res in expected.results})
        assert Counter({k: v for k, v in native[1].items() if k[0] == "r"}) == +live, (
            f"{layout}: live results differ from the reference")


def test_no_reader_without_the_native_fold(monkeypatch: pytest.MonkeyPatch) -> None:
    """``STREAMREMAT_NATIVE=0`` (or no build): the replay reads records as before."""
    monkeypatch.setattr(fastpath, "native_enabled", False)
    assert RawReplay.install(object()) is None
