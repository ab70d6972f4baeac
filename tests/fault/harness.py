"""Helpers of the fault tests: worker subprocesses and a background feeder
(the checks of their output, against the brute-force reference, are in
``tests/fault/checks.py``).

Every worker is a real ``python -m streamremat worker tests.fault.apps:app``
process with its own state dir (a separate machine) and one log file per run.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer

from streamremat.runtime.client import KafkaClientConfig
from streamremat.runtime.kafka import Target, delete_topics
from tests.expect import RefOperator
from tests.fault.apps import SCENARIOS

REPO = Path(__file__).resolve().parents[2]
APP_SPEC = "tests.fault.apps:app"

RECOVERED = re.compile(
    r"(?P<topic>\S+)\[(?P<partition>\d+)\]: recovered: checkpoint offset (?P<checkpoint>\S+), "
    r"committed offset (?:(?P<committed>\d+)|none \([^)]*?(?P<start>\d+)\)), "
    r"replayed (?P<replayed>\d+) records in "
    r"(?P<replay_s>[\d.]+) s \((?P<rate>\d+) records/s\), restore (?P<restore_s>[\d.]+) s "
    r"from (?P<source>[^\s,]+)(?P<unclean> after an unclean stop)?"
)


@dataclass(frozen=True)
class Recovery:
    """One ``recovered:`` log line of a worker."""

    worker: str
    run: int
    partition: int
    checkpoint_offset: int | None
    committed_offset: int
    replayed: int
    replay_s: float
    rate: float
    restore_s: float
    source: str
    unclean: bool


@dataclass
class FaultEnv:
    """One test's topics, names and directories. On a secured cluster ``bootstrap``
    is the client config and workers get ``--kafka-config kafka_config``."""

    bootstrap: Target
    source: str
    partitions: int
    app_name: str
    workdir: Path
    #: which App of ``tests/fault/apps.py`` the workers run
    scenario: str = "tumbling"
    workers: list[WorkerProc] = field(default_factory=list)
    kafka_config: Path | None = None
    #: the App the workers run (``MODULE:APP``)
    app_spec: str = APP_SPEC

    @property
    def operators(self) -> list[RefOperator]:
        return [op.reference(self.source) for op in SCENARIOS[self.scenario]]

    @property
    def sink(self) -> str:
        """The first operator's sink."""
        return self.operators[0].sink

    @property
    def dlq(self) -> str:
        """The first operator's dead-letter topic."""
        return self.operators[0].dead_letter_topic

    @property
    def group(self) -> str:
        return f"streamremat-{self.app_name}"

    @property
    def checkpoint_topic(self) -> str:
        return f"streamremat-{self.app_name}-checkpoints"

    def worker_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMREMAT_")}
        env.update(
            STREAMREMAT_FAULT_SOURCE=self.source,
            STREAMREMAT_FAULT_APP=self.app_name,
            STREAMREMAT_FAULT_SCENARIO=self.scenario,
            PYTHONUNBUFFERED="1",
            PYTHONPATH=str(REPO),
        )
        return env

    def worker(self, name: str, *extra: str, checkpoint_interval: float = 1.0) -> WorkerProc:
        w = WorkerProc(self, name, list(extra), checkpoint_interval)
        self.workers.append(w)
        return w

    def dump_logs(self, lines: int = 40) -> str:
        parts = []
        for w in self.workers:
            for i, path in enumerate(w.logs):
                text = path.read_text(errors="replace").splitlines() if path.exists() else []
                parts.append(f"----- worker {w.name} run {i} ({path}), last {lines} lines -----")
                parts.extend(text[-lines:])
        return "\n".join(parts)

    def recoveries(self) -> list[Recovery]:
        return [r for w in self.workers for r in w.recoveries()]

    async def cleanup(self) -> None:
        for w in self.workers:
            w.kill()
        with contextlib.suppress(Exception):
            await delete_topics(
                self.bootstrap,
                [t for op in self.operators for t in (op.sink, op.dead_letter_topic)]
                + [self.checkpoint_topic],
            )


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    """A worker must not outlive a killed pytest (Linux: PR_SET_PDEATHSIG)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)


class WorkerProc:
    """One simulated machine: a state dir, and a worker process per run."""

    def __init__(
        self, env: FaultEnv, name: str, extra: list[str], checkpoint_interval: float
    ) -> None:
        self.env = env
        self.name = name
        self.extra = extra
        self.checkpoint_interval = checkpoint_interval
        self.state_dir = env.workdir / f"state-{name}"
        self.logs: list[Path] = []
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def rocksdb_path(self) -> Path:
        return self.state_dir / f"{self.env.app_name}.rocksdb"

    def start(self) -> None:
        assert not self.running, f"worker {self.name} already runs"
        log = self.env.workdir / f"worker-{self.name}.run{len(self.logs)}.log"
        self.logs.append(log)
        connect = (["--kafka-config", str(self.env.kafka_config)] if self.env.kafka_config
                   else ["--bootstrap", KafkaClientConfig.of(self.env.bootstrap).bootstrap_servers])
        cmd = [
            sys.executable, "-m", "streamremat", "worker", self.env.app_spec, *connect,
            "--state-dir", str(self.state_dir),
            "--checkpoint-policy", "fixed",
            "--checkpoint-interval", str(self.checkpoint_interval),
            "--commit-interval", "0.2",
            "--session-timeout-ms", "3000",
            *self.extra,
        ]
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                cmd, cwd=REPO, env=self.env.worker_env(), stdout=out,
                stderr=subprocess.STDOUT, preexec_fn=_die_with_parent,
            )

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """kill -9 (no-op if not running)."""
        if self.running:
            assert self.proc is not None
            self.proc.kill()
            self.proc.wait(10)

    def signal(self, sig: int) -> None:
        assert self.proc is not None and self.running, f"worker {self.name} is not running"
        self.proc.send_signal(sig)

    async def stop(self, timeout_s: float = 30.0) -> tuple[int, float]:
        """SIGTERM; wait for the exit; return (exit code, seconds it took)."""
        assert self.proc is not None
        started = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        while self.proc.poll() is None:
            if time.monotonic() - started > timeout_s:
                self.kill()
                raise AssertionError(
                    f"worker {self.name} did not exit within {timeout_s} s of SIGTERM\n"
                    + self.env.dump_logs()
                )
            await asyncio.sleep(0.05)
        return self.proc.returncode, time.monotonic() - started

    def log_text(self, run: int = -1) -> str:
        path = self.logs[run]
        return path.read_text(errors="replace") if path.exists() else ""

    def recoveries(self, run: int | None = None) -> list[Recovery]:
        runs = range(len(self.logs)) if run is None else [run % len(self.logs)]
        found = []
        for i in runs:
            for m in RECOVERED.finditer(self.log_text(i)):
                ck = m["checkpoint"]
                found.append(Recovery(
                    worker=self.name, run=i, partition=int(m["partition"]),
                    checkpoint_offset=None if ck == "None" else int(ck),
                    committed_offset=int(m["committed"] or m["start"]),
                    replayed=int(m["replayed"]),
                    replay_s=float(m["replay_s"]), rate=float(m["rate"]),
                    restore_s=float(m["restore_s"]), source=m["source"],
                    unclean=bool(m["unclean"]),
                ))
        return found

    def owned(self, run: int = -1, live: bool = True) -> set[int]:
        """The source partitions this run owns now (``live``: and has recovered), from
        its assigned / recovered / revoked / fenced log lines."""
        assigned: set[int] = set()
        recovered: set[int] = set()
        topic = re.escape(self.env.source)
        for line in self.log_text(run).splitlines():
            if "streamremat.worker: " not in line:
                continue
            parts = {int(p) for p in re.findall(topic + r"\[(\d+)\]", line)}
            if "streamremat.worker: assigned: " in line:
                assigned |= parts
            elif ": recovered: " in line:
                recovered |= parts
            elif ("streamremat.worker: revoked: " in line or "fenced by a newer owner" in line
                  or "; backing off " in line):
                assigned -= parts
                recovered -= parts
        return assigned & recovered if live else assigned

    async def wait_for(self, predicate: Any, timeout_s: float = 60.0, what: str = "") -> None:
        """Wait until ``predicate(self)`` holds; fail if the worker exits first."""
        deadline = time.monotonic() + timeout_s
        while not predicate(self):
            if not self.running:
                raise AssertionError(
                    f"worker {self.name} exited ({self.proc and self.proc.returncode}) while "
                    f"waiting for {what}\n" + self.env.dump_logs()
                )
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"worker {self.name}: no {what} within {timeout_s} s\n" + self.env.dump_logs()
                )
            await asyncio.sleep(0.1)

    async def wait_live(self, partitions: int | None = None, timeout_s: float = 60.0) -> None:
        """Wait until this run owns ``partitions`` recovered partitions (default 1)."""
        need = partitions or 1
        await self.wait_for(
            lambda w: len(w.owned()) >= need, timeout_s, f"{need} live partition(s)"
        )


# -- input -----------------------------------------------------------------------


class Feeder:
    """Deterministic input: per partition, keys ``k0..``, values ``{"x": int}``,
    event time advancing ``step_ms`` per record from a base near now (with a little
    disorder, so some records are late), plus optional malformed records."""

    def __init__(
        self,
        bootstrap: Target,
        topic: str,
        partitions: int,
        *,
        seed: int,
        keys: int = 20,
        step_ms: int = 1,
        jitter_ms: int = 20,
        bad_every: int | None = None,
    ) -> None:
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.rng = random.Random(seed)
        self.keys, self.step_ms, self.jitter_ms = keys, step_ms, jitter_ms
        self.bad_every = bad_every
        # Near now: a 1970 timestamp would be deleted by the broker's retention.
        self.base_ms = int(time.time() * 1000) - 15 * 60 * 1000
        self.count = [0] * partitions
        self.sent = 0
        self.bad_sent = 0
        #: ``produce`` waits while ``sent >= limit`` (None: no limit), so a test can
        #: hold the stream until a slow restart is done instead of racing it
        self.limit: int | None = None

    def _record(self, p: int) -> tuple[bytes | None, bytes, int]:
        rng = self.rng
        i = self.count[p]
        self.count[p] += 1
        ts = self.base_ms + i * self.step_ms - rng.randint(0, self.jitter_ms)
        key: bytes | None = b"k%d" % rng.randrange(self.keys)
        value = b'{"x": %d}' % rng.randint(-50, 100)
        if self.bad_every and rng.randrange(self.bad_every) == 0:
            self.bad_sent += 1
            kind = rng.randrange(3)
            if kind == 0:
                value = b"not json {"
            elif kind == 1:
                value = b'{"y": 1}'  # no field x
            else:
                key = None
        return key, value, ts

    def chunk(self, n: int) -> list[tuple[bytes | None, bytes, int, int]]:
        """``n`` records round-robin over the partitions: (key, value, ts, partition)."""
        out = []
        for j in range(n):
            p = (self.sent + j) % self.partitions
            key, value, ts = self._record(p)
            out.append((key, value, ts, p))
        self.sent += n
        return out

    async def produce(self, total: int, chunk: int, interval_s: float) -> None:
        """Send ``total`` records in chunks, one chunk every ``interval_s``."""
        producer = AIOKafkaProducer(
            acks="all", enable_idempotence=True,
            **KafkaClientConfig.of(self.bootstrap).producer_kwargs(
                linger_ms=5, max_batch_size=256 * 1024
            ),
        )
        await producer.start()
        try:
            remaining = total
            while remaining > 0:
                while self.limit is not None and self.sent >= self.limit:
                    await asyncio.sleep(0.05)
                started = time.monotonic()
                n = min(chunk, remaining)
                futures = [
                    await producer.send(self.topic, value=v, key=k, partition=p, timestamp_ms=ts)
                    for k, v, ts, p in self.chunk(n)
                ]
                await asyncio.gather(*futures)
                remaining -= n
                await asyncio.sleep(max(0.0, interval_s - (time.monotonic() - started)))
        finally:
            await producer.stop()


def recovery_summary(recoveries: Iterable[Recovery]) -> str:
    rs = list(recoveries)
    replays = [r for r in rs if r.replayed > 0]
    if not rs:
        return "no recoveries"
    restore = sorted(r.restore_s for r in rs)
    total = sum(r.replayed for r in replays)
    secs = sum(r.replay_s for r in replays)
    return (
        f"{len(rs)} recoveries ({len(replays)} with replay); restore s median "
        f"{restore[len(restore) // 2]:.3f} max {restore[-1]:.3f}; replayed total {total} "
        f"max {max((r.replayed for r in rs), default=0)}; replay rate "
        f"{(total / secs if secs else 0):.0f} records/s; sources "
        f"{dict(Counter(r.source for r in rs))}"
    )
