"""Throughput of the pure engine: events/s through one ``Task`` on one core.

Records (``streamremat.core.records.Record`` with JSON values) are built before
timing and fed in batches of ``--batch`` (default 1000, like the worker's
``getmany``). Scenarios:

* ``tumbling_count_sum_1k_keys``: Tumbling(60 s), ``{"n": Count(), "total":
  Sum("amount")}``, 1,000 keys: the goal scenario (>= 4M events/s)
* ``tumbling_count_sum_100k_keys``: the same with 100,000 keys
* ``tumbling_count_1k_keys``: Tumbling(60 s), Count(), 1,000 keys
* ``tumbling_count_100k_keys``: the same with 100,000 keys
* ``tumbling_count_raw_1k_keys``: as the first, but ``value_serde=RAW``: no JSON
  decoding, which shows what decoding costs
* ``hopping_sum_1k_keys``: Hopping(60 s, 10 s), Sum("amount")
* ``session_count_10k_keys``: Session(gap 5 s), Count()
* ``tumbling_custom_1k_keys``: Tumbling(60 s), a custom aggregation (not a
  built-in): always the general path, to watch it for regressions

All but the session and custom scenarios take the batch fast path
(``streamremat/core/fastpath.py``), natively where ``streamremat_native`` is
built (``native/``). ``--path`` picks one path: ``table`` (the native fold into
the native state table, ``core/native_state.py``: the default where it is
built), ``native`` (the native fold into the Python state's dicts), ``fast`` (the
Python fast path), ``pure`` (the general path); ``all`` (the default) runs each
scenario every available way, alternating, best of two, with the ratios.

``--split`` prints the native path's per-record cost split for the goal scenario:
attribute extraction (key, value, timestamp of each record), JSON parse and pick,
the fold (windows and accumulators, written into the Python state) and the rest
(``Task.process`` around it, closing windows).

Event time advances 1 ms per event, with a little jitter back in time. Usage::

    python bench/core_throughput.py [--events N] [--small] [--only NAME] [--profile NAME]
                                    [--gc-ab] [--path native|fast|pure|all] [--split]

``--gc-ab`` runs every scenario with CPython's default GC and with the worker's
tuning (``streamremat/runtime/gc_tuning.py``), alternating, best of two each, and
reports the ratio (the prebuilt records are frozen with it, as restored state is).

Events/s are per CPU second of the process (``time.process_time``), so that other
load on a shared machine counts less. The last line of stdout is a JSON summary:
events/s per scenario (the fastest path's), each path's per scenario with the
ratios, and the goal (``tumbling_count_sum_1k_keys`` >= 4M events/s) met or not.
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
from streamremat.core import fastpath
from streamremat.core.records import Record
from streamremat.core.task import Task
from streamremat.runtime import gc_tuning

SMALL_EVENTS = 20_000
#: issue 15's goal for the core engine, events/s
GOAL_SCENARIO, GOAL_EVENTS_PER_S = "tumbling_count_sum_1k_keys", 4_000_000


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


class CustomSum:
    """A user aggregation (the protocol, not an Aggregator): the general path."""

    def zero(self) -> int:
        return 0

    def add(self, acc: int, value: Any) -> int:
        return acc + value["amount"]

    def merge(self, a: int, b: int) -> int:
        return a + b

    def result(self, acc: int) -> int:
        return acc

    def encode(self, acc: int) -> bytes:
        return str(acc).encode()

    def decode(self, data: bytes) -> int:
        return int(data)


def _count_sum() -> dict[str, Any]:
    return {"n": Count(), "total": Sum("amount")}


SCENARIOS: dict[str, tuple[int, Callable[[], Operator]]] = {
    "tumbling_count_sum_1k_keys": (1_000, lambda: _op(Tumbling(60_000), _count_sum())),
    "tumbling_count_sum_100k_keys": (100_000, lambda: _op(Tumbling(60_000), _count_sum())),
    "tumbling_count_1k_keys": (1_000, lambda: _op(Tumbling(60_000), Count())),
    "tumbling_count_100k_keys": (100_000, lambda: _op(Tumbling(60_000), Count())),
    "tumbling_count_raw_1k_keys": (
        1_000,
        lambda: _op(Tumbling(60_000), Count(), value_serde=RAW),
    ),
    "hopping_sum_1k_keys": (1_000, lambda: _op(Hopping(60_000, 10_000), Sum("amount"))),
    "session_count_10k_keys": (10_000, lambda: _op(Session(5_000), Count())),
    "tumbling_custom_1k_keys": (1_000, lambda: _op(Tumbling(60_000), CustomSum())),
}


PATHS = ("table", "native", "fast", "pure")


def available_paths() -> tuple[str, ...]:
    return PATHS if fastpath.native_module is not None else PATHS[2:]


def run(op: Operator, batches: list[list[Record]], path: str = "table") -> tuple[float, int, int]:
    """Feed the batches through a fresh task; return (seconds, results, late)."""
    saved = fastpath.enabled, fastpath.native_enabled, fastpath.native_state_enabled
    fastpath.enabled = path != "pure"
    fastpath.native_enabled = path in ("table", "native")
    fastpath.native_state_enabled = path == "table"
    try:
        task = Task(op)
    finally:
        fastpath.enabled, fastpath.native_enabled, fastpath.native_state_enabled = saved
    results = late = 0
    gc.collect()
    # CPU time of this (single-threaded) process: the machine is shared, and time
    # other processes hold the cores is not the engine's
    start = time.process_time()
    for batch in batches:
        out = task.process(batch)
        results += len(out.results)
        late += len(out.late)
    return time.process_time() - start, results, late


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
    parser.add_argument("--path", choices=(*PATHS, "all"), default="all",
                        help="the native fold, the Python fast path, the general path, or "
                        "every available one alternating")
    parser.add_argument("--split", action="store_true",
                        help="the native per-record cost split of the goal scenario")
    args = parser.parse_args(argv)
    n = SMALL_EVENTS if args.small else args.events
    if args.path in ("table", "native") and fastpath.native_module is None:
        parser.error(f"--path {args.path}: streamremat_native is not built (make venv, with "
                     "cargo)")
    if args.split:
        print(json.dumps({"bench": "core_throughput", "split_ns_per_record": split(n, args.batch)}))
        return 0

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
    by_path: dict[str, Any] = {}
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
        if args.path != "all":
            seconds, results, late = run(make(), batches, args.path)
            eps = n / seconds
            summary[name] = round(eps)
            print(f"{name:30s} {eps:>12,.0f} events/s  ({seconds:.3f} s, {results:,} results, "
                  f"{late:,} late)")
            continue
        best = dict.fromkeys(available_paths(), 0.0)
        for _ in range(2):
            for path in best:
                best[path] = max(best[path], n / run(make(), batches, path)[0])
        summary[name] = round(max(best.values()))
        row: dict[str, Any] = {p: round(v) for p, v in best.items()}
        for a, b in (("table", "native"), ("table", "pure"), ("native", "fast"),
                     ("native", "pure"), ("fast", "pure")):
            if a in best:
                row[f"{a}_over_{b}"] = round(best[a] / best[b], 3)
        by_path[name] = row
        print(f"{name:30s} " + ", ".join(f"{p} {v:>11,.0f}" for p, v in best.items())
              + " events/s  " + " ".join(f"{k}={v}" for k, v in row.items() if "_over_" in k))
    print(
        json.dumps(
            {
                "bench": "core_throughput",
                "events": n,
                "batch": args.batch,
                "python": platform.python_version(),
                "path": args.path,
                "native_built": fastpath.native_module is not None,
                "events_per_s": summary,
                "by_path": by_path,
                "goals": {GOAL_SCENARIO: GOAL_EVENTS_PER_S},
                "goals_met": {GOAL_SCENARIO: summary[GOAL_SCENARIO] >= GOAL_EVENTS_PER_S}
                if GOAL_SCENARIO in summary else {},
            }
        )
    )
    return 0


def split(n: int, batch: int) -> dict[str, float]:
    """Per record, ns of CPU: the native pass 1 reading only the attributes (a raw
    count reads key and timestamp; the value is read too for the JSON parse), the
    pass 1 with the parse and pick, the whole fold (into the native table), and
    ``Task.process`` around it."""
    assert fastpath.native_module is not None, "streamremat_native is not built"
    n_keys, make = SCENARIOS[GOAL_SCENARIO]
    records = build_records(n, n_keys)
    batches = [records[i : i + batch] for i in range(0, n, batch)]
    folder = fastpath.native_module
    attrs = folder.Folder(["count"], [None], None, False, False, False)
    with_value = folder.Folder(["count"], [None], None, True, False, False)
    parse = folder.Folder(["count", "sum"], [None, "amount"], None, True, True, False)

    def cpu(setup: Callable[[], Callable[[list[Record]], Any]]) -> float:
        best = float("inf")
        for _ in range(3):
            fn = setup()
            start = time.process_time()
            for b in batches:
                fn(b)
            best = min(best, time.process_time() - start)
        return best / n * 1e9

    def fold_only() -> Callable[[list[Record]], Any]:
        fast = Task(make()).fast  # windows are not closed: only the fold is timed
        assert fast is not None and fast.native is not None
        return fast.fold

    key_ts = cpu(lambda: attrs.read_only)
    read = cpu(lambda: with_value.read_only)
    picked = cpu(lambda: parse.read_only)
    folded = cpu(fold_only)
    total = min(run(make(), batches, "table")[0] for _ in range(3)) / n * 1e9
    return {
        "key_timestamp_attributes": round(key_ts, 1),
        "value_attribute_and_json_validate": round(read - key_ts, 1),
        "json_pick_fields": round(picked - read, 1),
        "fold_into_state": round(folded - picked, 1),
        "process_and_close": round(total - folded, 1),
        "total": round(total, 1),
    }


if __name__ == "__main__":
    sys.exit(main())
