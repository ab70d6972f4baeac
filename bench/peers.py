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
import asyncio
import contextlib
import json
import os
import platform
import random
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _peers_report import _fmt, _summarize, goals, plot, table  # noqa: E402
from _peers_run import (  # noqa: E402
    ENGINES,
    JOBS,
    PARTITIONS,
    PEER_MODULES,
    PEERS_VENV,
    REKEY_GRACE_MS,
    SMALL_EVENTS,
    WINDOW_MS,
    Run,
    Windows,
    _plain_key,
    checkpoint_topic,
    compare,
    dir_bytes,
    engine_python,
    engine_windows,
    peers_python,
    raw_reference,
    replayed_records,
    state_topics,
    throughput_of,
    topic_bytes,
)

from streamremat.dev.broker import BrokerConfig, DevBroker, free_port_pair  # noqa: E402
from streamremat.runtime.kafka import (  # noqa: E402
    TopicSpec,
    admin_client,
    create_topics,
    delete_topics,
    end_offsets,
    list_topics,
    produce,
)

# -- setup ---------------------------------------------------------------------


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
    python = engine_python(engine)
    if not python.exists():
        return "not installed (run bench/peers.py --setup)"
    probe = subprocess.run(
        [str(python), "-c", f"import {PEER_MODULES[engine]}"],
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


async def wait_first_checkpoint(bootstrap: str, engine: str, group: str,
                                timeout_s: float = 30.0) -> None:
    """Wait until a streamremat run's first checkpoint is in its replica topic (the
    peers write a changelog record per update: theirs is durable as it goes). A run
    that reached the end of its input before its first checkpoint (CI's 20k events on
    an idle machine: ~0.2 s) would report no durability bytes at all; its state counts
    once it is durable. The rate is the commits' (``wait_for``), so it is unchanged."""
    if engine not in ("streamremat", "faust-streamremat"):
        return
    topic = checkpoint_topic(group)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if topic in await list_topics(bootstrap) and sum(
                (await end_offsets(bootstrap, topic)).values()) > 0:
            return
        await asyncio.sleep(0.1)
    print(f"{engine}: no checkpoint in {topic} after {timeout_s:.0f} s", file=sys.stderr)


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
        await wait_first_checkpoint(cfg.bootstrap, engine, group)
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
            if engine == "faust-streamremat":  # at-least-once: identical copies counted
                result["duplicate_results"] = run.duplicates
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
