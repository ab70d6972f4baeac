"""Recovery after a machine loss with a large open state: streamremat vs Quix Streams.

``bench/peers.py``'s recovery (a 10k-event topic, local state kept) measures
process start-up. Here the state is large and the machine is gone:

1. a fresh topic (4 partitions) of ``--keys`` events, one per key (default 1M
   keys), their event time inside one 60 s window that stays open: at the end
   every engine holds ``--keys`` open (key, window) accumulators;
2. the engine (the peers job: ``Tumbling(60 s)``, count + sum, exactly-once,
   commit every 0.5 s; ``bench/peers/*_job.py``) processes it to the end; for
   streamremat, until every partition has a checkpoint at its end offset and the
   checkpoint topic has stopped growing for 3 s (replicated); Quix writes its
   changelog inside each commit's transaction, so a commit at the end suffices;
3. ``kill -9``; the local state directory is deleted (the machine is lost);
   ``--tail`` records (new keys, same window) are appended;
4. once the dead member has left the group (its session timeout, not timed), the
   engine is started again with the empty state directory: streamremat restores
   its checkpoints from the replica topic and replays the source from them, Quix
   restores its changelog topics. **recovery_s** = process start until the
   group's committed offsets cover the appended records;
5. check: one record per partition far ahead closes the window; the sum of the
   counts of all results must equal every event (restored state + tail), so the
   state really came back.

Quix runs from ``.venv-peers`` (``python bench/peers.py --setup``); without it
only streamremat runs (as in CI). Usage::

    python bench/recovery_machine_loss.py [--keys 1000000] [--engines streamremat,quix]
    python bench/recovery_machine_loss.py --small      # CI: 20k keys

Without ``--bootstrap`` a dev broker is started under ``--work-dir``. The last
line of stdout is a JSON summary.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import random
import re
import shutil
import signal
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from _kafka import bench_broker, produce_fast  # noqa: E402
from _peers_run import PARTITIONS, WINDOW_MS, Run, engine_windows, state_topics  # noqa: E402
from aiokafka.partitioner import DefaultPartitioner  # noqa: E402
from peers import peer_status, wait_group_empty  # noqa: E402

from streamremat.runtime.kafka import (  # noqa: E402
    TopicSpec,
    create_topics,
    delete_topics,
    end_offsets,
    list_topics,
    produce,
)

ENGINES = ("streamremat", "quix")
_CHECKPOINT = re.compile(r":(\d+): checkpoint seq \d+ (?:full|delta) at offset (\d+)")
_RECOVERED = re.compile(r"\[(\d+)\]: recovered: checkpoint offset (\S+), .*?, replayed (\d+) "
                        r"records in ([\d.]+) s .*?, restore ([\d.]+) s from (\S+)")


def value(i: int, amount: int) -> bytes:
    return f'{{"amount":{amount},"page":"/p/{i % 50}","user":"u{i}"}}'.encode()


def make_events(n_keys: int, start_ms: int, seed: int = 13
                ) -> dict[int, list[tuple[bytes, bytes, int]]]:
    """One event per key, shuffled, over the first 50 s of the window at ``start_ms``,
    by partition (the Java client's murmur2 of the key)."""
    rng = random.Random(seed)
    order = list(range(n_keys))
    rng.shuffle(order)
    parts = list(range(PARTITIONS))
    partitioner = DefaultPartitioner()
    rows: dict[int, list[tuple[bytes, bytes, int]]] = {p: [] for p in parts}
    for i, k in enumerate(order):
        key = json.dumps(f"u{k}").encode()
        rows[partitioner(key, parts, parts)].append(
            (key, value(k, rng.randrange(1000)), start_ms + i * 50_000 // n_keys))
    return rows


async def wait_checkpointed(run: Run, bootstrap: str, ends: dict[int, int],
                            timeout_s: float) -> float:
    """streamremat: until each partition logged a checkpoint at its end offset and
    the replica topic stopped growing for 3 s; return how long that took."""
    began = time.monotonic()
    topic = f"streamremat-{run.group}-checkpoints"
    last: tuple[int, float] = (-1, began)
    while time.monotonic() - began < timeout_s:
        run.check_alive()
        text = run.logs[-1].read_text(errors="replace")
        done = {int(p) for p, off in _CHECKPOINT.findall(text) if int(off) >= ends[int(p)]}
        if done >= set(ends):
            size = sum((await end_offsets(bootstrap, topic)).values())
            now = time.monotonic()
            if size != last[0]:
                last = (size, now)
            elif now - last[1] >= 3.0:
                return now - began
        await asyncio.sleep(0.5)
    raise TimeoutError(f"no checkpoint at the end offsets within {timeout_s:.0f} s")


async def one_engine(engine: str, bootstrap: str, args: argparse.Namespace) -> dict[str, Any]:
    group = f"loss-{engine}-{uuid.uuid4().hex[:6]}"
    topic = f"{group}-in"
    now = int(time.time() * 1000)
    start = now - now % WINDOW_MS - WINDOW_MS  # the last whole window: no future times
    events = make_events(args.keys, start)
    await create_topics(bootstrap, [TopicSpec(topic, PARTITIONS, {"retention.ms": "-1"})])
    t0 = time.monotonic()
    n_events = await produce_fast(bootstrap, topic, events)
    del events
    print(f"[{engine}] produced {n_events:,} events in {time.monotonic() - t0:.1f} s",
          file=sys.stderr, flush=True)
    run = Run(engine, bootstrap, topic, group, args.work_dir / "state" / group,
              args.work_dir / "logs" / group, 0.5, args.checkpoint_interval)
    run.log_path.parent.mkdir(parents=True, exist_ok=True)
    out: dict[str, Any] = {"keys": args.keys, "events": n_events}
    try:
        ends = await end_offsets(bootstrap, topic)
        run.start()
        w = await run.wait_for(ends, args.cap_s)
        if w["capped"]:
            raise RuntimeError(f"{engine}: not caught up after {args.cap_s:.0f} s")
        out["first_run_s"] = time.monotonic() - w["started"]
        if engine == "streamremat":
            out["checkpoint_wait_s"] = await wait_checkpointed(run, bootstrap, ends, args.cap_s)
        tops = state_topics(engine, group, await list_topics(bootstrap))
        out["state_topic_records"] = sum(
            [sum((await end_offsets(bootstrap, t)).values()) for t in tops])
        run.kill(signal.SIGKILL)
        shutil.rmtree(run.state_dir)  # the machine is lost: no local state
        tail_keys = range(args.keys, args.keys + args.tail)
        await produce(bootstrap, topic, [(json.dumps(f"u{k}").encode(), value(k, 1),
                                          start + 55_000, None, ()) for k in tail_keys])
        target = await end_offsets(bootstrap, topic)
        out["left_group_s"] = await wait_group_empty(bootstrap, group)
        began = time.monotonic()
        run.start()
        w = await run.wait_for(target, args.cap_s)
        if w["capped"]:
            raise RuntimeError(f"{engine}: not recovered after {args.cap_s:.0f} s")
        out["recovery_s"] = round(time.monotonic() - began, 2)
        print(f"[{engine}] recovered in {out['recovery_s']} s", file=sys.stderr, flush=True)
        if engine == "streamremat":
            found = _RECOVERED.findall(run.logs[-1].read_text(errors="replace"))
            out["restored"] = {p: {"checkpoint_offset": o, "replayed": int(n),
                                   "replay_s": float(rs), "restore_s": float(ts), "from": src}
                               for p, o, n, rs, ts, src in found}
        out["check"] = await check_counts(run, bootstrap, start, n_events + args.tail)
    finally:
        run.kill()
        if not args.keep:
            tops = state_topics(engine, group, await list_topics(bootstrap))
            await delete_topics(bootstrap, [*tops, topic, run.output])
            shutil.rmtree(run.state_dir, ignore_errors=True)
    return out


async def check_counts(run: Run, bootstrap: str, start: int, expected: int) -> dict[str, Any]:
    """Close the window on every partition; the results' counts must add up to every event.
    The results are read once their topic has stopped growing for 5 s (bounded)."""
    closers = [(json.dumps(f"close{p}").encode(), value(0, 0), start + 3 * WINDOW_MS, p, ())
               for p in range(PARTITIONS)]
    await produce(bootstrap, run.topic, closers)
    deadline = time.monotonic() + 300
    last: tuple[int, float] = (-1, time.monotonic())
    while time.monotonic() < deadline:
        size = sum((await end_offsets(bootstrap, run.output)).values())
        if size != last[0]:
            last = (size, time.monotonic())
        elif size > 0 and time.monotonic() - last[1] >= 5.0:
            break
        await asyncio.sleep(0.5)
    windows = await engine_windows(run)  # raises on a window emitted twice
    got = sum(c for (_k, s), (c, _t) in windows.items() if s == start)
    return {"expected_count": expected, "results_count": got, "equal": got == expected}


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    status = {e: peer_status(e) for e in args.engines}
    summary: dict[str, Any] = {
        "benchmark": "recovery_machine_loss", "keys": args.keys, "tail": args.tail,
        "partitions": PARTITIONS, "window": "tumbling 60 s, grace 0, count+sum per key",
        "commit_interval_s": 0.5, "streamremat_checkpoint": f"fixed, every "
        f"{args.checkpoint_interval:g} s", "python": platform.python_version(),
        "skipped": {e: why for e, why in status.items() if why}, "results": {},
    }
    async with bench_broker(args.bootstrap, args.work_dir) as bootstrap:
        for engine in (e for e in args.engines if status[e] is None):
            summary["results"][engine] = await one_engine(engine, bootstrap, args)
    res = summary["results"]
    if res.get("streamremat", {}).get("recovery_s") and res.get("quix", {}).get("recovery_s"):
        summary["streamremat_over_quix_recovery"] = round(
            res["streamremat"]["recovery_s"] / res["quix"]["recovery_s"], 3)
    return summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--keys", type=int, default=1_000_000)
    p.add_argument("--tail", type=int, default=1000, help="records appended after the loss")
    p.add_argument("--engines", default=",".join(ENGINES))
    p.add_argument("--small", action="store_true", help="CI size: 20k keys")
    p.add_argument("--checkpoint-interval", type=float, default=10.0)
    p.add_argument("--cap-seconds", dest="cap_s", type=float, default=900.0)
    p.add_argument("--bootstrap")
    p.add_argument("--work-dir", type=Path, default=ROOT / ".streamremat" / "bench-loss")
    p.add_argument("--keep", action="store_true", help="keep topics and state dirs")
    args = p.parse_args(argv)
    if args.small:
        args.keys, args.tail = 20_000, 100
    args.engines = [e for e in args.engines.split(",") if e]
    args.work_dir.mkdir(parents=True, exist_ok=True)
    summary = asyncio.run(bench(args))
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
