"""Checkpoint bytes against a changelog with and without a record cache (issue 15 item 4).

One live stream, simulated in arrival order at ``--rates`` events/s for
``--duration-s`` seconds (event time = arrival time: a caught-up stream, not a
backlog), 4 partitions (the Java client's murmur2 of the key), values
``{"x": 0..999, ...}`` over ``--keys`` keys, the job ``Tumbling(60 s)``
``{"n": Count(), "total": Sum("x")}`` per key. Three ways to make its state
durable, as bytes written to Kafka:

a. **streamremat checkpoints**, computed by the engine: every
   ``--checkpoint-interval`` seconds of arrival time, each partition's
   ``Task.snapshot`` (a full once the deltas since the last full outweigh it, as
   ``runtime/checkpointing.py`` decides), framed by ``state/frame.py::encode_frame``
   (zstd above its threshold), one replica-topic record each.
b. **a changelog, one write per update** (no cache): one record per event.
c. **a caching changelog**, a model of Kafka Streams' record cache that shares no
   code with the engine. What it models:

   * one LRU cache for the stream thread, ``--cache-max-bytes`` (Kafka Streams'
     ``statestore.cache.max.bytes`` default, 10 MiB); an update puts the
     (key, window) entry, marks it dirty and makes it most recently used;
   * every ``commit.interval.ms`` of arrival time (``--commit-intervals``: 30 s,
     Kafka Streams' default; 10 s, the checkpoint interval, to compare like with
     like; 100 ms, its default under exactly-once) every dirty entry is written
     once (one changelog record) and marked clean; clean entries stay cached;
   * when the cache is over its size the least recently used entry is evicted,
     and written first if dirty (an extra record);
   * an entry's cache size is Kafka Streams' own estimate: store key (key + 8-byte
     window start + 4-byte seqnum) + value + 1 (dirty flag) + record context
     (8 offset + 8 timestamp + 4 partition + the topic name); Java object overhead
     is not counted (Kafka Streams does not count it either);
   * windows expire by segment retention: no tombstones, nothing written on close.

   Not modelled: ``suppress(untilWindowCloses)``, which the same final-results job
   needs in Kafka Streams and which keeps a second changelogged buffer (so the model
   is a lower bound for Kafka Streams), and the repartition and output topics.

Every changelog record (b and c) is ``key + 8-byte window start + value``, the
value being count and sum as two varints (a compact binary serde; JSON would be
about 3x larger), plus Kafka record-v2 framing (9 B) and a 61-byte batch header
per 16 KiB; Kafka Streams' real window-store record carries 12 more bytes (seqnum,
value timestamp), so the figures favour the changelog. Checkpoint records get the
same framing, one batch each. The local RocksDB writes (every engine has them)
are not counted. The model folds the events itself and its closed windows' counts
and sums must equal the engine's results (``fold_check``).

Usage::

    python bench/changelog_cache.py [--keys 1000,100000] [--rates 1000,10000]
    python bench/changelog_cache.py --small      # CI: seconds

The last line of stdout is a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aiokafka.partitioner import DefaultPartitioner  # noqa: E402

from streamremat import Count, Operator, Sum, Tumbling  # noqa: E402
from streamremat.core.records import Record  # noqa: E402
from streamremat.core.task import Task  # noqa: E402
from streamremat.state.frame import CheckpointFrame, FrameKind, TaskId, encode_frame  # noqa: E402

PARTITIONS = 4
WINDOW_MS = 60_000
TOPIC = "bench-changelog-in"
RECORD_FRAMING = 9
BATCH_HEADER, BATCH_BYTES = 61, 16 * 1024
#: Kafka Streams' cache estimate beyond key and value: dirty flag, offset,
#: timestamp, partition, topic name (LRUCacheEntry, ProcessorRecordContext)
CACHE_ENTRY_EXTRA = 1 + 8 + 8 + 4 + len(TOPIC)
WINDOW_KEY_EXTRA = 8 + 4  # window start + seqnum in the store key


def varint_len(n: int) -> int:
    n = (n << 1) ^ (n >> 63)  # zigzag, like a signed varint
    size = 1
    while n >= 0x80:
        n >>= 7
        size += 1
    return size


def framed(payload_bytes: int, records: int, batches: int) -> int:
    return payload_bytes + records * RECORD_FRAMING + batches * BATCH_HEADER


# -- the stream ------------------------------------------------------------------


@dataclass
class Stream:
    """Events in arrival order: (key index, partition, x, timestamp ms, arrival s)."""

    keys: list[bytes]
    key_part: list[int]
    events: list[tuple[int, int, int, int]]  # key index, x, timestamp ms, arrival ms
    rate: float


def make_stream(n_keys: int, rate: float, duration_s: float, seed: int = 5) -> Stream:
    rng = random.Random(seed)
    parts = list(range(PARTITIONS))
    partitioner = DefaultPartitioner()
    keys = [json.dumps(f"u{i}").encode() for i in range(n_keys)]
    key_part = [partitioner(k, parts, parts) for k in keys]
    base = 1_700_000_040_000  # a window boundary; arrival ms since the start = ts - base
    n = int(rate * duration_s)
    events = []
    for i in range(n):
        arrival = int(i * 1000 / rate)
        events.append((rng.randrange(n_keys), rng.randrange(1000), base + arrival, arrival))
    return Stream(keys, key_part, events, rate)


# -- a: the engine's checkpoints -------------------------------------------------


def engine_checkpoints(stream: Stream, interval_s: float) -> dict[str, Any]:
    op = Operator(name="win", source=TOPIC, sink=f"{TOPIC}-out", window=Tumbling(WINDOW_MS),
                  aggregate={"n": Count(), "total": Sum("x")})
    tasks = [Task(op, p) for p in range(PARTITIONS)]
    chains = [{"full_bytes": 0, "delta_bytes": 0, "seq": 0, "base": None}
              for _ in range(PARTITIONS)]
    offsets = [0] * PARTITIONS
    pending: list[list[Record]] = [[] for _ in range(PARTITIONS)]
    closed: dict[tuple[bytes, int], tuple[int, int]] = {}
    out = {"checkpoints": 0, "full": 0, "payload_bytes": 0, "frame_bytes": 0}
    interval_ms = int(interval_s * 1000)
    next_ck = interval_ms

    def run(p: int) -> None:
        if pending[p]:
            for r in tasks[p].process(pending[p]).results:
                closed[(r.key, r.start_ms)] = (r.value["n"], r.value["total"])
            tasks[p].next_offset = offsets[p]
            pending[p] = []

    def checkpoint() -> None:
        for p, task in enumerate(tasks):
            run(p)
            ch = chains[p]
            full = ch["base"] is None or ch["delta_bytes"] > max(ch["full_bytes"], 1)
            payload = task.snapshot(full)
            seq = ch["seq"]
            ch["seq"] = seq + 1
            if full:
                ch["base"], ch["full_bytes"], ch["delta_bytes"] = seq, len(payload), 0
            else:
                ch["delta_bytes"] += len(payload)
            frame = encode_frame(CheckpointFrame(
                task=TaskId(op.name, TOPIC, p), seq=seq,
                kind=FrameKind.FULL if full else FrameKind.DELTA, base_seq=ch["base"],
                offset=offsets[p], stream_time_ms=task.stream_time_ms or 0, clean=False,
                meta=b"", payload=payload))
            key_len = len(str(TaskId(op.name, TOPIC, p)))
            out["checkpoints"] += 1
            out["full"] += full
            out["payload_bytes"] += len(payload)
            out["frame_bytes"] += framed(len(frame) + key_len, 1, 1)

    for k, x, ts, arrival in stream.events:
        while arrival >= next_ck:
            checkpoint()
            next_ck += interval_ms
        p = stream.key_part[k]
        pending[p].append(Record(stream.keys[k], b'{"x":%d,"page":"/p/1"}' % x, ts,
                                 offsets[p]))
        offsets[p] += 1
        if len(pending[p]) >= 5000:
            run(p)
    checkpoint()  # the one at the end of the run
    out["closed_windows"] = closed
    return out


# -- b and c: changelogs, modelled without the engine -----------------------------


@dataclass
class CacheModel:
    """Kafka Streams' record cache in front of a changelog (see the module docstring)."""

    max_bytes: int
    interval_ms: int
    #: every cached entry, least recently used first, with its size estimate
    lru: OrderedDict[tuple[int, int], int] = field(default_factory=OrderedDict)
    dirty: dict[tuple[int, int], None] = field(default_factory=dict)
    used: int = 0
    records: int = 0
    payload: int = 0
    evicted_dirty: int = 0
    flushes: int = 0
    batches: int = 0

    def put(self, entry: tuple[int, int], size: int, write: Any) -> None:
        lru = self.lru
        old = lru.get(entry)
        if old is not None:
            lru.move_to_end(entry)
        self.used += size - (old or 0)
        lru[entry] = size
        self.dirty[entry] = None
        while self.used > self.max_bytes:
            victim, victim_size = lru.popitem(last=False)
            self.used -= victim_size
            if victim in self.dirty:  # written before it leaves: an extra record
                del self.dirty[victim]
                self.evicted_dirty += 1
                self.records += 1
                self.payload += write(victim)
                self.batches += 1

    def flush(self, write: Any) -> None:
        flushed = sum(write(entry) for entry in self.dirty)
        self.records += len(self.dirty)
        self.payload += flushed
        self.dirty.clear()
        self.flushes += 1
        self.batches += -(-flushed // BATCH_BYTES)


def changelogs(stream: Stream, intervals_s: list[float], max_bytes: int) -> dict[str, Any]:
    accs: dict[tuple[int, int], list[int]] = {}
    keys, key_part = stream.keys, stream.key_part

    def record_bytes(entry: tuple[int, int]) -> int:
        c, s = accs[entry]
        return len(keys[entry[0]]) + 8 + varint_len(c) + varint_len(s)

    models = [CacheModel(max_bytes, int(i * 1000)) for i in intervals_s]
    next_flush = [m.interval_ms for m in models]
    per_update_payload = 0
    stream_time = [-1] * PARTITIONS
    for k, x, ts, arrival in stream.events:
        for i, m in enumerate(models):
            while arrival >= next_flush[i]:
                m.flush(record_bytes)
                next_flush[i] += m.interval_ms
        entry = (k, ts - ts % WINDOW_MS)
        acc = accs.get(entry)
        if acc is None:
            acc = accs[entry] = [0, 0]
        acc[0] += 1
        acc[1] += x
        stream_time[key_part[k]] = max(stream_time[key_part[k]], ts)
        size = record_bytes(entry)
        per_update_payload += size
        cache_size = size + WINDOW_KEY_EXTRA + CACHE_ENTRY_EXTRA
        for m in models:
            m.put(entry, cache_size, record_bytes)
    for m in models:
        m.flush(record_bytes)
    n = len(stream.events)
    closed = {(keys[k], start): (c, s) for (k, start), (c, s) in accs.items()
              if start + WINDOW_MS <= stream_time[key_part[k]]}
    return {
        "per_update": {"records": n, "bytes": framed(per_update_payload, n,
                                                     -(-per_update_payload // BATCH_BYTES))},
        "cached": {
            f"{s:g}s": {"commit_interval_s": s, "records": m.records,
                        "bytes": framed(m.payload, m.records, m.batches),
                        "evicted_dirty_records": m.evicted_dirty, "flushes": m.flushes,
                        "writes_per_update": round(m.records / n, 4)}
            for s, m in zip(intervals_s, models, strict=True)
        },
        "entries": len(accs),
        "closed_windows": closed,
    }


# -- the run ---------------------------------------------------------------------


def one(n_keys: int, rate: float, args: argparse.Namespace) -> dict[str, Any]:
    t0 = time.perf_counter()
    stream = make_stream(n_keys, rate, args.duration_s)
    ck = engine_checkpoints(stream, args.checkpoint_interval)
    cl = changelogs(stream, args.commit_intervals, args.cache_max_bytes)
    n = len(stream.events)
    engine_closed, model_closed = ck.pop("closed_windows"), cl.pop("closed_windows")
    per_m = 1_000_000 / n
    row: dict[str, Any] = {
        "keys": n_keys, "rate_per_s": rate, "events": n, "duration_s": args.duration_s,
        "updates_per_key_window": round(rate * WINDOW_MS / 1000 / n_keys, 2),
        "checkpoint": {**ck, "interval_s": args.checkpoint_interval,
                       "bytes_per_1M_events": round(ck["frame_bytes"] * per_m)},
        "changelog_per_update": {**cl["per_update"],
                                 "bytes_per_1M_events": round(cl["per_update"]["bytes"] * per_m)},
        "changelog_cached": {name: {**c, "bytes_per_1M_events": round(c["bytes"] * per_m)}
                             for name, c in cl["cached"].items()},
        "fold_check": {"closed_windows": len(engine_closed),
                       "equal": engine_closed == model_closed},
        "seconds": round(time.perf_counter() - t0, 1),
    }
    ck_bytes = max(ck["frame_bytes"], 1)
    row["per_update_over_checkpoint"] = round(cl["per_update"]["bytes"] / ck_bytes, 2)
    row["cached_over_checkpoint"] = {name: round(c["bytes"] / ck_bytes, 2)
                                     for name, c in cl["cached"].items()}
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--keys", default="1000,100000")
    p.add_argument("--rates", default="1000,10000", help="events/s of arrival (= event) time")
    p.add_argument("--duration-s", type=float, default=600.0)
    p.add_argument("--checkpoint-interval", type=float, default=10.0)
    p.add_argument("--commit-intervals", default="30,10,0.1",
                   help="the caching changelog's commit.interval.ms, in seconds")
    p.add_argument("--cache-max-bytes", type=int, default=10 * 1024 * 1024)
    p.add_argument("--small", action="store_true", help="CI size: 1k and 10k keys, 120 s at 500/s")
    args = p.parse_args(argv)
    if args.small:
        args.keys, args.rates, args.duration_s = "1000,10000", "500", 120.0
    args.commit_intervals = [float(s) for s in args.commit_intervals.split(",")]
    rows = []
    for n_keys in (int(k) for k in args.keys.split(",")):
        for rate in (float(r) for r in args.rates.split(",")):
            row = one(n_keys, rate, args)
            rows.append(row)
            cached = ", ".join(f"cached {n} {c['bytes_per_1M_events']:,}"
                               for n, c in row["changelog_cached"].items())
            print(f"{n_keys:>7,} keys {rate:>7,.0f}/s: checkpoint "
                  f"{row['checkpoint']['bytes_per_1M_events']:,} B/1M events, per update "
                  f"{row['changelog_per_update']['bytes_per_1M_events']:,}, {cached} "
                  f"(fold check {row['fold_check']['equal']}, {row['seconds']} s)",
                  file=sys.stderr, flush=True)
    summary = {"benchmark": "changelog_cache", "window": "tumbling 60 s, count+sum per key",
               "partitions": PARTITIONS, "checkpoint_interval_s": args.checkpoint_interval,
               "commit_intervals_s": args.commit_intervals,
               "cache_max_bytes": args.cache_max_bytes, "results": rows}
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
