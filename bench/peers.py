"""streamremat side by side with the engines users would pick instead (issue 7).

The same job everywhere: a 60 s tumbling window (grace 0) with count and sum of
``amount`` per key, over one JSON input topic with 4 partitions, run by

* ``raw``: plain aiokafka consumption + the job in a dict: the ceiling (no state
  durability, no outputs, no recovery);
* ``streamremat``: ``python -m streamremat worker`` with exactly-once and
  ``--checkpoint-policy fixed --checkpoint-interval 10``;
* ``quix``: Quix Streams, RocksDB state with changelog topics, exactly-once;
* ``faust``: faust-streaming, windowed Table with a changelog, RocksDB (rocksdict)
  store, exactly-once.

Each engine runs as its own process (the peers from ``.venv-peers``, made by
``--setup`` from ``bench/peers/requirements.txt``). All engines commit every
``--commit-interval`` seconds (0.5, streamremat's default), so output latency is
the same everywhere. Measured per key count, repetitions interleaved:

* throughput: events/s between the first and the last commit of the group's
  offsets, on the big topic (a run stops after ``--cap-seconds``; then the rate
  over what it did);
* state-durability bytes: the engine's changelog or checkpoint topics on the
  broker's disk (the harness's own broker runs with the log cleaner off, so disk
  = bytes written) plus its local state directory;
* recovery and cross-check, on a smaller topic per run: process it to the end,
  read the final window results, ``kill -9``, append a few records, restart, and
  time until the committed offsets cover them (recovery = restart to caught up);
  the results must equal the reference computed by ``raw``.

``--job rekeyed`` runs the same aggregation per the value's ``shop`` field, which
is not the record key, so every engine re-keys through a repartition topic
(streamremat ``key_by``, Quix ``group_by``, faust ``group_by``) with a grace
covering the whole input (a backlog's source partitions interleave in the
repartition topic in any order); its state bytes include the repartition
topics, and the cross-check closes every window with one record per shop far
ahead and compares with the reference computed per shop over all records.

Usage::

    python bench/peers.py --setup                # make .venv-peers
    python bench/peers.py [--events 1000000] [--keys 1000,100000] [--reps 3]
    python bench/peers.py --small                # CI: 20k events, 1 rep

Without ``--bootstrap`` a dev broker is started under ``--work-dir``. The last
line of stdout is a JSON summary.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import contextlib
import json
import os
import platform
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from streamremat.dev.broker import BrokerConfig, DevBroker, free_port_pair  # noqa: E402
from streamremat.runtime.kafka import (  # noqa: E402
    TopicSpec,
    admin_client,
    consume_all,
    create_topics,
    delete_topics,
    end_offsets,
    list_topics,
    produce,
)

JOBS = ROOT / "bench" / "peers"
PEERS_VENV = ROOT / ".venv-peers"
MAIN_PY = sys.executable
PARTITIONS = 4
WINDOW_MS = 60_000
#: the re-keyed job's grace: more than the 10 windows the input spans
REKEY_GRACE_MS = 12 * WINDOW_MS
ENGINES = ("raw", "streamremat", "quix", "faust")
PEER_MODULES = {"quix": "quixstreams", "faust": "faust"}
SMALL_EVENTS = 20_000

Windows = dict[tuple[str, int], tuple[int, int]]  # (key, start_ms) -> (count, sum)


# -- setup ---------------------------------------------------------------------


def peers_python() -> Path:
    return PEERS_VENV / "bin" / "python"


def setup_peers() -> None:
    """Create .venv-peers and install the pinned peers into it (PyPI only)."""
    if not peers_python().exists():
        subprocess.run([sys.executable, "-m", "venv", str(PEERS_VENV)], check=True)
    subprocess.run(
        [str(peers_python()), "-m", "pip", "install", "-q", "-r", str(JOBS / "requirements.txt")],
        check=True,
    )


def peer_status(engine: str) -> str | None:
    """None if the peer can run, else why not."""
    if engine not in PEER_MODULES:
        return None
    if not peers_python().exists():
        return "not installed (run bench/peers.py --setup)"
    probe = subprocess.run(
        [str(peers_python()), "-c", f"import {PEER_MODULES[engine]}"],
        capture_output=True, text=True,
    )
    if probe.returncode != 0:
        return f"not importable: {probe.stderr.strip().splitlines()[-1:]}"
    return None


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    import aiokafka

    import streamremat

    out["streamremat"] = streamremat.__version__
    out["aiokafka"] = aiokafka.__version__
    if peers_python().exists():
        probe = subprocess.run(
            [str(peers_python()), "-m", "pip", "list", "--format", "json"],
            capture_output=True, text=True,
        )
        wanted = {"quixstreams", "faust-streaming", "rocksdict", "confluent-kafka", "aiokafka"}
        with contextlib.suppress(ValueError):
            for row in json.loads(probe.stdout or "[]"):
                if row["name"].lower() in wanted:
                    out[f"peers:{row['name'].lower()}"] = row["version"]
    return out


# -- broker --------------------------------------------------------------------


class BenchBroker(DevBroker):
    """The dev broker with the log cleaner off: compacted topics keep every byte
    written, so their size on disk is what the engine wrote."""

    def _write_config(self) -> None:
        super()._write_config()
        with self.config.properties_file.open("a") as f:
            f.write("\nlog.cleaner.enable=false\n")


# -- data ----------------------------------------------------------------------


def make_events(n: int, n_keys: int, base_ms: int, seed: int = 7,
                rekey: bool = False) -> list[tuple[Any, ...]]:
    """``n`` records over ``n_keys`` JSON-string keys; timestamps increasing, spread
    over at least 10 windows and ending at ``base_ms`` (recent: the broker's
    retention would delete old segments). ``rekey``: values also carry a ``shop``
    (``n_keys`` of them) drawn independently of the record key."""
    rng = random.Random(seed)
    keys = [json.dumps(f"u{i}").encode() for i in range(n_keys)]
    out = []
    step = max(1, 10 * WINDOW_MS // n)
    start = base_ms - n * step
    for i in range(n):
        k = rng.randrange(n_keys)
        value = f'{{"amount":{rng.randrange(1000)},"page":"/p/{i % 50}","user":"u{k}"}}'
        if rekey:
            value = value[:-1] + f',"shop":"s{rng.randrange(n_keys)}"}}'
        out.append((keys[k], value.encode(), start + i * step, None, ()))
    return out


def closers(events: list[tuple[Any, ...]], ts: int) -> list[tuple[Any, ...]]:
    """One record per shop of ``events`` at ``ts`` (re-keyed job)."""
    shops = sorted({json.loads(e[1])["shop"] for e in events})
    return [(json.dumps(shop).encode(),
             json.dumps({"amount": 0, "page": "/p/0", "user": "x", "shop": shop}).encode(),
             ts, None, ()) for shop in shops]


async def new_input_topic(bootstrap: str, name: str, events: list[tuple[Any, ...]]) -> None:
    await create_topics(bootstrap, [TopicSpec(name, PARTITIONS, {"retention.ms": "-1"})])
    await produce(bootstrap, name, events, linger_ms=20)


# -- measuring -----------------------------------------------------------------


async def committed(admin: Any, group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets on ``topic``; {} while the group has no coordinator."""
    try:
        offsets = await admin.list_consumer_group_offsets(group)
    except Exception:  # coordinator not there yet, group unknown: nothing committed
        return {}
    return {tp.partition: om.offset for tp, om in offsets.items()
            if tp.topic == topic and om.offset >= 0}


def dir_bytes(path: Path) -> int:
    total = 0
    for p in path.rglob("*"):
        with contextlib.suppress(OSError):
            if p.is_file():
                total += p.stat().st_size
    return total


async def topic_bytes(bootstrap: str, topic: str, log_dir: Path | None) -> tuple[int, int, str]:
    """(bytes, records written, method) of one topic."""
    ends = await end_offsets(bootstrap, topic)
    if log_dir is not None and log_dir.is_dir():
        size = sum(dir_bytes(d) - _index_bytes(d) for d in log_dir.glob(f"{topic}-*")
                   if re.fullmatch(re.escape(topic) + r"-\d+", d.name))
        return size, sum(ends.values()), "broker log segments"
    records = await consume_all(bootstrap, topic, isolation_level="read_uncommitted",
                                timeout_s=300)
    size = sum(len(r.key or b"") + len(r.value or b"")
               + sum(len(k) + len(v) for k, v in r.headers) for r in records)
    return size, sum(ends.values()), "record keys+values (no broker log dir)"


def _index_bytes(d: Path) -> int:
    return sum(p.stat().st_size for p in d.iterdir()
               if p.suffix in (".index", ".timeindex", ".txnindex"))


def state_topics(engine: str, group: str, topics: list[str]) -> list[str]:
    """The engine's internal topics: changelogs or checkpoints, and repartition topics."""
    if engine == "streamremat":
        return [t for t in topics if t in (f"streamremat-{group}-checkpoints",
                                           f"streamremat-{group}-win-repartition")]
    if engine == "quix":
        return [t for t in topics if t.startswith((f"changelog__{group}",
                                                   f"repartition__{group}"))]
    if engine == "faust":
        return [t for t in topics if t.startswith(f"{group}-")
                and t.endswith(("-changelog", "-repartition"))]
    return []


# -- engines -------------------------------------------------------------------


@dataclass
class Run:
    engine: str
    bootstrap: str
    topic: str
    group: str
    state_dir: Path
    log_path: Path
    commit_interval: float
    checkpoint_interval: float
    rekey: bool = False
    proc: subprocess.Popen[bytes] | None = None
    logs: list[Path] = field(default_factory=list)

    @property
    def output(self) -> str:
        return f"{self.group}-out"

    def command(self) -> tuple[list[str], dict[str, str], Path]:
        env = dict(os.environ, PEERS_GROUP_BY="shop" if self.rekey else "",
                   PEERS_GRACE_MS=str(REKEY_GRACE_MS if self.rekey else 0))
        if self.engine == "streamremat":
            env.update(PEERS_INPUT=self.topic, PEERS_OUTPUT=self.output, PEERS_APP=self.group)
            cmd = [
                MAIN_PY, "-m", "streamremat", "worker", "streamremat_job:app",
                "--bootstrap", self.bootstrap, "--group-id", self.group,
                "--state-dir", str(self.state_dir), "--guarantee", "exactly_once",
                "--checkpoint-policy", "fixed",
                "--checkpoint-interval", str(self.checkpoint_interval),
                "--commit-interval", str(self.commit_interval),
            ]
            return cmd, env, JOBS
        script = {"quix": "quix_job.py", "faust": "faust_job.py"}[self.engine]
        cmd = [str(peers_python()), str(JOBS / script), self.bootstrap, self.topic, self.output,
               self.group, str(self.state_dir), str(self.commit_interval)]
        return cmd, env, self.state_dir

    def start(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        cmd, env, cwd = self.command()
        log = self.log_path.with_suffix(f".{len(self.logs)}.log")
        self.logs.append(log)
        with log.open("wb") as f:
            self.proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=f, stderr=subprocess.STDOUT,
                                         start_new_session=True)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.proc = None

    def check_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            tail = self.logs[-1].read_text(errors="replace")[-3000:]
            raise RuntimeError(f"{self.engine} exited with {self.proc.returncode}:\n{tail}")

    async def wait_for(self, target: dict[int, int], cap_s: float) -> dict[str, Any]:
        """Poll the group's committed offsets until they reach ``target``."""
        started = time.monotonic()
        total = sum(target.values())
        async with admin_client(self.bootstrap) as admin:
            return await self._poll(admin, target, cap_s, started, total)

    async def _poll(self, admin: Any, target: dict[int, int], cap_s: float, started: float,
                    total: int) -> dict[str, Any]:
        first: tuple[float, int] | None = None
        last: tuple[float, int] = (started, 0)
        while True:
            self.check_alive()
            now_c = await committed(admin, self.group, self.topic)
            now = time.monotonic()
            done = sum(min(now_c.get(p, 0), end) for p, end in target.items())
            if done > 0 and first is None:
                first = (now, done)
            if done != last[1]:
                last = (now, done)
            if all(now_c.get(p, 0) >= end for p, end in target.items()):
                return {"done": done, "total": total, "capped": False, "first": first,
                        "last": last, "started": started}
            if now - started > cap_s:
                return {"done": done, "total": total, "capped": True, "first": first,
                        "last": last, "started": started}
            await asyncio.sleep(0.1)


def throughput_of(w: dict[str, Any]) -> float | None:
    first, last = w["first"], w["last"]
    if first is None:
        return None
    if last[0] <= first[0]:
        # Everything committed at once (a small run): the rate since the process
        # started, start-up included, is all that can be said.
        elapsed = float(last[0] - w["started"])
        return float(last[1]) / elapsed if elapsed > 0 else None
    return float(last[1] - first[1]) / float(last[0] - first[0])


# -- results -------------------------------------------------------------------


async def engine_windows(run: Run) -> Windows:
    """The final window results an engine produced so far."""
    if run.engine == "faust":
        return await faust_windows(run)
    out: Windows = {}
    for r in await consume_all(run.bootstrap, run.output, isolation_level="read_committed",
                               timeout_s=120):
        v = json.loads(r.value or b"null")
        key = _plain_key((r.key or b"").decode())
        if run.engine == "streamremat":
            start, count, total = v["start_ms"], v["value"]["count"], v["value"]["sum"]
        else:  # quix
            start, count, total = v["start"], v["count"], v["sum"]
        if (key, start) in out:
            raise AssertionError(f"{run.engine}: window {key} {start} emitted twice")
        out[(key, start)] = (count, total)
    return out


async def faust_windows(run: Run) -> Windows:
    """faust emits nothing on close: the last value per window key in its changelog."""
    out: Windows = {}
    topics = state_topics("faust", run.group, await list_topics(run.bootstrap))
    for topic in topics:
        for r in await consume_all(run.bootstrap, topic, isolation_level="read_committed",
                                   timeout_s=120):
            k = json.loads(r.key or b"null")
            # faust windowed keys: [key, [start_s, end_s]], the key as str(bytes): "b'...'"
            key, (start_s, _end) = k
            if isinstance(key, str) and key[:2] in ("b'", 'b"'):
                key = _plain_key(ast.literal_eval(key).decode())
            if r.value is None:
                out.pop((key, round(start_s * 1000)), None)
                continue
            count, total = json.loads(r.value)
            out[(key, round(start_s * 1000))] = (count, total)
    return out


def _plain_key(key: str) -> str:
    """Keys as the reference writes them: a JSON string key (streamremat's ``key_by``
    encoding) is compared by its text."""
    if key[:1] == '"':
        with contextlib.suppress(ValueError):
            return str(json.loads(key))
    return key


def compare(reference: Windows, got: Windows, engine: str,
            before_ms: int | None = None) -> dict[str, Any]:
    """``before_ms`` (re-keyed job): only windows starting before it count, both ways:
    near the end of the input, which windows closed depends on each repartition
    partition's stream time."""
    if before_ms is not None:
        reference = {k: v for k, v in reference.items() if k[1] < before_ms}
        got = {k: v for k, v in got.items() if k[1] < before_ms}
    missing = [k for k in reference if k not in got]
    wrong = [k for k in reference if k in got and got[k] != reference[k]]
    extra = [k for k in got if k not in reference]
    # faust keeps every window (no event-time close): extra = still-open windows, by design
    equal = not missing and not wrong and (engine == "faust" or not extra)
    return {"equal": equal, "reference_windows": len(reference), "missing": len(missing),
            "different": len(wrong), "extra": len(extra),
            "example": [[*k, list(got.get(k, ())), list(reference[k])]
                        for k in (wrong or missing)[:2]]}


def raw_reference(bootstrap: str, topic: str, with_windows: bool,
                  rekey: bool = False) -> dict[str, Any]:
    cmd = [MAIN_PY, str(JOBS / "raw_job.py"), bootstrap, topic]
    if with_windows:
        cmd.append("--windows")
    if rekey:
        cmd += ["--group-by", "shop", "--grace-ms", str(REKEY_GRACE_MS)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def replayed_records(run: Run) -> int | None:
    """streamremat only: records replayed by the restarted worker (from its log)."""
    if run.engine != "streamremat" or len(run.logs) < 2:
        return None
    text = run.logs[-1].read_text(errors="replace")
    found = re.findall(r"replayed (\d+) records", text)
    return sum(int(x) for x in found) if found else 0


# -- the benchmark -------------------------------------------------------------


@dataclass
class Config:
    bootstrap: str
    log_dir: Path | None
    work: Path
    events: int
    recovery_events: int
    keys: list[int]
    reps: int
    engines: list[str]
    commit_interval: float
    checkpoint_interval: float
    cap_s: float
    keep: bool
    rekey: bool = False


async def throughput_run(cfg: Config, engine: str, topic: str, total: int, tag: str
                         ) -> dict[str, Any]:
    if engine == "raw":
        out = raw_reference(cfg.bootstrap, topic, with_windows=False, rekey=cfg.rekey)
        return {"events_per_s": out["events"] / out["seconds"], "events": out["events"],
                "seconds": out["seconds"], "capped": False, "state_bytes": 0,
                "local_state_bytes": 0, "topic_bytes": 0, "state_records": 0}
    group = f"peers-{engine}-{tag}-{uuid.uuid4().hex[:6]}"
    run = Run(engine, cfg.bootstrap, topic, group, cfg.work / "state" / group,
              cfg.work / "logs" / group, cfg.commit_interval, cfg.checkpoint_interval,
              cfg.rekey)
    run.log_path.parent.mkdir(parents=True, exist_ok=True)
    target = await end_offsets(cfg.bootstrap, topic)
    run.start()
    try:
        w = await run.wait_for(target, cfg.cap_s)
    finally:
        run.kill()
    rate = throughput_of(w)
    tops = state_topics(engine, group, await list_topics(cfg.bootstrap))
    t_bytes = t_records = 0
    method = "none"
    for t in tops:
        b, n, method = await topic_bytes(cfg.bootstrap, t, cfg.log_dir)
        t_bytes += b
        t_records += n
    local = dir_bytes(run.state_dir)
    if not cfg.keep:
        await delete_topics(cfg.bootstrap, [*tops, run.output])
        shutil.rmtree(run.state_dir, ignore_errors=True)
    return {
        "events_per_s": rate, "events": w["done"], "capped": w["capped"],
        "seconds": (w["last"][0] - w["first"][0]) if w["first"] else None,
        "startup_s": (w["first"][0] - w["started"]) if w["first"] else None,
        "topic_bytes": t_bytes, "state_records": t_records, "local_state_bytes": local,
        "state_bytes": t_bytes + local, "bytes_method": method, "state_topics": tops,
    }


async def recovery_run(cfg: Config, engine: str, events: list[tuple[Any, ...]],
                       reference: Windows | None, tag: str) -> dict[str, Any]:
    """Process a fresh topic to its end, read results, kill -9, append, restart, time."""
    group = f"peers-{engine}-{tag}-{uuid.uuid4().hex[:6]}"
    topic = f"{group}-in"
    await new_input_topic(cfg.bootstrap, topic, events)
    run = Run(engine, cfg.bootstrap, topic, group, cfg.work / "state" / group,
              cfg.work / "logs" / group, cfg.commit_interval, cfg.checkpoint_interval,
              cfg.rekey)
    run.log_path.parent.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {}
    try:
        target = await end_offsets(cfg.bootstrap, topic)
        run.start()
        w = await run.wait_for(target, cfg.cap_s * 3)
        if w["capped"]:
            run.kill()
            return {"error": f"not caught up after {cfg.cap_s * 3:.0f} s"}
        before = None
        if cfg.rekey:
            # A backlog's source partitions interleave in the repartition topic in any
            # order, so the grace covers the whole input; then one record per shop far
            # ahead closes every window of the input, on every repartition partition.
            before = events[-1][2] + 1
            await produce(cfg.bootstrap, topic,
                          closers(events, before + REKEY_GRACE_MS + WINDOW_MS))
            w = await run.wait_for(await end_offsets(cfg.bootstrap, topic), cfg.cap_s * 3)
        got = await engine_windows(run)
        # Re-keyed: results come after both stages; wait for them (bounded).
        deadline = time.monotonic() + cfg.cap_s
        while (cfg.rekey and reference is not None and engine != "faust"
               and time.monotonic() < deadline
               and sum(1 for k in got if k[1] < (before or 0)) < len(reference)):
            await asyncio.sleep(1.0)
            got = await engine_windows(run)
        if reference is not None:
            result["crosscheck"] = compare(reference, got, engine, before)
        run.kill(signal.SIGKILL)  # at the end of the input: the same offset everywhere
        last_ts = events[-1][2]
        keys = sorted({e[0] for e in events[-2000:]})[:64]
        tail = [(k, json.dumps({"amount": 1, "page": "/p/0", "user": "x", "shop": "x"}).encode(),
                 last_ts,
                 None, ()) for k in keys]
        await produce(cfg.bootstrap, topic, tail)
        target = await end_offsets(cfg.bootstrap, topic)
        # Failure detection is the group's session timeout (10 s everywhere): not timed.
        result["left_group_s"] = await wait_group_empty(cfg.bootstrap, group)
        began = time.monotonic()
        run.start()
        w = await run.wait_for(target, cfg.cap_s * 3)
        result["recovery_s"] = None if w["capped"] else time.monotonic() - began
        result["replayed_records"] = replayed_records(run)
        if reference is not None and engine != "faust":
            after = await engine_windows(run)  # raises on a duplicate emission
            result["exactly_once_outputs"] = all(after.get(k) == v for k, v in got.items())
    finally:
        run.kill()
        if not cfg.keep:
            tops = state_topics(engine, group, await list_topics(cfg.bootstrap))
            await delete_topics(cfg.bootstrap, [*tops, topic, run.output])
            shutil.rmtree(run.state_dir, ignore_errors=True)
    return result


async def wait_group_empty(bootstrap: str, group: str, timeout_s: float = 120) -> float:
    """Wait until the killed member has left the group; return how long that took."""
    began = time.monotonic()
    async with admin_client(bootstrap) as admin:
        while time.monotonic() - began < timeout_s:
            with contextlib.suppress(Exception):
                described = await admin.describe_consumer_groups([group])
                groups = described[0].to_object()["groups"]
                if all(not g["members"] for g in groups):
                    break
            await asyncio.sleep(0.1)
    return time.monotonic() - began


def median(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


async def bench(cfg: Config) -> dict[str, Any]:
    runnable = {e: peer_status(e) for e in cfg.engines}
    if cfg.rekey and runnable.get("faust") is None and "faust" in runnable:
        # Its group_by under exactly-once made no progress here (about 150 events/s,
        # no table updates reached the changelog): reported, not measured.
        runnable["faust"] = "re-keyed job not run: faust group_by stalls under exactly_once"
    engines = [e for e in cfg.engines if runnable[e] is None]
    summary: dict[str, Any] = {
        "benchmark": "peers", "job": "rekeyed" if cfg.rekey else "keyed",
        "events": cfg.events, "recovery_events": cfg.recovery_events,
        "partitions": PARTITIONS,
        "window": ("tumbling 60 s, grace 12 min, count+sum per shop (not the record key)"
                   if cfg.rekey else "tumbling 60 s, grace 0, count+sum per key"),
        "reps": cfg.reps, "commit_interval_s": cfg.commit_interval,
        "streamremat_checkpoint": f"fixed, every {cfg.checkpoint_interval:g} s",
        "cap_s": cfg.cap_s,
        "skipped": {e: why for e, why in runnable.items() if why is not None},
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "processor": platform.processor() or platform.machine()},
        "versions": versions(), "results": {},
    }
    for n_keys in cfg.keys:
        base = int(time.time() * 1000)
        big = f"peers-in-{n_keys}-{uuid.uuid4().hex[:6]}"
        t0 = time.monotonic()
        await new_input_topic(cfg.bootstrap, big,
                              make_events(cfg.events, n_keys, base, rekey=cfg.rekey))
        print(f"[{n_keys} keys] produced {cfg.events} events in {time.monotonic() - t0:.1f} s",
              file=sys.stderr, flush=True)
        rec_events = make_events(cfg.recovery_events, n_keys, base, seed=11, rekey=cfg.rekey)
        ref_topic = f"peers-ref-{n_keys}-{uuid.uuid4().hex[:6]}"
        await new_input_topic(cfg.bootstrap, ref_topic, rec_events)
        ref = raw_reference(cfg.bootstrap, ref_topic, with_windows=True, rekey=cfg.rekey)
        reference: Windows = {(_plain_key(k), s): (c, t) for k, s, c, t in ref["windows"]}
        await delete_topics(cfg.bootstrap, [ref_topic])
        per: dict[str, list[dict[str, Any]]] = {e: [] for e in engines}
        rec: dict[str, list[dict[str, Any]]] = {e: [] for e in engines}
        for rep in range(cfg.reps):
            order = engines[rep % len(engines):] + engines[:rep % len(engines)]
            for engine in order:
                tag = f"{n_keys}-{rep}"
                r = await throughput_run(cfg, engine, big, cfg.events, tag)
                per[engine].append(r)
                print(f"[{n_keys} keys rep {rep}] {engine}: {_fmt(r.get('events_per_s'))} ev/s "
                      f"({r['events']} events{', capped' if r['capped'] else ''}), "
                      f"state {r['state_bytes']} B", file=sys.stderr, flush=True)
                if engine != "raw":
                    rr = await recovery_run(cfg, engine, rec_events, reference, tag)
                    rec[engine].append(rr)
                    print(f"[{n_keys} keys rep {rep}] {engine}: recovery "
                          f"{_fmt(rr.get('recovery_s'), 2)} s, replayed "
                          f"{rr.get('replayed_records')}, crosscheck "
                          f"{rr.get('crosscheck')} {rr.get('error', '')}",
                          file=sys.stderr, flush=True)
        if not cfg.keep:
            await delete_topics(cfg.bootstrap, [big])
        summary["results"][str(n_keys)] = {
            e: _summarize(per[e], rec.get(e, [])) for e in engines
        }
        summary["results"][str(n_keys)]["reference_windows"] = len(reference)
    summary["goals"] = goals(summary)
    return summary


def _summarize(runs: list[dict[str, Any]], recs: list[dict[str, Any]]) -> dict[str, Any]:
    def per_event(r: dict[str, Any]) -> float | None:
        return r["state_bytes"] / r["events"] if r.get("events") else None

    out: dict[str, Any] = {
        "events_per_s": median([r.get("events_per_s") for r in runs]),
        "events_per_s_all": [r.get("events_per_s") for r in runs],
        "capped": any(r.get("capped") for r in runs),
        "events_measured": median([r.get("events") for r in runs]),
        "state_bytes": median([r.get("state_bytes") for r in runs]),
        "topic_bytes": median([r.get("topic_bytes") for r in runs]),
        "local_state_bytes": median([r.get("local_state_bytes") for r in runs]),
        "state_records": median([r.get("state_records") for r in runs]),
        "state_bytes_per_event": median([per_event(r) for r in runs]),
        "bytes_method": next((r["bytes_method"] for r in runs if "bytes_method" in r), None),
    }
    if recs:
        out["recovery_s"] = median([r.get("recovery_s") for r in recs])
        out["recovery_s_all"] = [r.get("recovery_s") for r in recs]
        out["replayed_records"] = [r.get("replayed_records") for r in recs]
        checks = [r["crosscheck"] for r in recs if r.get("crosscheck")]
        out["crosscheck_equal"] = bool(checks) and all(c["equal"] for c in checks)
        out["crosscheck"] = checks[0] if checks else None
        out["exactly_once_outputs"] = [r.get("exactly_once_outputs") for r in recs]
        errors = [r["error"] for r in recs if "error" in r]
        if errors:
            out["errors"] = errors
    return out


def goals(summary: dict[str, Any]) -> dict[str, Any]:
    g: dict[str, Any] = {}
    for keys, res in summary["results"].items():
        sr = res.get("streamremat", {})
        for peer, want in (("quix", 3.0), ("faust", 10.0)):
            if peer in res and sr.get("events_per_s") and res[peer].get("events_per_s"):
                ratio = sr["events_per_s"] / res[peer]["events_per_s"]
                g[f"throughput_vs_{peer}_{keys}"] = {"ratio": ratio, "goal": want,
                                                     "met": ratio >= want}
            if peer in res and sr.get("state_bytes_per_event") and res[peer].get(
                    "state_bytes_per_event"):
                ratio = res[peer]["state_bytes_per_event"] / sr["state_bytes_per_event"]
                g[f"bytes_vs_{peer}_{keys}"] = {"ratio": ratio, "goal": 20.0 if keys == "1000"
                                                else None, "met": ratio >= 20.0}
        peers_rec = [res[p]["recovery_s"] for p in ("quix", "faust")
                     if p in res and res[p].get("recovery_s")]
        if peers_rec and sr.get("recovery_s"):
            ratio = sr["recovery_s"] / min(peers_rec)
            g[f"recovery_vs_fastest_peer_{keys}"] = {"ratio": ratio, "goal": 2.0,
                                                     "met": ratio <= 2.0}
    return g


def _fmt(x: float | None, digits: int = 0) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


# -- report --------------------------------------------------------------------


def table(summary: dict[str, Any]) -> str:
    lines = ["| keys | engine | events/s (median) | state bytes | bytes/event | "
             "state records | recovery s | results = reference |",
             "|---:|---|---:|---:|---:|---:|---:|---|"]
    for keys, res in summary["results"].items():
        for e in ENGINES:
            r = res.get(e)
            if r is None:
                why = summary["skipped"].get(e)
                if why:
                    lines.append(f"| {keys} | {e} | {why} | | | | | |")
                continue
            rate = _fmt(r["events_per_s"]) + (" (capped)" if r["capped"] else "")
            lines.append(
                f"| {keys} | {e} | {rate} | {_fmt(r['state_bytes'])} | "
                f"{_fmt(r['state_bytes_per_event'], 1)} | {_fmt(r['state_records'])} | "
                f"{_fmt(r.get('recovery_s'), 2)} | "
                f"{'-' if e == 'raw' else ('yes' if r.get('crosscheck_equal') else 'NO')} |")
    return "\n".join(lines)


def plot(summary: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = list(summary["results"])
    engines = [e for e in ENGINES if any(e in summary["results"][k] for k in keys)]
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    metrics = (("events_per_s", "throughput (events/s)"),
               ("state_bytes_per_event", "state-durability bytes per event"),
               ("recovery_s", "recovery after kill -9 (s)"))
    width = 0.8 / max(1, len(engines))
    for ax, (metric, title) in zip(axes, metrics, strict=True):
        for i, e in enumerate(engines):
            vals = [summary["results"][k].get(e, {}).get(metric) or 0 for k in keys]
            ax.bar([j + i * width for j in range(len(keys))], vals, width, label=e)
        ax.set_xticks([j + width * (len(engines) - 1) / 2 for j in range(len(keys))])
        ax.set_xticklabels([f"{int(k):,} keys" for k in keys])
        ax.set_title(title)
        if metric == "state_bytes_per_event":
            ax.set_yscale("symlog")
    axes[0].legend()
    fig.suptitle(f"{summary['events']:,} events, 4 partitions, tumbling 60 s count+sum; "
                 f"median of {summary['reps']}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)


# -- main ----------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--setup", action="store_true", help="create .venv-peers and exit")
    p.add_argument("--small", action="store_true", help=f"CI size: {SMALL_EVENTS} events, 1 rep")
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--recovery-events", type=int, default=None,
                   help="events of the recovery/cross-check topic (default events/10)")
    p.add_argument("--keys", default="1000,100000")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--engines", default=",".join(ENGINES))
    p.add_argument("--bootstrap", help="use this broker instead of starting one")
    p.add_argument("--log-dir", type=Path,
                   help="the broker's log.dirs (for state bytes on disk)")
    p.add_argument("--work-dir", type=Path, default=ROOT / ".streamremat" / "bench-peers")
    p.add_argument("--commit-interval", type=float, default=0.5)
    p.add_argument("--checkpoint-interval", type=float, default=10.0)
    p.add_argument("--cap-seconds", type=float, default=90.0,
                   help="stop a throughput run after this long (rate over what it did)")
    p.add_argument("--plot", type=Path, help="write the PNG here")
    p.add_argument("--keep", action="store_true", help="keep topics and state dirs")
    p.add_argument("--job", choices=("keyed", "rekeyed"), default="keyed",
                   help="rekeyed: per the value's shop field, through repartition topics")
    args = p.parse_args(argv)
    if args.setup:
        setup_peers()
        print(json.dumps(versions()))
        return 0
    if args.small:
        args.events, args.reps = SMALL_EVENTS, 1
    rec_events = args.recovery_events or max(2_000, args.events // 10)
    args.work_dir.mkdir(parents=True, exist_ok=True)
    broker = None
    log_dir = args.log_dir
    bootstrap = args.bootstrap
    if bootstrap is None:
        cfg_b = BrokerConfig(port=free_port_pair(), data_dir=args.work_dir / "broker",
                             stop_with_parent=True)
        broker = BenchBroker(cfg_b)
        bootstrap = broker.start().bootstrap
        log_dir = cfg_b.log_dirs
    cfg = Config(
        bootstrap=bootstrap, log_dir=log_dir, work=args.work_dir, events=args.events,
        recovery_events=rec_events, keys=[int(k) for k in args.keys.split(",")],
        reps=args.reps, engines=[e for e in args.engines.split(",") if e],
        commit_interval=args.commit_interval, checkpoint_interval=args.checkpoint_interval,
        cap_s=args.cap_seconds, keep=args.keep, rekey=args.job == "rekeyed",
    )
    try:
        summary = asyncio.run(bench(cfg))
    finally:
        if broker is not None:
            broker.stop()
            shutil.rmtree(args.work_dir / "broker", ignore_errors=True)
    print(table(summary))
    if args.plot:
        plot(summary, args.plot)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
