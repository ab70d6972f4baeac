"""The streamremat ``Worker`` run in-process and timed, phase by phase: live
(until the group's committed offsets reach the end) and replay (a second worker
with no state, until every partition is live). Shared by ``e2e_throughput.py``
and ``replay_backlog.py``.

* ``live_phase``: events/s from the moment every partition is live, plus a cheap
  wall-time ``Breakdown`` of a few runtime steps (patched around the methods)
  and the catch-up spread across partitions;
* ``replay_phase``: events/s of the replay from the workers' ``recovery`` log
  lines (partitions replay concurrently);
* ``Capture``: the worker's log records, whose ``extra`` fields carry the figures.
"""

from __future__ import annotations

import asyncio
import cProfile
import gc
import io
import logging
import pstats
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from streamremat import App
from streamremat.core.task import Task
from streamremat.runtime import worker as worker_module
from streamremat.runtime.committing import PartitionCommitter
from streamremat.runtime.partition import PartitionRunner, Phase
from streamremat.runtime.settings import WorkerSettings
from streamremat.runtime.worker import Worker

# -- log capture and a cheap time breakdown -------------------------------------


class Capture(logging.Handler):
    """Keeps the worker's log records (their ``extra`` fields carry the figures)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def events(self, name: str) -> list[logging.LogRecord]:
        return [r for r in self.records if getattr(r, "event", None) == name]


@dataclass
class Breakdown:
    """Wall seconds inside a few runtime steps (patched around the methods)."""

    seconds: dict[str, float] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)
    _undo: list[Callable[[], None]] = field(default_factory=list)

    def _add(self, name: str, dt: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + dt
        self.calls[name] = self.calls.get(name, 0) + 1

    def wrap_sync(self, owner: Any, attr: str, name: str) -> None:
        orig = getattr(owner, attr)

        def wrapped(*a: Any, **kw: Any) -> Any:
            t = time.perf_counter()
            try:
                return orig(*a, **kw)
            finally:
                self._add(name, time.perf_counter() - t)

        setattr(owner, attr, wrapped)
        self._undo.append(lambda: setattr(owner, attr, orig))

    def wrap_async(self, owner: Any, attr: str, name: str) -> None:
        orig = getattr(owner, attr)

        async def wrapped(*a: Any, **kw: Any) -> Any:
            t = time.perf_counter()
            try:
                return await orig(*a, **kw)
            finally:
                self._add(name, time.perf_counter() - t)

        setattr(owner, attr, wrapped)
        self._undo.append(lambda: setattr(owner, attr, orig))

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
        else:
            self._add(f"gc generation {info['generation']}",
                      time.perf_counter() - self._gc_started)

    def install(self) -> None:
        # Time inside the cyclic GC (runtime/gc_tuning.py), by generation collected.
        self._gc_started = 0.0
        gc.callbacks.append(self._on_gc)
        self._undo.append(lambda: gc.callbacks.remove(self._on_gc))
        self.wrap_async(worker_module, "fetch_round", "fetch_round (getmany, waits included)")
        self.wrap_async(Worker, "_process", "worker._process (engine + flush)")
        self.wrap_sync(PartitionRunner, "process", "runner.process (engine + to_records)")
        self.wrap_sync(Task, "process", "task.process (engine)")
        self.wrap_async(PartitionRunner, "flush", "runner.flush (send outputs)")
        self.wrap_async(Worker, "_commit_all", "worker._commit_all (commit + checkpoint)")
        self.wrap_async(PartitionRunner, "commit", "runner.commit (txn commit)")
        self.wrap_async(PartitionRunner, "checkpoint", "runner.checkpoint")
        self.wrap_async(PartitionCommitter, "acked", "committer.acked (wait for acks)")
        self.wrap_async(PartitionCommitter, "commit", "committer.commit (offsets + end txn)")

    def uninstall(self) -> None:
        while self._undo:
            self._undo.pop()()

    def summary(self, total_s: float) -> dict[str, Any]:
        return {
            name: {"s": round(s, 3), "share": round(s / total_s, 3) if total_s else None,
                   "calls": self.calls[name]}
            for name, s in sorted(self.seconds.items(), key=lambda kv: -kv[1])
        }


# -- phases -----------------------------------------------------------------------


async def committed_offsets(admin: Any, group: str, topic: str) -> dict[int, int]:
    try:
        offsets = await admin.list_consumer_group_offsets(group)
    except KafkaError:  # e.g. no coordinator yet while the offsets topic is created
        return {}
    return {tp.partition: om.offset for tp, om in offsets.items()
            if tp.topic == topic and om is not None and om.offset >= 0}


async def run_worker(
    app: App, settings: WorkerSettings, until: Callable[[Worker], Awaitable[bool]],
    timeout_s: float,
) -> tuple[Worker, Capture, float, float, int]:
    """Run a Worker in this process until ``until(worker)``; return
    (worker, its log, start time, time ``until`` held, exit code). Times: time.time()."""
    capture = Capture()
    logger = logging.getLogger("streamremat")
    logger.addHandler(capture)
    try:
        worker = Worker(app, settings)
        started = time.time()
        task = asyncio.create_task(worker.run())
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                if task.done():
                    raise RuntimeError(f"worker exited early with {task.result()}")
                if await until(worker):
                    reached = time.time()
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"worker did not finish within {timeout_s:.0f} s")
                await asyncio.sleep(0.02)
        finally:
            worker.stop()  # a clean stop in every case: commit, checkpoint, close clients
            code = await task
        return worker, capture, started, reached, code
    finally:
        logger.removeHandler(capture)


async def live_phase(
    bootstrap: str, app: App, settings: WorkerSettings, topic: str, ends: dict[int, int],
    profile: cProfile.Profile | None, timeout_s: float,
) -> dict[str, Any]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    group = settings.group_id
    assert group is not None
    polls = 0

    samples: list[dict[int, int]] = []
    #: (wall time, this thread's CPU time) at every poll: the loop's CPU share
    cpu: list[tuple[float, float]] = []
    processed_at: float | None = None  # every record folded (the commit follows)
    n = sum(ends.values())

    async def at_end(worker: Worker) -> bool:
        nonlocal polls, processed_at
        polls += 1
        cpu.append((time.time(), time.thread_time()))
        if processed_at is None and len(worker.runners) == len(ends) and sum(
                r.position for r in worker.runners.values()) >= n:
            processed_at = time.time()
        if polls % 5:  # the admin call every ~100 ms, not every 20 ms
            return False
        committed = await committed_offsets(admin, group, topic)
        samples.append({p: committed.get(p, 0) for p in ends})
        return all(committed.get(p, -1) >= end for p, end in ends.items())

    breakdown = Breakdown()
    breakdown.install()
    if profile is not None:
        profile.enable()
    try:
        _worker, capture, started, reached, code = await run_worker(
            app, settings, at_end, timeout_s)
    finally:
        if profile is not None:
            profile.disable()
        breakdown.uninstall()
        await admin.close()
    recovered = capture.events("recovery")
    if len(recovered) != len(ends):
        raise RuntimeError(f"expected {len(ends)} partitions live, saw {len(recovered)}")
    live_from = max(r.created for r in recovered)  # every partition is live from here
    checkpoints = capture.events("checkpoint")
    live_cpu = [c for c in cpu if c[0] >= live_from]
    cpu_s = live_cpu[-1][1] - live_cpu[0][1] if len(live_cpu) > 1 else None
    cpu_share = (cpu_s / (live_cpu[-1][0] - live_cpu[0][0])
                 if cpu_s is not None and live_cpu[-1][0] > live_cpu[0][0] else None)
    return {
        "exit_code": code,
        "startup_s": live_from - started,
        "seconds": reached - live_from,
        "wall_s": reached - started,
        "events_per_s": n / (reached - live_from),
        "wall_events_per_s": n / (reached - started),
        "checkpoints": checkpoints,
        "breakdown": breakdown.summary(reached - live_from),
        "spread": catch_up_spread(samples, ends),
        # the event loop thread's CPU over wall time while live (the rest: waiting)
        "loop_cpu_share": None if cpu_share is None else round(cpu_share, 3),
        # CPU of that thread per event while live: what the load of other work
        # changes least (it is not charged for time the thread waits or is preempted)
        "loop_cpu_us_per_event": None if cpu_s is None else round(cpu_s / n * 1e6, 2),
        # from the last record folded until the commit covering it was seen
        "commit_lag_s": None if processed_at is None else round(reached - processed_at, 3),
    }


def catch_up_spread(samples: list[dict[int, int]], ends: dict[int, int]) -> dict[str, Any]:
    """Fair progress (issue 10 item 8): per sample of the committed offsets taken
    while 10-90 % of the backlog was committed, the slowest partition's share of
    its end over the fastest's; 1.0 is perfectly even, 0 a partition not started."""
    total = sum(ends.values())
    spreads = []
    for s in samples:
        done = sum(s.values())
        if 0.1 * total <= done <= 0.9 * total:
            shares = [s[p] / ends[p] for p in ends if ends[p]]
            spreads.append(min(shares) / max(shares) if max(shares) else 1.0)
    if not spreads:
        return {"samples": 0, "min": None, "median": None}
    spreads.sort()
    return {"samples": len(spreads), "min": round(spreads[0], 3),
            "median": round(spreads[len(spreads) // 2], 3)}


async def replay_phase(
    app: App, settings: WorkerSettings, ends: dict[int, int], timeout_s: float
) -> dict[str, Any]:
    async def all_live(worker: Worker) -> bool:
        runners = list(worker.runners.values())
        return len(runners) == len(ends) and all(r.phase is Phase.LIVE for r in runners)

    _worker, capture, started, reached, code = await run_worker(
        app, settings, all_live, timeout_s)
    recovered = capture.events("recovery")
    replayed = sum(log_field(r, "replayed") for r in recovered)
    # Partitions restore one after another inside the rebalance callback and the
    # consumer fetches nothing until all are restored: replay begins at the last
    # "replaying offsets" line (the log's replay_s also counts that wait).
    starts = [r.created for r in capture.records if r.getMessage().split(": ", 1)[-1]
              .startswith("replaying offsets")]
    begin = max(starts) if starts else min(
        r.created - log_field(r, "replay_s") for r in recovered)
    end = max(r.created for r in recovered)
    # A rebalance in the middle (seen intermittently on a loaded machine) checkpoints
    # the partial replay on revocation; the replay after it starts from there.
    rebalances = sum(1 for r in capture.records if r.getMessage().startswith("revoked:"))
    return {
        "exit_code": code,
        "replayed": replayed,
        "rebalances": rebalances,
        "seconds": end - begin,
        "events_per_s": replayed / (end - begin) if end > begin else 0.0,
        "log_events_per_s": replayed / max(log_field(r, "replay_s") for r in recovered),
        "restore_s": begin - started,
        "wall_s": reached - started,
        "per_partition": {
            log_field(r, "partition"): {"replayed": log_field(r, "replayed"),
                                 "replay_s": round(log_field(r, "replay_s"), 3),
                                 "restore_s": round(log_field(r, "restore_s"), 3)}
            for r in recovered
        },
    }


def log_field(record: logging.LogRecord, name: str) -> Any:
    """An ``extra`` field of a worker log record."""
    return getattr(record, name)


def write_profile(profile: cProfile.Profile, target: str) -> None:
    buf = io.StringIO()
    stats = pstats.Stats(profile, stream=buf)
    stats.sort_stats("tottime").print_stats(30)
    stats.sort_stats("cumulative").print_stats(40)
    if target == "-":
        print(buf.getvalue(), file=sys.stderr)
    else:
        Path(target).write_text(buf.getvalue())
        print(f"profile of the live phase written to {target}", file=sys.stderr)
