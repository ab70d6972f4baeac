"""The worker's group consumer, and one round of records for the live loop, fair
across partitions.

aiokafka's ``getmany(max_records=N)`` drains its fetch buffers in the order they
arrived: with a backlog, one partition's buffer fills whole batches while the
others wait (seen: partitions 1 and 3 fully committed while 0 and 2 had not
started). A round instead takes at most ``N // n`` records from each of the
``n`` partitions that fetch, so every backlogged partition moves every round.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from streamremat.runtime.raw_replay import RawTurn
from streamremat.runtime.settings import WorkerSettings


def group_consumer(s: WorkerSettings, group_id: str) -> AIOKafkaConsumer:
    """The worker's consumer (not started): no auto-commit, ``read_committed``."""
    return AIOKafkaConsumer(
        group_id=group_id,
        enable_auto_commit=False,
        # Never move a position by itself: a fetch outside the log raises, and
        # runtime/gaps.py applies --on-retention-gap (DESIGN §5).
        auto_offset_reset="none",
        isolation_level="read_committed",
        **s.client.consumer_kwargs(
            client_id=f"streamremat-{s.worker_id}",
            session_timeout_ms=s.session_timeout_ms,
            heartbeat_interval_ms=s.heartbeat_interval_ms,
            max_poll_interval_ms=max(300_000, s.session_timeout_ms * 3),
            fetch_max_bytes=16 * 1024 * 1024,
            max_partition_fetch_bytes=4 * 1024 * 1024,
        ),
    )


@dataclass(frozen=True)
class Round:
    batches: dict[TopicPartition, list[Any]]
    #: every fetching partition gave its full share: the consumer is behind, so the
    #: round ran at full throughput (what the tuner may use as replay speed)
    full: bool
    #: raised while topping up, after ``batches`` were taken: handle it after them
    error: BaseException | None = None


async def fetch_round(consumer: Any, max_records: int, timeout_ms: int = 100,
                      fair: bool = True, raw: RawTurn | None = None) -> Round:
    """Wait up to ``timeout_ms`` for records, then top up from every other fetching
    partition with what is already buffered; at most ``max_records`` in all. An
    error of the first fetch is raised (nothing was consumed); one of a top-up is
    returned with the records already taken, which must be processed first.
    ``raw``: the native replay reader folds what is fetched for the partitions it
    replays first (``runtime/raw_replay.py``); ``getmany`` leaves those to it."""
    owned: set[TopicPartition] = set()
    if raw is not None:
        took, owned = await raw.turn(consumer)
        if owned:
            if not took:  # getmany can't wait for what the reader takes: wait for any fetch
                await raw.wait(timeout_ms / 1000)
                took, owned = await raw.turn(consumer)
            timeout_ms = 0
    active = [tp for tp in consumer.assignment()
              if tp not in consumer.paused() and tp not in owned]
    if owned and not active:
        return Round({}, False)
    only = active if owned else ()
    if not fair:
        got = await consumer.getmany(*only, timeout_ms=timeout_ms, max_records=max_records)
        return Round(got, sum(len(r) for r in got.values()) >= max_records)
    share = max(1, max_records // max(1, len(active)))
    batches: dict[TopicPartition, list[Any]] = await consumer.getmany(
        *only, timeout_ms=timeout_ms, max_records=share
    )
    error: BaseException | None = None
    for tp in active:
        if tp not in batches:
            try:
                batches.update(await consumer.getmany(tp, timeout_ms=0, max_records=share))
            except Exception as exc:  # e.g. out of range: the records above were consumed
                error = exc
                break
    full = bool(active) and sum(len(r) for r in batches.values()) >= share * len(active)
    return Round(batches, full, error)
