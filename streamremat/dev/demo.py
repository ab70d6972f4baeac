"""``streamremat demo``: the whole idea in one command, on a real broker.

1. Start the dev broker unless a cluster is named (``--bootstrap``,
   ``STREAMREMAT_BOOTSTRAP``, ``--kafka-config``): the demo and its worker then
   connect with the same client settings (TLS, SASL) as ``streamremat worker``.
2. Generate a click stream (current timestamps, 4 partitions).
3. Run a worker (``operators.clicks``: clicks per user per minute, exactly-once).
4. ``kill -9`` it half-way, restart it: it restores its checkpoints and replays
   the source from their offsets up to the committed offset, without output.
5. Print each partition's recovery and check the ``read_committed`` output
   against a failure-free computation of the same input.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import logging
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition

from streamremat.core.records import Record
from streamremat.core.task import Task
from streamremat.dev.broker import DEFAULT_PORT, BrokerConfig, DevBroker
from streamremat.dev.exceptions import DevBrokerError
from streamremat.logging import TextFormatter
from streamremat.runtime.client import KafkaClientConfig
from streamremat.runtime.commands import add_kafka_client_arguments, client_config_from_args
from streamremat.runtime.kafka import (
    ProducerRecord,
    TopicSpec,
    consume_all,
    create_topics,
    end_offsets,
    produce,
)
from streamremat.runtime.outputs import partition_for, to_records

PARTITIONS = 4
RECOVERY = re.compile(
    r"(?P<topic>\S+)\[(?P<p>\d+)\]: recovered: checkpoint offset (?P<ckpt>\S+), committed offset "
    r"(?P<committed>\d+), replayed (?P<replayed>\d+) records in (?P<replay_s>[\d.]+) s .*?"
    r"restore (?P<restore_s>[\d.]+) s from (?P<source>\S+)"
)


def add_demo_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = subparsers.add_parser(
        "demo",
        help="run a worker on a generated stream, kill -9 it, recover, verify the output",
        description="Uses the cluster named by --bootstrap ($STREAMREMAT_BOOTSTRAP) or "
                    "--kafka-config, else starts the dev broker.",
    )
    demo.add_argument("--port", type=int, default=DEFAULT_PORT, help="dev broker port")
    demo.add_argument("--bootstrap", default=None, metavar="HOST:PORT[,...]",
                      help="a running cluster instead of the dev broker")
    add_kafka_client_arguments(demo)
    demo.add_argument("--events", type=int, default=200_000, help="events to generate")
    demo.add_argument("--users", type=int, default=1_000, help="distinct users (keys)")
    demo.add_argument("--seed", type=int, default=7)
    demo.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    named = args.bootstrap or args.kafka_config or any(
        os.environ.get(f"STREAMREMAT_{name}")
        for name in ("BOOTSTRAP", "BOOTSTRAP_SERVERS", "KAFKA_CONFIG")
    )
    default_bootstrap = BrokerConfig(port=args.port).bootstrap
    if not named:
        try:
            status = DevBroker(BrokerConfig(port=args.port)).start()
        except DevBrokerError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        default_bootstrap = status.bootstrap
        print(f"dev broker at {status.bootstrap} (stop it with {stop_hint(args.port)})")
    client = client_config_from_args(args, default_bootstrap)
    return asyncio.run(_demo(client, _client_env(args), args.events, args.users, args.seed))


def stop_hint(port: int, program: str | None = None) -> str:
    """How to stop the broker the demo started. In a fresh clone ``streamremat``
    is in ``.venv/bin``, not on the PATH (``make demo`` runs it from there): name
    the Makefile's target for the default port, and the command the way this
    process was started (``program``, default ``sys.argv[0]``)."""
    path = os.path.abspath(program if program is not None else sys.argv[0])
    name = os.path.basename(path)
    found = shutil.which(name)
    if name.endswith(".py"):  # python -m streamremat
        command = f"{_short(sys.executable)} -m streamremat"
    elif found is not None and os.path.abspath(found) == path:
        command = name
    else:
        command = _short(path)
    stop = f"`{command} broker stop{'' if port == DEFAULT_PORT else f' --port {port}'}`"
    return f"`make broker-stop` or {stop}" if port == DEFAULT_PORT else stop


def _short(path: str) -> str:
    """``path`` relative to the working directory when it is below it."""
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def _client_env(args: argparse.Namespace) -> dict[str, str]:
    """The demo's client flags for its worker, as the STREAMREMAT_<NAME> variables
    the worker reads (a password never shows in the process list)."""
    env = {f"STREAMREMAT_{name.upper()}": str(getattr(args, name)) for name in (
        "security_protocol", "sasl_mechanism", "sasl_username", "sasl_password",
        "ssl_cafile", "ssl_certfile", "ssl_keyfile",
    ) if getattr(args, name) is not None}  # fmt: skip
    if args.kafka_config is not None:
        env["STREAMREMAT_KAFKA_CONFIG"] = str(args.kafka_config)
    return env


def _clicks(events: int, users: int, seed: int) -> list[ProducerRecord]:
    """Clicks spread over event time ending now, slightly out of order."""
    rng = random.Random(seed)
    now_ms = int(time.time() * 1000)
    span_ms = max(events * 10, 600_000)
    start = now_ms - span_ms
    out = []
    for i in range(events):
        user = f"user-{rng.randrange(users)}"
        t = start + i * span_ms // events - rng.randrange(3_000)
        value = orjson.dumps({"user": user, "url": f"/p/{rng.randrange(50)}"})
        # Keyed by user, on the partition the default partitioner gives the key, as
        # a producer keyed by user would: the demo's operator is co-partitioned.
        key = user.encode()
        out.append(ProducerRecord(key, value, t, partition_for(key, PARTITIONS)))
    return out


async def _committed(client: KafkaClientConfig, group: str, topic: str) -> int:
    consumer = AIOKafkaConsumer(**client.consumer_kwargs(group_id=group,
                                                         enable_auto_commit=False))
    await consumer.start()
    try:
        total = 0
        for p in range(PARTITIONS):
            total += await consumer.committed(TopicPartition(topic, p)) or 0
        return total
    finally:
        await consumer.stop()


async def _wait_committed(client: KafkaClientConfig, group: str, topic: str, target: int,
                          worker: subprocess.Popen[bytes], timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    done = 0
    while time.monotonic() < deadline:
        done = await _committed(client, group, topic)
        if done >= target:
            return done
        if worker.poll() is not None:
            raise RuntimeError(f"the worker exited early with code {worker.returncode}")
        await asyncio.sleep(0.3)
    raise TimeoutError(f"committed {done} of {target} records after {timeout_s:.0f} s")


def _start_worker(client: KafkaClientConfig, client_env: dict[str, str], run: str,
                  state_dir: Path, log: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ, **client_env, STREAMREMAT_DEMO_RUN=run)
    cmd = [
        sys.executable, "-m", "streamremat", "worker", "streamremat.dev.demo_app:app",
        "--bootstrap", client.bootstrap_servers, "--state-dir", str(state_dir),
        "--checkpoint-policy", "fixed", "--checkpoint-interval", "30",
        "--checkpoint-records", "15000",
        "--commit-interval", "0.2", "--session-timeout-ms", "3000", "--max-batch", "2000",
    ]
    with log.open("ab") as out:
        return subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)


def _expected(records: list[ProducerRecord]) -> collections.Counter[tuple[bytes | None, bytes]]:
    """The failure-free output: the pure engine over each partition, in offset order."""
    from streamremat.dev.demo_app import operator

    by_partition: dict[int, list[Record]] = collections.defaultdict(list)
    for r in records:
        part = by_partition[r.partition or 0]
        part.append(Record(r.key, r.value, r.timestamp_ms, len(part)))
    expected: collections.Counter[tuple[bytes | None, bytes]] = collections.Counter()
    for p, recs in by_partition.items():
        out = Task(operator, p).process(recs)
        expected.update((o.key, o.value or b"") for o in to_records(operator, p, out)
                        if o.topic == operator.sink)
    return expected


async def _demo(client: KafkaClientConfig, client_env: dict[str, str], events: int,
                users: int, seed: int) -> int:
    run = uuid.uuid4().hex[:8]
    os.environ["STREAMREMAT_DEMO_RUN"] = run
    from streamremat.dev.demo_app import app, operator

    workdir = Path(tempfile.mkdtemp(prefix=f"streamremat-demo-{run}-"))
    state_dir, log = workdir / "state", workdir / "worker.log"
    # The demo's own clients log a fresh broker's retriable coordinator errors
    # ("Group Coordinator Request failed"; they retry): to a file beside the
    # worker's log, so the console holds the demo's lines only.
    clients_log = logging.FileHandler(workdir / "clients.log")
    clients_log.setFormatter(TextFormatter())
    logging.getLogger("aiokafka").addHandler(clients_log)
    group = app.group_id
    print(f"demo {run}: {events:,} clicks by {users:,} users -> {operator.source} "
          f"({PARTITIONS} partitions); worker log {log}")
    await create_topics(client, [TopicSpec(operator.source, PARTITIONS,
                                           config={"retention.ms": "-1"})])
    records = _clicks(events, users, seed)
    await produce(client, operator.source, records)
    total = sum((await end_offsets(client, operator.source)).values())

    worker = _start_worker(client, client_env, run, state_dir, log)
    try:
        done = await _wait_committed(client, group, operator.source, total // 2, worker, 120)
        worker.send_signal(signal.SIGKILL)
        worker.wait()
        print(f"kill -9 the worker after {done:,} of {total:,} records were committed")
        mark = log.stat().st_size
        started = time.monotonic()
        worker = _start_worker(client, client_env, run, state_dir, log)
        await _wait_committed(client, group, operator.source, total, worker, 300)
        caught_up = time.monotonic() - started
    finally:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(timeout=60)
            except subprocess.TimeoutExpired:
                worker.kill()
    text = log.read_text(errors="replace")[mark:]
    for m in RECOVERY.finditer(text):
        committed, replayed = int(m["committed"]), int(m["replayed"])
        # A replay may start below the checkpoint: the windows it stored as "recompute"
        # (docs/rematerialization.md) are rebuilt from their first record.
        start = committed - replayed
        below = int(m["ckpt"]) - start if m["ckpt"].isdigit() else 0
        why = f"; the {below:,} below the checkpoint rebuild the windows it recomputes"
        print(f"  partition {m['p']}: restored checkpoint at offset {m['ckpt']} from "
              f"{m['source']} in {float(m['restore_s']):.2f} s, replayed {replayed:,} records "
              f"(offsets {start:,} to the committed {committed:,}{why if below > 0 else ''}) "
              f"in {float(m['replay_s']):.2f} s")
    print(f"restarted worker caught up in {caught_up:.1f} s; it exited with "
          f"{worker.returncode} on SIGTERM")

    expected = _expected(records)
    got = collections.Counter(
        (r.key, r.value or b"")
        for r in await consume_all(client, operator.sink, isolation_level="read_committed")
    )
    missing, extra = expected - got, got - expected
    if missing or extra:
        print(f"FAIL: output differs from the failure-free run: {sum(missing.values())} "
              f"missing, {sum(extra.values())} extra")
        return 1
    print(f"OK: {sum(got.values()):,} window results, exactly those of a failure-free run "
          "(nothing lost, nothing duplicated)")
    return 0
