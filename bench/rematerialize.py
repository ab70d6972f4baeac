"""Store vs recompute vs auto (issue 14's benchmark): the real broker, and the simulator.

Two jobs (``bench/_remat_app.py``): exact p50/p99 per key per 10-minute tumbling
window over 10k keys, and ``Collect`` per user session. For each of
``rematerialize="store"``, ``"recompute"`` and ``"auto"``, one worker
subprocess (``python -m streamremat worker``, exactly-once, fixed checkpoint
interval, local checkpoints) reads a source fed at a steady rate with event time
= wall time, and is killed with SIGKILL at seeded random moments and restarted
on the same state dir. Measured per job and mode, from the workers' logs:

* checkpoint bytes per second: payload bytes of every checkpoint / wall time;
* checkpoint overhead: time spent writing checkpoints / wall time, in % of one
  core (the capacity a worker loses to checkpoints);
* recovery after kill -9, median over the kills: ``engine_s`` = restore +
  replay of the slowest partition (the recovered log line), and ``wall_s`` =
  from the kill until every partition is live again in the new process
  (includes process start and the group's session timeout, 3 s here).

The simulator half is ``bench/remat_sweep.py``'s sweep of lambda and the RTO,
run here as is (``--sweep-hours``), with its goal checks.

Until the engine has the ``rematerialize=`` option, every mode runs as store;
the summary says so (``mode_applied``).

Usage: python bench/rematerialize.py [--small] [--kills 5] [--bootstrap HOST:PORT]
The last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench._kafka import bench_broker
from bench.remat_sweep import sweep

ROOT = Path(__file__).resolve().parents[1]
MODES = ("store", "recompute", "auto")
JOBS = ("quantiles", "sessions")
PARTITIONS = 2
SESSION_TIMEOUT_MS = 3000
RECOVERY_TIMEOUT_S = 90.0

CHECKPOINT = re.compile(r"checkpoint seq \d+ \w+ at offset \d+: (?P<bytes>\d+) bytes in "
                        r"(?P<ms>[\d.]+) ms")
RECOVERED = re.compile(r"\[(?P<p>\d+)\]: recovered: .*?replayed (?P<replayed>\d+) records in "
                       r"(?P<replay_s>[\d.]+) s .*?restore (?P<restore_s>[\d.]+) s")


@dataclass(frozen=True)
class Size:
    rate_eps: int
    keys: int
    kills: int
    warmup_s: float
    gap_s: tuple[float, float]  # a kill lands uniformly this long after going live
    interval_s: float


FULL = Size(rate_eps=2_000, keys=10_000, kills=5, warmup_s=20.0, gap_s=(4.0, 12.0),
            interval_s=5.0)
SMALL = Size(rate_eps=200, keys=200, kills=1, warmup_s=1.0, gap_s=(0.5, 1.0), interval_s=1.0)


@dataclass
class Run:
    """One job under one mode: its worker's runs (one log per process)."""

    job: str
    mode: str
    bootstrap: str
    work: Path
    size: Size
    source: str = field(default_factory=lambda: f"remat-bench-{uuid.uuid4().hex[:8]}")
    logs: list[Path] = field(default_factory=list)
    proc: subprocess.Popen[bytes] | None = None

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMREMAT_")}
        env.update(REMAT_BENCH_SOURCE=self.source, REMAT_BENCH_APP=self.source,
                   REMAT_BENCH_JOB=self.job, REMAT_BENCH_MODE=self.mode,
                   PYTHONUNBUFFERED="1", PYTHONPATH=str(ROOT))
        return env

    def start(self) -> None:
        log = self.work / f"{self.job}-{self.mode}.run{len(self.logs)}.log"
        self.logs.append(log)
        cmd = [sys.executable, "-m", "streamremat", "worker", "bench._remat_app:app",
               "--bootstrap", self.bootstrap, "--state-dir", str(self.work / "state"),
               "--checkpoint-policy", "fixed",
               "--checkpoint-interval", str(self.size.interval_s),
               "--commit-interval", "0.5", "--session-timeout-ms", str(SESSION_TIMEOUT_MS),
               "--no-replica"]
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(cmd, cwd=ROOT, env=self.env(), stdout=out,
                                         stderr=subprocess.STDOUT)

    def text(self, run: int = -1) -> str:
        path = self.logs[run]
        return path.read_text(errors="replace") if path.exists() else ""

    def recovered(self, run: int = -1) -> dict[int, float]:
        """Partition -> restore + replay seconds, for the partitions this run recovered."""
        return {int(m["p"]): float(m["restore_s"]) + float(m["replay_s"])
                for m in RECOVERED.finditer(self.text(run))}

    async def wait_live(self, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while len(self.recovered()) < PARTITIONS:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker exited {self.proc.returncode}:\n{self.text()[-3000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"not live in {timeout_s} s:\n{self.text()[-3000:]}")
            await asyncio.sleep(0.05)


async def feed(bootstrap: str, topic: str, size: Size, stop: asyncio.Event, seed: int) -> int:
    """Records at ``size.rate_eps``, event time = now, random keys and values."""
    rng = random.Random(seed)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, acks="all")
    await producer.start()
    sent, tick = 0, 0.1
    try:
        while not stop.is_set():
            started = time.monotonic()
            now_ms = int(time.time() * 1000)
            batch = max(1, int(size.rate_eps * tick))
            for _ in range(batch):
                key = b'"u%d"' % rng.randrange(size.keys)
                value = b'{"x": %.3f}' % rng.lognormvariate(3.0, 1.0)
                await producer.send(topic, value, key=key, timestamp_ms=now_ms)
            sent += batch
            await asyncio.sleep(max(0.0, tick - (time.monotonic() - started)))
        await producer.flush()
    finally:
        await producer.stop()
    return sent


async def make_topic(bootstrap: str, topic: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        # Unlimited retention: the planner then decides on costs and the RTO alone
        # (retention is the simulator's to sweep). With a finite one, the worker's
        # retention bound knows no offset older than its own start, so every window
        # open across a restart is forced to store until it closes.
        await admin.create_topics([NewTopic(topic, PARTITIONS, 1,
                                            topic_configs={"retention.ms": "-1"}),
                                   NewTopic(f"{topic}-out", PARTITIONS, 1)])
    finally:
        await admin.close()


async def run_one(run: Run, seed: int) -> dict[str, Any]:
    """Feed, kill -9 at random moments, restart; then the figures from the logs."""
    rng = random.Random(seed)
    await make_topic(run.bootstrap, run.source)
    stop = asyncio.Event()
    feeding = asyncio.create_task(feed(run.bootstrap, run.source, run.size, stop, seed))
    t0 = time.monotonic()
    wall: list[float] = []
    engine: list[float] = []
    missed: list[float] = []
    try:
        run.start()
        await run.wait_live()
        await asyncio.sleep(run.size.warmup_s)
        for _ in range(run.size.kills):
            await asyncio.sleep(rng.uniform(*run.size.gap_s))
            assert run.proc is not None
            killed = time.monotonic()
            run.proc.send_signal(signal.SIGKILL)
            run.proc.wait(10)
            run.start()
            try:
                await run.wait_live(RECOVERY_TIMEOUT_S)
            except TimeoutError:  # a recovery that does not finish is a figure too
                missed.append(round(time.monotonic() - killed, 1))
                break
            wall.append(time.monotonic() - killed)
            engine.append(max(run.recovered().values()))
        await asyncio.sleep(run.size.gap_s[0])
    finally:
        stop.set()
        sent = await feeding
        assert run.proc is not None
        run.proc.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(run.proc.wait, 60)
    elapsed = time.monotonic() - t0
    ck = [m for i in range(len(run.logs)) for m in CHECKPOINT.finditer(run.text(i))]
    written = sum(int(m["bytes"]) for m in ck)
    busy_ms = sum(float(m["ms"]) for m in ck)
    return {
        "records": sent, "seconds": round(elapsed, 1), "checkpoints": len(ck),
        "checkpoint_bytes_per_s": round(written / elapsed),
        "checkpoint_overhead_pct": round(100 * busy_ms / 1000 / elapsed, 3),
        "kills": len(wall) + len(missed),
        "recovery_engine_s_median": round(statistics.median(engine), 3) if engine else None,
        "recovery_wall_s_median": round(statistics.median(wall), 3) if wall else None,
        "recovery_engine_s": [round(x, 3) for x in engine],
        "recovery_wall_s": [round(x, 3) for x in wall],
        #: kills after which the worker was not live within RECOVERY_TIMEOUT_S
        "recovery_not_finished_after_s": missed,
        "exit_code": code,
    }


def mode_applied() -> bool:
    proc = subprocess.run([sys.executable, "-c", "import bench._remat_app as a; "
                           "print(a.MODE_APPLIED)"], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True)
    return proc.stdout.strip() == "True"


async def real_broker(args: argparse.Namespace, size: Size, work: Path) -> dict[str, Any]:
    """Every job under every mode; ``--parallel`` runs them all at once (CI: the
    harness is what is tested there, not the figures)."""
    out: dict[str, Any] = {job: {} for job in args.jobs}
    async with bench_broker(args.bootstrap, work) as bootstrap:

        async def one(j: int, job: str, m: int, mode: str) -> None:
            run = Run(job, mode, bootstrap, work / f"{job}-{mode}", size)
            run.work.mkdir(parents=True)
            figures = out[job][mode] = await run_one(run, seed=args.seed + 10 * j + m)
            print(f"{job:>9} {mode:>9}: {figures['checkpoint_bytes_per_s']:>10,} B/s "
                  f"checkpoints, overhead {figures['checkpoint_overhead_pct']:.2f} %, "
                  f"recovery median {figures['recovery_engine_s_median']} s engine / "
                  f"{figures['recovery_wall_s_median']} s wall over {figures['kills']} "
                  "kills", file=sys.stderr)

        runs = [(j, job, m, mode) for j, job in enumerate(args.jobs)
                for m, mode in enumerate(args.modes)]
        if args.parallel:
            await asyncio.gather(*(one(*r) for r in runs))
        else:
            for r in runs:
                await one(*r)
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true",
                    help="CI size: 200 records/s, 200 keys, 1 kill, the 2x2 sweep")
    ap.add_argument("--kills", type=int, default=None)
    ap.add_argument("--bootstrap", default=None)
    ap.add_argument("--work-dir", default=None)
    ap.add_argument("--jobs", nargs="+", default=list(JOBS), choices=JOBS)
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    ap.add_argument("--sweep-hours", type=float, default=4.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--parallel", action=argparse.BooleanOptionalAction, default=None,
                    help="run every job and mode at once (default: with --small)")
    args = ap.parse_args(argv)
    if args.parallel is None:
        args.parallel = args.small
    size = SMALL if args.small else FULL
    if args.kills is not None:
        size = Size(**{**size.__dict__, "kills": args.kills})
    started = time.perf_counter()
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="remat-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    real = asyncio.run(real_broker(args, size, work))
    if args.small:
        simulated = sweep(1.0, [1 / 600, 1 / 86_400], [30.0, 600.0])
    else:
        lams = [1 / (h * 3600) for h in (0.1, 0.5, 1, 4, 24, 168)]
        simulated = sweep(args.sweep_hours, lams, [15.0, 30.0, 60.0, 120.0, 600.0])
    summary = {
        "bench": "rematerialize", "small": args.small, "mode_applied": mode_applied(),
        "size": size.__dict__, "partitions": PARTITIONS, "parallel": args.parallel,
        "real_broker": real,
        "simulator": simulated, "runtime_s": round(time.perf_counter() - started, 1),
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
