"""End-to-end throughput on a real Kafka broker: raw consumption vs live vs replay.

One run, one source topic (4 partitions, ``--events`` JSON events over ``--keys``
keys, event time ``--spacing-ms`` apart and ending near now), three phases:

a. **raw**: aiokafka reads the whole topic, no group, ``read_committed``,
   ``getmany`` batches of the worker's size, nothing decoded: the ceiling.
b. **live**: the streamremat ``Worker`` (in this process, exactly-once, a fresh
   group) runs ``Tumbling(60 s)`` ``{"n": Count(), "total": Sum("x")}`` by key;
   timed until the group's committed offsets reach the end offsets. The sink is
   then read back and checked against the expected window results.
c. **replay**: a second worker in the same group, with no local state and an
   empty checkpoint topic, so recovery replays the whole topic ``[0, committed)``
   without emitting; the rate comes from the workers' ``recovered: ... replayed N
   records in S s`` log lines (partitions replay concurrently).

Beside it: checkpoint bytes written during the live phase (sum of the checkpoint
log lines' ``bytes``, fixed interval ``--checkpoint-interval``, default 10 s)
against what a log-every-update design would write for the same run: one
changelog record per input event of (key + 8-byte window start + encoded
accumulator) plus Kafka record-v2 framing.

The broker: ``--bootstrap``, else ``$STREAMREMAT_BOOTSTRAP``, else a dev broker
started on free ports under ``--work-dir`` and stopped at the end. Usage::

    python bench/e2e_throughput.py [--events N] [--keys K] [--small] [--profile FILE]
                                   [--path fast|pure] [--output native|python]
                                   [--close native|python]

The live/raw goal is 0.8 at up to 1,000 keys and 0.5 beyond (issue 15: 100,000 keys).

The last line of stdout is a JSON summary.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import logging
import os
import platform
import random
import shutil
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _kafka import bench_broker, dir_bytes, produce_fast, read_to_end
from _phases import live_phase, log_field, replay_phase, write_profile
from aiokafka.partitioner import DefaultPartitioner

from streamremat import App, Count, KafkaSettings, Operator, Sum, Tumbling
from streamremat.core import fastpath, native_state
from streamremat.runtime import outputs
from streamremat.runtime.kafka import (
    TopicSpec,
    consume_all,
    create_topics,
    delete_topics,
    end_offsets,
)
from streamremat.runtime.settings import CheckpointSettings, WorkerSettings

PARTITIONS = 4
WINDOW_MS = 60_000
SMALL_EVENTS = 50_000
#: issue 15's goals for live/raw: 0.8 up to 1,000 keys, 0.5 beyond (set at 100,000)
GOAL_LIVE_OVER_RAW = 0.8
GOAL_LIVE_OVER_RAW_MANY_KEYS = 0.5
GOAL_REPLAY_OVER_LIVE = 1.2
#: Kafka record v2 framing of one record in a batch: length, attributes,
#: timestamp delta, offset delta, key length, value length, header count (varints).
RECORD_FRAMING = 9
#: Kafka record-batch header (61 bytes) per producer batch (default batch.size 16 KiB).
BATCH_HEADER, BATCH_BYTES = 61, 16 * 1024

log = logging.getLogger("bench.e2e")


# -- the workload ---------------------------------------------------------------


@dataclass
class Workload:
    """The records by partition and everything the run should produce from them."""

    rows: dict[int, list[tuple[bytes, bytes, int]]]
    events: int
    keys: int
    expected_results: int = 0
    expected_n: int = 0
    expected_total: int = 0
    changelog_records: int = 0
    changelog_payload: int = 0  # key + 8-byte window start + accumulator, per update
    key_bytes: int = 0


def make_operator(topic: str) -> Operator:
    return Operator(
        name="bench", source=topic, sink=f"{topic}-out", window=Tumbling(WINDOW_MS),
        aggregate={"n": Count(), "total": Sum("x")},
    )


def build_workload(n: int, n_keys: int, spacing_ms: int, seed: int = 11) -> Workload:
    """``n`` events ``{"x": .., "user": .., "page": ..}`` keyed by user, partitioned
    like the Java client (murmur2); event time ``spacing_ms`` apart, ending now.

    Also computes, for the check and the changelog comparison, every update the
    operator makes: per (key, window) the accumulator after each event.
    """
    rng = random.Random(seed)
    partitioner = DefaultPartitioner()
    parts = list(range(PARTITIONS))
    keys = [json.dumps(f"u{i}").encode() for i in range(n_keys)]
    key_part = [partitioner(k, parts, parts) for k in keys]
    base = int(time.time() * 1000) - n * spacing_ms
    base -= base % WINDOW_MS  # windows aligned to the first event: easier to read
    rows: dict[int, list[tuple[bytes, bytes, int]]] = {p: [] for p in parts}
    encode = make_operator("x").aggregator.encode
    accs: dict[tuple[int, int], list[int]] = {}
    max_ts = dict.fromkeys(parts, -1)
    wl = Workload(rows, n, n_keys)
    payload = 0
    key_total = 0
    for i in range(n):
        k = rng.randrange(n_keys)
        x = rng.randrange(1000)
        ts = base + i * spacing_ms
        key = keys[k]
        p = key_part[k]
        rows[p].append((key, f'{{"x":{x},"user":"u{k}","page":"/p/{i % 50}"}}'.encode(), ts))
        max_ts[p] = ts
        end = ts - ts % WINDOW_MS + WINDOW_MS
        acc = accs.get((k, end))
        if acc is None:
            acc = accs[(k, end)] = [0, 0]
        acc[0] += 1
        acc[1] += x
        payload += len(key) + 8 + len(encode(acc))
        key_total += len(key)
    wl.changelog_records = n
    wl.changelog_payload = payload
    wl.key_bytes = key_total
    for (k, end), (cnt, total) in accs.items():
        if end <= max_ts[key_part[k]]:  # closed: stream time reached the window end
            wl.expected_results += 1
            wl.expected_n += cnt
            wl.expected_total += total
    return wl


async def check_results(bootstrap: str, sink: str, wl: Workload) -> dict[str, Any]:
    rows = await consume_all(bootstrap, sink, timeout_s=300)
    n_sum = total_sum = 0
    for r in rows:
        value = json.loads(r.value or b"null")["value"]
        n_sum += value["n"]
        total_sum += value["total"]
    ok = (len(rows), n_sum, total_sum) == (wl.expected_results, wl.expected_n, wl.expected_total)
    return {
        "emitted": len(rows), "expected": wl.expected_results, "n_sum": n_sum,
        "expected_n_sum": wl.expected_n, "total_sum": total_sum,
        "expected_total_sum": wl.expected_total, "ok": ok,
    }


def changelog_estimate(wl: Workload) -> dict[str, Any]:
    """Bytes a log-every-update engine would write for this run: one changelog
    record per state update (= per input event here: one window per event)."""
    payload = wl.changelog_payload
    per_record = payload / max(wl.changelog_records, 1) + RECORD_FRAMING
    framed = payload + wl.changelog_records * RECORD_FRAMING
    framed += int(framed / BATCH_BYTES * BATCH_HEADER)
    return {
        "records": wl.changelog_records,
        "payload_bytes": payload,
        "bytes": framed,
        "bytes_at_70_overhead": payload + 70 * wl.changelog_records,
        "avg_record_bytes": round(per_record, 1),
        "model": "per update: key + 8-byte window start + encoded accumulator, plus Kafka "
                 f"record-v2 framing ({RECORD_FRAMING} B/record) and a {BATCH_HEADER} B batch "
                 f"header per {BATCH_BYTES // 1024} KiB",
    }


def checkpoint_figures(
    checkpoints: list[logging.LogRecord], interval_s: float, events: int, local_bytes: int,
) -> dict[str, Any]:
    written = sum(log_field(r, "bytes") for r in checkpoints)
    kinds = [log_field(r, "kind") for r in checkpoints]
    return {
        "policy": "fixed", "interval_s": interval_s,
        "count": len(checkpoints), "full": kinds.count("full"), "delta": kinds.count("delta"),
        "clean": sum(1 for r in checkpoints if log_field(r, "clean")),
        "bytes": written,
        "bytes_per_1M_events": round(written * 1_000_000 / events),
        "local_rocksdb_dir_bytes": local_bytes,
        "note": "payload bytes of every checkpoint of the live phase, incl. the one right "
                "after going live and the clean one at shutdown; the replica topic gets "
                "the same payloads once more",
    }


# -- the run -----------------------------------------------------------------------


async def run(args: argparse.Namespace, work_dir: Path) -> dict[str, Any]:
    n = SMALL_EVENTS if args.small and args.events is None else (args.events or 1_000_000)
    if args.spacing_ms is None:
        args.spacing_ms = max(1, 1_000_000 // n)
    t0 = time.perf_counter()
    wl = build_workload(n, args.keys, args.spacing_ms)
    gen_s = time.perf_counter() - t0
    print(f"built {n:,} events over {args.keys:,} keys in {gen_s:.1f} s", file=sys.stderr)
    run_id = uuid.uuid4().hex[:8]
    topic = f"bench-e2e-{run_id}"
    op = make_operator(topic)
    app_name = f"bench-e2e-{run_id}"
    async with bench_broker(args.bootstrap, work_dir) as bootstrap:
        created: list[str] = []
        try:
            await create_topics(
                bootstrap, [TopicSpec(topic, PARTITIONS, config={"retention.ms": "-1"})])
            created.append(topic)
            t0 = time.perf_counter()
            produced = await produce_fast(bootstrap, topic, wl.rows)
            produce_s = time.perf_counter() - t0
            print(f"produced {produced:,} events to {topic} in {produce_s:.1f} s on {bootstrap}",
                  file=sys.stderr)
            ends = await end_offsets(bootstrap, topic, "read_committed")
            if sum(ends.values()) != n:
                raise RuntimeError(f"topic has {sum(ends.values())} records, expected {n}")

            # (a) raw
            raw_count, raw_s = await read_to_end(
                bootstrap, topic, sorted(ends), ends, max_records=args.max_batch)
            raw_eps = raw_count / raw_s
            print(f"raw:    {raw_count:,} records in {raw_s:.2f} s = {raw_eps:,.0f}/s",
                  file=sys.stderr)

            # (b) live
            group = f"bench-e2e-{run_id}"
            ck = CheckpointSettings(policy="fixed", interval_s=args.checkpoint_interval)
            live_settings = WorkerSettings(
                bootstrap_servers=bootstrap, group_id=group,
                state_dir=str(work_dir / f"state-live-{run_id}"),
                max_batch_records=args.max_batch, checkpoints=ck,
                worker_id=f"bench-live-{run_id}", tune_gc=args.gc == "tuned",
            )
            app = App(app_name, [op], kafka=KafkaSettings(bootstrap_servers=bootstrap))
            created += [op.sink, op.dead_letter_topic, app.checkpoint_topic]
            profile = cProfile.Profile() if args.profile else None
            live = await live_phase(bootstrap, app, live_settings, topic, ends, profile,
                                    args.timeout)
            print(f"live:   {n:,} events in {live['seconds']:.2f} s = "
                  f"{live['events_per_s']:,.0f}/s (startup {live['startup_s']:.2f} s; "
                  f"catch-up spread min {live['spread']['min']})",
                  file=sys.stderr)
            if profile is not None:
                write_profile(profile, args.profile)
            local_bytes = dir_bytes(Path(live_settings.state_dir))
            results = (await check_results(bootstrap, op.sink, wl)) if args.verify else None
            sink_end_before = await end_offsets(bootstrap, op.sink)

            # (c) replay: same group (committed at the end), no local state, no replica
            replay_app = App(app_name, [op], kafka=KafkaSettings(
                bootstrap_servers=bootstrap, checkpoint_topic=f"{app.checkpoint_topic}-replay"))
            created.append(replay_app.checkpoint_topic)
            replay_settings = WorkerSettings(
                bootstrap_servers=bootstrap, group_id=group,
                state_dir=str(work_dir / f"state-replay-{run_id}"),
                max_batch_records=args.max_batch, checkpoints=ck,
                worker_id=f"bench-replay-{run_id}", tune_gc=args.gc == "tuned",
            )
            replay = await replay_phase(replay_app, replay_settings, ends, args.timeout)
            print(f"replay: {replay['replayed']:,} records in {replay['seconds']:.2f} s = "
                  f"{replay['events_per_s']:,.0f}/s", file=sys.stderr)
            sink_end_after = await end_offsets(bootstrap, op.sink)
        finally:
            if not args.keep_topics and created:
                try:
                    await delete_topics(bootstrap, created)
                except Exception as exc:
                    print(f"could not delete topics {created}: {exc}", file=sys.stderr)

    changelog = changelog_estimate(wl)
    checkpoint = checkpoint_figures(live["checkpoints"], args.checkpoint_interval, n,
                                    local_bytes)
    live_eps, replay_eps = live["events_per_s"], replay["events_per_s"]
    goal_live = live_goal(args.keys)
    summary: dict[str, Any] = {
        "bench": "e2e_throughput",
        "events": n,
        "keys": args.keys,
        "partitions": PARTITIONS,
        "spacing_ms": args.spacing_ms,
        "max_batch": args.max_batch,
        "guarantee": "exactly_once",
        "python": platform.python_version(),
        "profiled": bool(args.profile),
        "gc": args.gc,
        "raw_events_per_s": round(raw_eps),
        "live_events_per_s": round(live_eps),
        "replay_events_per_s": round(replay_eps),
        "live_over_raw": round(live_eps / raw_eps, 3),
        "replay_over_live": round(replay_eps / live_eps, 3) if live_eps else None,
        "path": args.path,
        "native": fastpath.native_module is not None and fastpath.native_enabled,
        "output": (args.output if fastpath.native_module is not None and fastpath.native_enabled
                   else "python"),
        "close": args.close,
        "goals": {"live_over_raw": goal_live, "replay_over_live": GOAL_REPLAY_OVER_LIVE},
        "goals_met": {
            "live_over_raw": live_eps / raw_eps >= goal_live,
            "replay_over_live": bool(live_eps) and replay_eps / live_eps >= GOAL_REPLAY_OVER_LIVE,
        },
        "seconds": {
            "produce": round(produce_s, 2), "raw": round(raw_s, 3),
            "live": round(live["seconds"], 3), "live_startup": round(live["startup_s"], 3),
            "live_wall": round(live["wall_s"], 3), "replay": round(replay["seconds"], 3),
            "replay_startup": round(replay["restore_s"], 3),
            "replay_wall": round(replay["wall_s"], 3),
        },
        "live_wall_events_per_s": round(live["wall_events_per_s"]),
        # slowest/fastest partition's committed share while catching up (1.0: even)
        "catch_up_spread": live["spread"],
        "replay_log_events_per_s": round(replay["log_events_per_s"]),
        "processed": {"raw": raw_count, "live_committed": sum(ends.values()),
                      "replayed": replay["replayed"]},
        "results": results,
        "replay_rebalances": replay["rebalances"],
        "replay_emitted": sum(sink_end_after.values()) - sum(sink_end_before.values()),
        "worker_exit_codes": [live["exit_code"], replay["exit_code"]],
        "checkpoint": checkpoint,
        "changelog": changelog,
        "changelog_over_checkpoint": round(changelog["bytes"] / max(checkpoint["bytes"], 1), 1),
        "live_breakdown": live["breakdown"],
        "live_loop_cpu_share": live["loop_cpu_share"],
        "live_loop_cpu_us_per_event": live["loop_cpu_us_per_event"],
        "live_commit_lag_s": live["commit_lag_s"],
        "replay_per_partition": replay["per_partition"],
    }
    return summary


def live_goal(keys: int) -> float:
    """The live/raw goal for a run over ``keys`` keys."""
    return GOAL_LIVE_OVER_RAW if keys <= 1000 else GOAL_LIVE_OVER_RAW_MANY_KEYS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=None, help="default 1,000,000")
    parser.add_argument("--small", action="store_true", help=f"{SMALL_EVENTS:,} events (CI)")
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--spacing-ms", type=int, default=None,
                        help="event time between consecutive events (default: the events "
                             "span ~1,000 s, 1 ms apart at 1M events)")
    parser.add_argument("--max-batch", type=int, default=5000,
                        help="getmany max_records for raw and the worker (the worker's default)")
    parser.add_argument("--checkpoint-interval", type=float, default=10.0,
                        help="fixed checkpoint interval of the worker, seconds")
    parser.add_argument("--bootstrap", default=None,
                        help="Kafka to use (default $STREAMREMAT_BOOTSTRAP, else a dev broker)")
    parser.add_argument("--work-dir", default=None,
                        help="state dirs and the dev broker's data (default: a temp dir, removed)")
    parser.add_argument("--profile", metavar="FILE",
                        help="cProfile the live phase; '-' prints it to stderr")
    parser.add_argument("--no-verify", dest="verify", action="store_false",
                        help="don't read the sink back to check the results")
    parser.add_argument("--keep-topics", action="store_true")
    parser.add_argument("--gc", choices=("tuned", "default"), default="tuned",
                        help="the workers' GC: tuned (runtime/gc_tuning.py) or CPython's default")
    parser.add_argument("--path", choices=("fast", "pure"), default="fast",
                        help="the engine's batch fast path (core/fastpath.py) or its general path")
    parser.add_argument("--output", choices=("native", "python"), default="native",
                        help="the worker's results encoded and batched natively (where the "
                             "extension is built) or in Python (runtime/outputs.py)")
    parser.add_argument("--close", choices=("native", "python"), default="native",
                        help="a closing window of the native state table sorted and encoded "
                             "natively, or its keys sorted and accumulators built in Python "
                             "(STREAMREMAT_NATIVE_CLOSE=0)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="per worker phase, s")
    parser.add_argument("-v", "--verbose", action="store_true", help="worker logs to stderr")
    args = parser.parse_args(argv)
    if args.keys < 1 or (args.events is not None and args.events < 1):
        parser.error("--events and --keys must be >= 1")

    logging.getLogger("streamremat").setLevel(logging.INFO)
    if args.verbose:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logging.getLogger("streamremat").addHandler(handler)
        logging.getLogger("aiokafka").addHandler(handler)
    logging.getLogger("aiokafka").setLevel(logging.INFO if args.verbose else logging.ERROR)

    own_dir = args.work_dir is None
    work_dir = Path(args.work_dir or tempfile.mkdtemp(prefix="streamremat-e2e-"))
    work_dir.mkdir(parents=True, exist_ok=True)
    fastpath.enabled = args.path == "fast"
    outputs.native_results = args.output == "native"
    native_state.native_close = args.close == "native"
    try:
        summary = asyncio.run(run(args, work_dir))
    finally:
        fastpath.enabled = True
        outputs.native_results = True
        native_state.native_close = True
        if own_dir:
            shutil.rmtree(work_dir, ignore_errors=True)
    for key in ("raw", "live", "replay"):
        print(f"{key:7s} {summary[f'{key}_events_per_s']:>12,} events/s")
    print(f"live/raw {summary['live_over_raw']} (goal >= {live_goal(args.keys)}), "
          f"replay/live {summary['replay_over_live']} (goal >= {GOAL_REPLAY_OVER_LIVE})")
    ck, cl = summary["checkpoint"], summary["changelog"]
    print(f"checkpoint bytes {ck['bytes']:,} ({ck['count']} checkpoints, every "
          f"{ck['interval_s']} s) vs changelog {cl['bytes']:,}: "
          f"{summary['changelog_over_checkpoint']}x")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
