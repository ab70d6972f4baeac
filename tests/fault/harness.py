"""Helpers of the fault tests: worker subprocesses, a background feeder, the
failure-free expectation and the comparison of outputs as multisets.

Every worker is a real ``python -m streamremat worker tests.fault.apps:app``
process with its own state dir (a separate machine) and one log file per run.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import (
    CoordinatorLoadInProgressError,
    GroupCoordinatorNotAvailableError,
    NotCoordinatorError,
)

from streamremat.core.records import Record
from streamremat.core.task import Task
from streamremat.runtime.client import KafkaClientConfig
from streamremat.runtime.kafka import (
    ConsumedRecord,
    Target,
    admin_client,
    consume_all,
    delete_topics,
    end_offsets,
)
from tests.fault.apps import OPERATOR, WINDOW_MS, make_operator
from tests.unit.reference import RefWindow, run_reference

REPO = Path(__file__).resolve().parents[2]
APP_SPEC = "tests.fault.apps:app"

#: A result as compared: (key bytes, start_ms, end_ms, canonical JSON of the value).
Result = tuple[bytes, int, int, str]

RECOVERED = re.compile(
    r"(?P<topic>\S+)\[(?P<partition>\d+)\]: recovered: checkpoint offset (?P<checkpoint>\S+), "
    r"committed offset (?:(?P<committed>\d+)|none \([^)]*?(?P<start>\d+)\)), "
    r"replayed (?P<replayed>\d+) records in "
    r"(?P<replay_s>[\d.]+) s \((?P<rate>\d+) records/s\), restore (?P<restore_s>[\d.]+) s "
    r"from (?P<source>\S+)(?P<unclean> after an unclean stop)?"
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
    workers: list[WorkerProc] = field(default_factory=list)
    kafka_config: Path | None = None

    @property
    def sink(self) -> str:
        return f"{self.source}-out"

    @property
    def dlq(self) -> str:
        return f"{self.source}.{OPERATOR}.dlq"

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
            STREAMREMAT_FAULT_SINK=self.sink,
            STREAMREMAT_FAULT_APP=self.app_name,
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
            await delete_topics(self.bootstrap, [self.sink, self.dlq, self.checkpoint_topic])


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
            sys.executable, "-m", "streamremat", "worker", APP_SPEC, *connect,
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
                  or "Kafka step failed" in line):
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


# -- expectation and comparison ------------------------------------------------------


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


async def read_source(env: FaultEnv) -> dict[int, list[Record]]:
    records = await consume_all(
        env.bootstrap, env.source, isolation_level="read_uncommitted", timeout_s=120
    )
    by_partition: dict[int, list[Record]] = {p: [] for p in range(env.partitions)}
    for r in records:
        by_partition[r.partition].append(
            Record(r.key, r.value, r.timestamp_ms, r.offset, r.headers)
        )
    return by_partition


@dataclass
class Expected:
    results: Counter[Result]
    #: "topic/partition/offset" -> dead-letter reason
    dead_letters: dict[str, str]


def failure_free(env: FaultEnv, source: dict[int, list[Record]]) -> Expected:
    """What one failure-free task per partition emits for the whole input."""
    op = make_operator(env.source, env.sink)
    results: Counter[Result] = Counter()
    dead: dict[str, str] = {}
    for p, records in source.items():
        out = Task(op, p).process(records)
        results.update((r.key, r.start_ms, r.end_ms, _canon(r.value)) for r in out.results)
        for d in out.dead_letters:
            dead[f"{env.source}/{p}/{d.record.offset}"] = d.reason
    return Expected(results, dead)


def reference_results(source: dict[int, list[Record]]) -> Counter[Result]:
    """What tests.fault.apps' operator must emit, from the brute-force reference."""
    out: Counter[Result] = Counter()
    for records in source.values():
        ref = run_reference(
            RefWindow("tumbling", WINDOW_MS),
            [(r.key or b"", r.timestamp, json.loads(r.value)) for r in records],
            lambda items: {"n": len(items), "total": sum(i["x"] for i in items)},
        )
        out.update((k, s, e, _canon(v)) for k, s, e, v in ref.emissions)
    return out


async def read_results(env: FaultEnv) -> Counter[Result]:
    records = await consume_all(env.bootstrap, env.sink, isolation_level="read_committed",
                                timeout_s=120)
    out: Counter[Result] = Counter()
    for r in records:
        v = json.loads(r.value or b"null")
        out[(r.key or b"", v["start_ms"], v["end_ms"], _canon(v["value"]))] += 1
    return out


async def read_dead_letters(env: FaultEnv) -> list[ConsumedRecord]:
    return await consume_all(env.bootstrap, env.dlq, isolation_level="read_committed",
                             timeout_s=60)


def assert_same_results(actual: Counter[Result], expected: Counter[Result], logs: str) -> None:
    if actual == expected:
        return
    missing = expected - actual
    extra = actual - expected
    dup = {k: n for k, n in actual.items() if n > 1}
    lines = [
        f"sink differs from the failure-free run: expected {sum(expected.values())} results, "
        f"got {sum(actual.values())}; missing {sum(missing.values())}, "
        f"unexpected {sum(extra.values())}, duplicated keys {len(dup)}",
        "missing (first 10): " + repr(sorted(missing)[:10]),
        "unexpected (first 10): " + repr(sorted(extra)[:10]),
        logs,
    ]
    raise AssertionError("\n".join(lines))


async def committed_offsets(env: FaultEnv) -> dict[int, int]:
    for attempt in range(20):
        try:
            async with admin_client(env.bootstrap) as admin:
                offsets = await admin.list_consumer_group_offsets(env.group)
            break
        except (GroupCoordinatorNotAvailableError, NotCoordinatorError,
                CoordinatorLoadInProgressError):
            # The offsets topic is still being created, or its leader just moved.
            if attempt == 19:
                raise
            await asyncio.sleep(0.5)
    return {tp.partition: om.offset for tp, om in offsets.items() if tp.topic == env.source}


async def wait_caught_up(
    env: FaultEnv, alive: Sequence[WorkerProc], timeout_s: float = 120.0
) -> float:
    """Wait until the group committed the source's end offset on every partition;
    return how long that took. Fails early if a worker in ``alive`` exits."""
    started = time.monotonic()
    ends = await end_offsets(env.bootstrap, env.source)
    while True:
        committed = await committed_offsets(env)
        if all(committed.get(p, -1) >= end for p, end in ends.items()):
            return time.monotonic() - started
        for w in alive:
            if not w.running:
                raise AssertionError(f"worker {w.name} exited while catching up\n"
                                     + env.dump_logs())
        if time.monotonic() - started > timeout_s:
            raise AssertionError(
                f"not caught up after {timeout_s} s: committed {committed}, end {ends}\n"
                + env.dump_logs()
            )
        await asyncio.sleep(0.25)


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
