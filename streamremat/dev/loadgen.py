"""``streamremat loadgen``: a synthetic source stream for the operators in ``operators/``.

Value shapes (JSON) match the ready-made operators:

* ``clicks`` (``operators/clicks.py``, ``operators/sessions.py``; topic ``clicks``):
  ``{"user": "user-0042", "url": "/products/17", "device": "mobile"}``, keyed by user;
* ``sessions``: the same shape, but each user clicks in short bursts separated by
  pauses, so session windows open and close;
* ``orders`` (``operators/top_products.py``; topic ``orders``):
  ``{"product": "product-0007", "price": 19.99, "quantity": 2, "category": "books"}``,
  keyed by category (the operator's grouping key, so each category lives on one
  partition).

Every record is stamped with the current wall-clock time (the broker's retention
would delete old timestamps). Options add the odd records a demo needs:

* ``--bad-ratio``: malformed records for the dead-letter topic: not JSON, JSON
  that is not an object, an object without the grouping field, and (orders) a
  non-numeric price. They carry the header ``loadgen=bad:<shape>``.
* ``--late-ratio``: records stamped ``--late-by`` seconds in the past, late for
  windows that have closed. Header ``loadgen=late``.
* ``--backfill S``: first send ``rate * S`` events at once with timestamps spread
  over the last S seconds (a producer catching up), so windows close and results
  come out as soon as a worker reads them.

Records go out in per-partition batches through ``BatchSender`` (one await per
batch, never per record), paced by a clock: each tick sends what the target
rate owes by now. SIGTERM or SIGINT stops it cleanly: it waits for the
records in flight, prints a summary and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import random
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import orjson
from aiokafka import AIOKafkaProducer

from streamremat.core.exceptions import ConfigError
from streamremat.runtime.client import KafkaClientConfig
from streamremat.runtime.commands import add_kafka_client_arguments, client_config_from_args
from streamremat.runtime.kafka import (
    KafkaAdminError,
    Target,
    TopicSpec,
    create_topics,
    topic_partitions,
)
from streamremat.runtime.outputs import BatchSender, OutRecord

__all__ = [
    "DEFAULT_TOPICS",
    "KINDS",
    "LoadgenConfig",
    "LoadgenError",
    "LoadgenStats",
    "RecordGenerator",
    "add_loadgen_commands",
    "run_loadgen",
]

log = logging.getLogger("streamremat.loadgen")

KINDS: Final = ("clicks", "sessions", "orders")
DEFAULT_TOPICS: Final = {"clicks": "clicks", "sessions": "clicks", "orders": "orders"}
HEADER: Final = "loadgen"

_URLS: Final = (
    "/", "/search", "/cart", "/checkout", "/account", "/help",
    *(f"/products/{i}" for i in range(40)),
)  # fmt: skip
_DEVICES: Final = ("desktop", "mobile", "tablet")
CATEGORIES: Final = (
    "books", "electronics", "garden", "grocery", "music", "sports", "toys", "clothing",
)  # fmt: skip

# Bad shapes per kind: (name, value maker). Each fails a different stage of the task.
_BAD_COMMON: Final[tuple[tuple[str, Callable[[random.Random], bytes]], ...]] = (
    ("not-json", lambda rng: b"{not json " + str(rng.random()).encode()),
    ("not-object", lambda rng: orjson.dumps([rng.randrange(100), "x"])),
)
_BAD_BY_KIND: Final[dict[str, tuple[tuple[str, Callable[[random.Random], bytes]], ...]]] = {
    "clicks": (("no-user", lambda rng: orjson.dumps({"url": rng.choice(_URLS)})),),
    "sessions": (("no-user", lambda rng: orjson.dumps({"url": rng.choice(_URLS)})),),
    "orders": (
        ("no-price", lambda rng: orjson.dumps({"product": "product-0000", "category": "books"})),
        ("bad-price", lambda rng: orjson.dumps(
            {"product": "product-0000", "price": None, "quantity": 1, "category": "books"}
        )),
    ),
}


class LoadgenError(RuntimeError):
    """The load generator cannot run (e.g. the topic is missing)."""


@dataclass(frozen=True)
class LoadgenConfig:
    """``bootstrap``: a plaintext bootstrap string, or the client config (security)."""

    bootstrap: Target
    topic: str
    kind: str = "clicks"
    rate: float = 1000.0  # events/s; 0 = as fast as the producer goes
    events: int | None = None  # None = unbounded
    keys: int = 1000
    partitions: int | None = None  # create the topic with this many if missing
    bad_ratio: float = 0.0
    late_ratio: float = 0.0
    late_by_s: float = 300.0
    backfill_s: float = 0.0
    seed: int | None = None
    tick_s: float = 0.02
    report_every_s: float = 10.0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"--kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if self.rate < 0:
            raise ValueError(f"--rate must be >= 0, got {self.rate}")
        if self.events is not None and self.events < 0:
            raise ValueError(f"--events must be >= 0, got {self.events}")
        if self.keys < 1:
            raise ValueError(f"--keys must be >= 1, got {self.keys}")
        if self.partitions is not None and self.partitions < 1:
            raise ValueError(f"--partitions must be >= 1, got {self.partitions}")
        for name, ratio in (("--bad-ratio", self.bad_ratio), ("--late-ratio", self.late_ratio)):
            if not 0.0 <= ratio <= 1.0:
                raise ValueError(f"{name} must be within [0, 1], got {ratio}")
        if self.bad_ratio + self.late_ratio > 1.0:
            raise ValueError("--bad-ratio + --late-ratio must not exceed 1")
        if self.late_by_s < 0 or self.backfill_s < 0:
            raise ValueError("--late-by and --backfill must be >= 0")
        if self.backfill_s > 0 and self.rate == 0:
            raise ValueError("--backfill needs a --rate (it sends rate * backfill events)")


@dataclass
class LoadgenStats:
    sent: int = 0
    bad: int = 0
    late: int = 0
    started: float = field(default_factory=time.monotonic)

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    def summary(self) -> str:
        secs = self.elapsed_s
        rate = self.sent / secs if secs > 0 else 0.0
        return (
            f"sent {self.sent} records ({self.bad} bad, {self.late} late) in {secs:.1f} s "
            f"({rate:.0f}/s)"
        )


class RecordGenerator:
    """Deterministic (given ``seed``) synthetic records; timestamps are passed in.

    ``next(now_ms)`` returns one ``OutRecord`` for ``topic``. The kind of each
    record is drawn first: bad with ``bad_ratio``, late with ``late_ratio``,
    else a normal event stamped ``now_ms``.
    """

    def __init__(
        self,
        kind: str,
        topic: str,
        *,
        keys: int = 1000,
        bad_ratio: float = 0.0,
        late_ratio: float = 0.0,
        late_by_ms: int = 300_000,
        seed: int | None = None,
    ) -> None:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
        self.kind = kind
        self.topic = topic
        self.keys = keys
        self.bad_ratio = bad_ratio
        self.late_ratio = late_ratio
        self.late_by_ms = late_by_ms
        self.rng = random.Random(seed)
        self._bad = (*_BAD_COMMON, *_BAD_BY_KIND[kind])
        width = max(4, len(str(keys - 1)))
        self._names = [f"{'product' if kind == 'orders' else 'user'}-{i:0{width}d}"
                       for i in range(keys)]
        # Orders: each product has a fixed category and list price.
        self._category = [CATEGORIES[i % len(CATEGORIES)] for i in range(keys)]
        price_rng = random.Random(0 if seed is None else seed)
        self._price = [round(price_rng.uniform(1.0, 500.0), 2) for _ in range(keys)]
        # Sessions: per user, clicks until this many more, then pause.
        self._burst_left = [0] * keys

    def __iter__(self) -> Iterator[OutRecord]:  # pragma: no cover - convenience
        while True:
            yield self.next(int(time.time() * 1000))

    def batch(self, n: int, now_ms: int) -> list[OutRecord]:
        return [self.next(now_ms) for _ in range(n)]

    def next(self, now_ms: int) -> OutRecord:
        rng = self.rng
        draw = rng.random()
        if draw < self.bad_ratio:
            shape, make = self._bad[rng.randrange(len(self._bad))]
            key = self._names[rng.randrange(self.keys)].encode()
            return OutRecord(self.topic, key, make(rng), now_ms,
                             [(HEADER, b"bad:" + shape.encode())])
        if draw < self.bad_ratio + self.late_ratio:
            key, value = self._event()
            return OutRecord(self.topic, key, value, now_ms - self.late_by_ms,
                             [(HEADER, b"late")])
        key, value = self._event()
        return OutRecord(self.topic, key, value, now_ms, [])

    def _event(self) -> tuple[bytes, bytes]:
        rng = self.rng
        if self.kind == "orders":
            i = rng.randrange(self.keys)
            category = self._category[i]
            value = {
                "product": self._names[i],
                "price": self._price[i],
                "quantity": 1 + int(rng.expovariate(1.0)),
                "category": category,
            }
            return category.encode(), orjson.dumps(value)
        i = self._user()
        user = self._names[i]
        value = {"user": user, "url": rng.choice(_URLS), "device": rng.choice(_DEVICES)}
        return user.encode(), orjson.dumps(value)

    def _user(self) -> int:
        if self.kind != "sessions":
            return self.rng.randrange(self.keys)
        # A small active set clicks in bursts; a user whose burst ends goes quiet
        # and a random other one starts, so sessions end by silence.
        rng = self.rng
        active = max(1, self.keys // 10)
        i = rng.randrange(active)
        if self._burst_left[i] <= 0:
            # Swap in a random user for this slot: the old one goes silent.
            j = rng.randrange(self.keys)
            self._names[i], self._names[j] = self._names[j], self._names[i]
            self._burst_left[i] = 1 + int(rng.expovariate(1 / 8))
        self._burst_left[i] -= 1
        return i

    def count(self, record: OutRecord, stats: LoadgenStats) -> None:
        stats.sent += 1
        if record.headers:
            tag = record.headers[0][1]
            if tag == b"late":
                stats.late += 1
            else:
                stats.bad += 1


def backfill_records(gen: RecordGenerator, n: int, now_ms: int, span_ms: int) -> list[OutRecord]:
    """``n`` records stamped evenly over ``[now - span, now)``, oldest first."""
    if n <= 0:
        return []
    step = span_ms / n
    return [gen.next(now_ms - span_ms + int(i * step)) for i in range(n)]


async def ensure_topic(bootstrap: Target, topic: str, partitions: int | None) -> int:
    """The topic's partition count; created with ``partitions`` when missing and asked to."""
    if partitions is not None:
        await create_topics(bootstrap, [TopicSpec(topic, partitions=partitions)])
    try:
        parts = await topic_partitions(bootstrap, topic)
    except KafkaAdminError as exc:
        raise LoadgenError(
            f"topic {topic!r} does not exist on "
            f"{KafkaClientConfig.of(bootstrap).bootstrap_servers} ({exc}); pass --partitions N to "
            "create it"
        ) from exc
    return len(parts)


# Records in flight before the generator waits for acknowledgements.
_IN_FLIGHT: Final = 100_000


async def run_loadgen(config: LoadgenConfig, stop: asyncio.Event | None = None) -> LoadgenStats:
    """Produce until ``config.events`` are sent or ``stop`` is set; return the counts."""
    stop = stop or asyncio.Event()
    parts = await ensure_topic(config.bootstrap, config.topic, config.partitions)
    gen = RecordGenerator(
        config.kind, config.topic, keys=config.keys, bad_ratio=config.bad_ratio,
        late_ratio=config.late_ratio, late_by_ms=int(config.late_by_s * 1000), seed=config.seed,
    )
    producer = AIOKafkaProducer(
        acks="all", enable_idempotence=True,
        **KafkaClientConfig.of(config.bootstrap).producer_kwargs(
            linger_ms=5, max_batch_size=256 * 1024
        ),
    )
    await producer.start()
    sender = BatchSender(producer)
    stats = LoadgenStats()
    in_flight: list[tuple[asyncio.Future[Any], int]] = []
    total = config.events

    async def send(records: list[OutRecord]) -> None:
        if not records:
            return
        futures = await sender.send(records)
        for rec in records:
            gen.count(rec, stats)
        # Attribute the batch's size to its last future: enough to bound what's in flight.
        in_flight.extend((f, 0) for f in futures[:-1])
        in_flight.append((futures[-1], len(records)))
        await settle(wait=sum(n for _, n in in_flight) >= _IN_FLIGHT)

    async def settle(wait: bool) -> None:
        if wait and in_flight:
            await asyncio.gather(*(f for f, _ in in_flight))
        still = []
        for f, n in in_flight:
            if f.done():
                f.result()  # raise a delivery error here, not later
            else:
                still.append((f, n))
        in_flight[:] = still

    def remaining() -> int | None:
        return None if total is None else max(total - stats.sent, 0)

    log.info(
        "loadgen: %s events to %s (%d partitions) at %s/s, %d keys, bad %.1f%%, late %.1f%%",
        "unbounded" if total is None else total, config.topic, parts,
        config.rate or "max", config.keys, config.bad_ratio * 100, config.late_ratio * 100,
    )
    try:
        if config.backfill_s > 0:
            n = int(config.rate * config.backfill_s)
            left = remaining()
            n = n if left is None else min(n, left)
            now_ms = int(time.time() * 1000)
            span = int(config.backfill_s * 1000)
            chunk = 10_000
            records = backfill_records(gen, n, now_ms, span)
            for i in range(0, len(records), chunk):
                if stop.is_set():
                    break
                await send(records[i : i + chunk])
        started = time.monotonic()
        base = stats.sent
        last_report = started
        while not stop.is_set() and remaining() != 0:
            now = time.monotonic()
            if config.rate > 0:
                owed = int((now - started) * config.rate) - (stats.sent - base)
            else:
                owed = 5_000
            left = remaining()
            if left is not None:
                owed = min(owed, left)
            if owed > 0:
                now_ms = int(time.time() * 1000)
                await send(gen.batch(owed, now_ms))
            else:
                await settle(wait=False)
            if now - last_report >= config.report_every_s:
                last_report = now
                log.info("loadgen: %s", stats.summary())
            if remaining() == 0:
                break
            if config.rate > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), config.tick_s)
            else:
                await asyncio.sleep(0)
        await settle(wait=True)
    finally:
        await producer.stop()
    return stats


def add_loadgen_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "loadgen",
        help="produce a synthetic stream for the operators in operators/",
        description="Produce clicks or orders at a target rate with current timestamps; "
                    "optionally malformed records (dead-letter demo) and late ones.",
    )
    p.add_argument("--bootstrap", default=None,
                   help="Kafka bootstrap servers (env STREAMREMAT_BOOTSTRAP; default: the "
                        "--kafka-config file's, else 127.0.0.1:9092)")
    add_kafka_client_arguments(p)
    p.add_argument("--kind", choices=KINDS, default="clicks",
                   help="value shape: clicks (operators/clicks.py), sessions (same shape, "
                        "bursty users; operators/sessions.py), orders (operators/top_products.py)")
    p.add_argument("--topic", help="target topic (default: clicks, or orders for --kind orders)")
    p.add_argument("--rate", type=float, default=1000.0,
                   help="events per second (0: as fast as possible); default 1000")
    p.add_argument("--events", type=int, default=None,
                   help="stop after this many events (default: run until SIGTERM/SIGINT)")
    p.add_argument("--keys", type=int, default=1000,
                   help="distinct users (clicks, sessions) or products (orders)")
    p.add_argument("--partitions", type=int, default=None,
                   help="create the topic with this many partitions if it does not exist")
    p.add_argument("--bad-ratio", type=float, default=0.0,
                   help="fraction of malformed records (they go to the dead-letter topic)")
    p.add_argument("--late-ratio", type=float, default=0.0,
                   help="fraction of records stamped --late-by seconds in the past")
    p.add_argument("--late-by", type=float, default=300.0,
                   help="how far in the past late records are stamped, seconds (default 300)")
    p.add_argument("--backfill", type=float, default=0.0, metavar="SECONDS",
                   help="first send rate*SECONDS events stamped over the last SECONDS")
    p.add_argument("--seed", type=int, default=None, help="random seed (deterministic records)")
    p.add_argument("--log-level", default="INFO")
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from streamremat.logging import setup_logging

    setup_logging(args.log_level, "text")
    try:
        config = LoadgenConfig(
            bootstrap=client_config_from_args(args, "127.0.0.1:9092"),
            topic=args.topic or DEFAULT_TOPICS[args.kind],
            kind=args.kind,
            rate=args.rate,
            events=args.events,
            keys=args.keys,
            partitions=args.partitions,
            bad_ratio=args.bad_ratio,
            late_ratio=args.late_ratio,
            late_by_s=args.late_by,
            backfill_s=args.backfill,
            seed=args.seed,
        )
    except (ValueError, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(_main(config))


async def _main(config: LoadgenConfig) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    try:
        stats = await run_loadgen(config, stop)
    except LoadgenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"loadgen: {stats.summary()}", flush=True)
    return 0
