"""A closing whose results take longer to send than the transaction timeout.

Every result of a closing used to go into the one transaction of the offset
that closed it. A window over a few million keys takes longer than aiokafka's
60 s transaction timeout to send: the coordinator aborted the transaction, the
partition was rebuilt, replayed, closed the window again and was aborted
again, forever. Here the producers get a transaction timeout of one second and
the sends are slowed, so a few thousand keys outlast it; the dev broker looks
for timed-out transactions every second
(``transaction.abort.timed.out.transaction.cleanup.interval.ms``).

What commits is checked against the brute-force reference: nothing lost,
nothing twice, also when the owner dies between two of the closing's
transactions and the next one takes over.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

from streamremat.core.closing import RESULT_SLICE
from streamremat.runtime.kafka import ProducerRecord, TopicSpec, consume_all, create_topics, produce
from tests.integration.owners import (
    HOUR_MS,
    Owner,
    expected_results,
    hour_operator,
    records,
    sink_results,
)

KEYS = 6 * RESULT_SLICE + 77
TXN_TIMEOUT_MS = 1_000
#: each record batch handed to the producer waits this long first
SEND_DELAY_S = 0.1


def slow_down(owner: Owner) -> list[int]:
    """Delay every batch ``owner``'s producer is handed; returns the list the
    number of transactions committed is counted in."""
    producer = owner.producer
    send_batch, commit_transaction = producer.send_batch, producer.commit_transaction
    commits = [0]

    async def slowed(*args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(SEND_DELAY_S)
        return await send_batch(*args, **kwargs)

    async def counted() -> None:
        await commit_transaction()
        commits[0] += 1

    producer.send_batch, producer.commit_transaction = slowed, counted
    return commits


async def committed_results(bootstrap: str, sink: str, want: int) -> Any:
    """The sink's committed results, once ``want`` are there (a commit returns
    before its markers reach every partition) or after 30 s."""
    for _ in range(60):
        got = await sink_results(bootstrap, sink)
        if got.total() >= want:
            return got
        await asyncio.sleep(0.5)
    return got


async def setup(bootstrap: str, new_topic: Any) -> tuple[Any, list[ProducerRecord]]:
    source = new_topic(1, {"retention.ms": "-1"})
    op = hour_operator(source)
    await create_topics(bootstrap, [TopicSpec(op.sink, 4)])
    base = (int(time.time() * 1000) // HOUR_MS - 3) * HOUR_MS
    sent = records([b"key-%06d" % i for i in range(KEYS)], base)  # the last one closes
    await produce(bootstrap, source, sent)
    return op, sent


async def test_a_closing_longer_than_the_transaction_timeout_commits(
    kafka_bootstrap: str, new_topic: Any, tmp_path: Path
) -> None:
    op, sent = await setup(kafka_bootstrap, new_topic)
    owner = await Owner.take_over(kafka_bootstrap, op, f"long-{uuid.uuid4().hex[:8]}",
                                  tmp_path / "a", None, transaction_timeout_ms=TXN_TIMEOUT_MS)
    try:
        await owner.run_to(len(sent) - 1)  # every key in the open window, committed
        commits = slow_down(owner)
        started = time.monotonic()
        await owner.run_to(len(sent))  # the closer: its results, then its offset
        took_s = time.monotonic() - started
        assert owner.runner.committed == len(sent)
    finally:
        await owner.close()
    # The closing did outlast the timeout (else this tests nothing), in several
    # transactions.
    assert took_s > 2 * TXN_TIMEOUT_MS / 1000, took_s
    assert commits[0] >= 2, commits
    want = expected_results(sent)
    assert await committed_results(kafka_bootstrap, op.sink, want.total()) == want
    everything = await consume_all(kafka_bootstrap, op.sink, isolation_level="read_uncommitted")
    assert len(everything) == KEYS  # nothing aborted, nothing sent twice


async def test_an_owner_lost_between_a_closings_transactions_is_resumed_exactly(
    kafka_bootstrap: str, new_topic: Any, tmp_path: Path
) -> None:
    """The first owner commits part of the closing, then is gone (its producer
    stops mid-closing, nothing more commits); the next owner replays to the
    committed offset and emits exactly the results not committed yet."""
    op, sent = await setup(kafka_bootstrap, new_topic)
    group = f"resume-{uuid.uuid4().hex[:8]}"
    first = await Owner.take_over(kafka_bootstrap, op, group, tmp_path / "a", None,
                                  transaction_timeout_ms=TXN_TIMEOUT_MS)
    try:
        await first.run_to(len(sent) - 1)
        commits = slow_down(first)

        async def closing() -> None:
            await first.run_to(len(sent))

        running = asyncio.create_task(closing())
        while commits[0] < 2 and not running.done():
            await asyncio.sleep(0.02)
        assert not running.done(), "the closing ended before the owner could be lost"
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
    finally:
        await first.close()
    partial = await sink_results(kafka_bootstrap, op.sink)
    assert 0 < partial.total() < KEYS, partial.total()  # some of it committed, not all

    second = await Owner.take_over(kafka_bootstrap, op, group, tmp_path / "a", None,
                                   transaction_timeout_ms=TXN_TIMEOUT_MS)
    try:
        await second.run_to(len(sent))
        assert second.runner.committed == len(sent)
    finally:
        await second.close()
    want = expected_results(sent)
    assert await committed_results(kafka_bootstrap, op.sink, want.total()) == want
