"""Closing one window over many keys: the longest event-loop stall it causes, and
how long it takes until all its results are committed, on the real broker.

Per size, one ``Tumbling(60 s)`` task with ``{"n": Count(), "total":
Sum("amount")}`` is filled in memory with one record per key (every key in one
open window); then one record far ahead closes it, and its results go through
the worker's own path into a fresh 4-partition sink, in one transaction that
also commits the source offset (``PartitionRunner.emit`` / ``flush`` /
``commit``: ``runtime/emitting.py``, ``runtime/committing.py``):

* ``sliced`` (the worker's path): the results are built, serialized and sent
  ``core.closing.RESULT_SLICE`` at a time, the loop turning between slices;
* ``one_go`` (what the worker did before): every result built, serialized and
  queued in the batch that closed the window, then sent.

A ticker coroutine sleeps ``TICK_S`` in a loop meanwhile; the longest gap
between two of its wake-ups, minus the sleep, is the longest time heartbeats,
other partitions and the metrics endpoint would have waited
(``idle_loop_stall_ms``: the same with nothing running). ``close_s`` is from
the closing batch until the commit returned; ``ticks`` how often the ticker ran.
``results_checked``: the sink holds one committed result per key with the
right count and sum (read back at the smaller sizes only).

Usage::

    python bench/close_scale.py [--sizes 500000,1000000] [--modes sliced,one_go] [--small]

Without ``--bootstrap`` a dev broker is started under ``--work-dir``. The last
line of stdout is a JSON summary.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import platform
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from _kafka import bench_broker  # noqa: E402
from aiokafka import TopicPartition  # noqa: E402

from streamremat import Count, Operator, Sum, Tumbling  # noqa: E402
from streamremat.core.closing import RESULT_SLICE  # noqa: E402
from streamremat.core.records import Record  # noqa: E402
from streamremat.core.task import Task  # noqa: E402
from streamremat.metrics.sensor import Sensor  # noqa: E402
from streamremat.runtime import gc_tuning  # noqa: E402
from streamremat.runtime.client import KafkaClientConfig  # noqa: E402
from streamremat.runtime.committing import PartitionCommitter  # noqa: E402
from streamremat.runtime.emitting import Emitter  # noqa: E402
from streamremat.runtime.kafka import TopicSpec, consume_all, create_topics  # noqa: E402
from streamremat.runtime.lifecycle import start_producer  # noqa: E402
from streamremat.runtime.outputs import to_records  # noqa: E402
from streamremat.runtime.settings import Guarantee  # noqa: E402

TICK_S = 0.01
GOAL_STALL_MS = 200.0
BASE_MS = 1_700_000_040_000  # a multiple of 60 s
BATCH = 5_000
CHECK_UP_TO = 200_000  # results read back and checked up to this size


def operator(source: str, sink: str) -> Operator:
    return Operator(name="close_scale", source=source, sink=sink,
                    window=Tumbling(60_000), aggregate={"n": Count(), "total": Sum("amount")})


def filled(op: Operator, keys: int) -> Task:
    task = Task(op)
    for lo in range(0, keys, BATCH):
        task.process([Record(b"k%09d" % k, b'{"amount":%d}' % (k % 1000),
                             BASE_MS + k % 50_000, k) for k in range(lo, min(keys, lo + BATCH))])
    return task


async def with_ticker(work: Callable[[], Awaitable[None]]) -> tuple[float, float, int]:
    """Run ``work`` beside a ticker: (seconds, longest stall ms, ticks)."""
    loop = asyncio.get_running_loop()
    done = False
    gaps: list[float] = []

    async def tick() -> None:
        last = loop.time()
        while not done:
            await asyncio.sleep(TICK_S)
            now = loop.time()
            gaps.append(now - last - TICK_S)
            last = now

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0)
    started = time.perf_counter()
    try:
        await work()
    finally:
        seconds = time.perf_counter() - started
        done = True
        await ticker
    return seconds, max(gaps, default=0.0) * 1000, len(gaps)


async def close_one(bootstrap: str, keys: int, mode: str) -> dict[str, Any]:
    run = uuid.uuid4().hex[:8]
    # The source exists: the transaction commits an offset of it.
    source, sink = f"close-scale-{run}-in", f"close-scale-{run}-out"
    # Unlimited retention: the results' timestamps (window ends) are years old.
    await create_topics(bootstrap, [TopicSpec(source, 1),
                                    TopicSpec(sink, 4, config={"retention.ms": "-1"})])
    op = operator(source, sink)
    task = filled(op, keys)
    gc.collect()
    group = f"close-scale-{run}"
    producer = await start_producer(KafkaClientConfig(bootstrap_servers=bootstrap),
                                    f"{group}.in.0")
    committer = PartitionCommitter(producer, group, Guarantee.EXACTLY_ONCE)
    emitter = Emitter(0, committer, Sensor())
    closer = Record(b"closer", b'{"amount":0}', BASE_MS + 600_000, keys)

    async def close() -> None:
        out = task.process([closer])
        if mode == "sliced":
            emitter.emit([(task, out)])
            await emitter.send(emitter.capture())
        else:
            committer.pending.extend(to_records(op, 0, out))
            await committer.flush()
        await committer.acked()
        await committer.commit(None, TopicPartition(op.source, 0), keys + 1, "")

    gc_tuning.start()  # as the worker runs
    try:
        seconds, stall, ticks = await with_ticker(close)
    finally:
        gc_tuning.stop()
        await producer.stop()
    row: dict[str, Any] = {"keys": keys, "mode": mode, "close_s": round(seconds, 3),
                           "longest_stall_ms": round(stall, 1), "ticks": ticks}
    if keys <= CHECK_UP_TO:
        # The commit returns before the coordinator's markers reach every partition:
        # until then a read_committed reader stops short at the stable offset.
        deadline = time.monotonic() + 60
        while len(got := await consume_all(bootstrap, sink, isolation_level="read_committed")
                  ) < keys and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
        values = {r.key: json.loads(r.value or b"")["value"] for r in got}
        row["results_checked"] = len(got) == keys and all(
            values.get(b"k%09d" % k) == {"n": 1, "total": k % 1000} for k in range(keys))
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sizes", default="500000,1000000", help="keys, comma-separated")
    parser.add_argument("--modes", default="sliced,one_go")
    parser.add_argument("--small", action="store_true", help="CI size (seconds)")
    parser.add_argument("--bootstrap", default=None)
    parser.add_argument("--work-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    sizes = [20_000] if args.small else [int(s) for s in args.sizes.split(",")]
    modes = args.modes.split(",")

    async def run(work_dir: Path) -> dict[str, Any]:
        idle = (await with_ticker(lambda: asyncio.sleep(1.0 if args.small else 5.0)))[1]
        print(f"idle loop: longest stall {idle:.1f} ms", flush=True)
        rows: dict[str, Any] = {}
        async with bench_broker(args.bootstrap, work_dir) as bootstrap:
            for size in sizes:
                for mode in modes:
                    row = await close_one(bootstrap, size, mode)
                    rows[f"{mode}_{size}"] = row
                    print(json.dumps(row), flush=True)
        sliced = [r["longest_stall_ms"] for r in rows.values() if r["mode"] == "sliced"]
        return {"benchmark": "close_scale", "python": platform.python_version(),
                "tick_s": TICK_S, "result_slice": RESULT_SLICE,
                "idle_loop_stall_ms": round(idle, 1), "runs": rows,
                "worst_sliced_stall_ms": max(sliced, default=None),
                "goal_stall_ms": GOAL_STALL_MS,
                "goal_met": bool(sliced) and max(sliced) <= GOAL_STALL_MS}

    if args.work_dir is not None:
        summary = asyncio.run(run(args.work_dir))
    else:
        with tempfile.TemporaryDirectory(prefix="close-scale-") as tmp:
            summary = asyncio.run(run(Path(tmp)))
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
