"""Throughput of the pure engine: events/s through one ``Task`` on one core.

Records (``streamremat.core.records.Record`` with JSON values) are built before
timing and fed in batches of ``--batch`` (default 1000, like the worker's
``getmany``). Scenarios:

* ``tumbling_count_1k_keys``: Tumbling(60 s), Count(), 1,000 keys
* ``tumbling_count_100k_keys``: the same with 100,000 keys
* ``tumbling_count_raw_1k_keys``: as the first, but ``value_serde=RAW``: no JSON
  decoding, which shows what decoding costs
* ``hopping_sum_1k_keys``: Hopping(60 s, 10 s), Sum("amount")
* ``session_count_10k_keys``: Session(gap 5 s), Count()

Event time advances 1 ms per event, with a little jitter back in time. Usage::

    python bench/core_throughput.py [--events N] [--small] [--only NAME] [--profile NAME]
                                    [--gc-ab]

``--gc-ab`` runs every scenario with CPython's default GC and with the worker's
tuning (``streamremat/runtime/gc_tuning.py``), alternating, best of two each, and
reports the ratio (the prebuilt records are frozen with it, as restored state is).

The last line of stdout is a JSON summary (events/s per scenario).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import platform
import pstats
import random
import sys
import time
from collections.abc import Callable
from typing import Any

from streamremat import RAW, Count, Hopping, Operator, Session, Sum, Tumbling
from streamremat.core.records import Record
from streamremat.core.task import Task
from streamremat.runtime import gc_tuning

SMALL_EVENTS = 20_000


def build_records(n: int, n_keys: int, seed: int = 7) -> list[Record]:
    """``n`` records over ``n_keys`` keys, ~1 ms apart, values like
    ``{"user": "u123", "amount": 42, "page": "/p/7"}``."""
    rng = random.Random(seed)
    keys = [json.dumps(f"u{i}").encode() for i in range(n_keys)]
    out = []
    for i in range(n):
        k = rng.randrange(n_keys)
        value = f'{{"amount":{rng.randrange(1000)},"page":"/p/{i % 50}","user":"u{k}"}}'
        t = max(0, i - (rng.randrange(200) if rng.random() < 0.05 else 0))
        out.append(Record(keys[k], value.encode(), 1_700_000_000_000 + t, i))
    return out


def _op(window: Any, aggregate: Any, **kw: Any) -> Operator:
    return Operator(name="bench", source="in", sink="out", window=window, aggregate=aggregate, **kw)


SCENARIOS: dict[str, tuple[int, Callable[[], Operator]]] = {
    "tumbling_count_1k_keys": (1_000, lambda: _op(Tumbling(60_000), Count())),
    "tumbling_count_100k_keys": (100_000, lambda: _op(Tumbling(60_000), Count())),
    "tumbling_count_raw_1k_keys": (
        1_000,
        lambda: _op(Tumbling(60_000), Count(), value_serde=RAW),
    ),
    "hopping_sum_1k_keys": (1_000, lambda: _op(Hopping(60_000, 10_000), Sum("amount"))),
    "session_count_10k_keys": (10_000, lambda: _op(Session(5_000), Count())),
}


def run(op: Operator, batches: list[list[Record]]) -> tuple[float, int, int]:
    """Feed the batches through a fresh task; return (seconds, results, late)."""
    task = Task(op)
    results = late = 0
    gc.collect()
    start = time.perf_counter()
    for batch in batches:
        out = task.process(batch)
        results += len(out.results)
        late += len(out.late)
    return time.perf_counter() - start, results, late


def gc_ab(make: Callable[[], Operator], batches: list[list[Record]], n: int) -> dict[str, Any]:
    """Events/s with the default GC and with the worker's tuning, best of two each."""
    best = {"default": 0.0, "tuned": 0.0}
    for _ in range(2):
        for mode in best:
            if mode == "tuned":
                gc_tuning.start()
            try:
                seconds = run(make(), batches)[0]
            finally:
                if mode == "tuned":
                    gc_tuning.stop()
            best[mode] = max(best[mode], n / seconds)
    return {"default": round(best["default"]), "tuned": round(best["tuned"]),
            "ratio": round(best["tuned"] / best["default"], 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--small", action="store_true", help=f"{SMALL_EVENTS} events (CI)")
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--only", action="append", choices=sorted(SCENARIOS))
    parser.add_argument("--profile", choices=sorted(SCENARIOS), help="cProfile one scenario")
    parser.add_argument("--gc-ab", action="store_true",
                        help="default GC vs the worker's GC tuning, alternating")
    args = parser.parse_args(argv)
    n = SMALL_EVENTS if args.small else args.events

    if args.profile:
        n_keys, make = SCENARIOS[args.profile]
        records = build_records(n, n_keys)
        batches = [records[i : i + args.batch] for i in range(0, n, args.batch)]
        profiler = cProfile.Profile()
        profiler.runcall(run, make(), batches)
        pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(15)
        return 0

    records_by_keys: dict[int, list[Record]] = {}
    summary: dict[str, Any] = {}
    for name in args.only or list(SCENARIOS):
        n_keys, make = SCENARIOS[name]
        if n_keys not in records_by_keys:
            records_by_keys[n_keys] = build_records(n, n_keys)
        records = records_by_keys[n_keys]
        batches = [records[i : i + args.batch] for i in range(0, n, args.batch)]
        if args.gc_ab:
            summary[name] = gc_ab(make, batches, n)
            print(f"{name:30s} default GC {summary[name]['default']:>12,} events/s, tuned "
                  f"{summary[name]['tuned']:>12,} events/s: x{summary[name]['ratio']}")
            continue
        seconds, results, late = run(make(), batches)
        eps = n / seconds
        summary[name] = round(eps)
        print(
            f"{name:30s} {eps:>12,.0f} events/s  ({seconds:.3f} s, {results:,} results, "
            f"{late:,} late)"
        )
    print(
        json.dumps(
            {
                "bench": "core_throughput",
                "events": n,
                "batch": args.batch,
                "python": platform.python_version(),
                "events_per_s": summary,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
