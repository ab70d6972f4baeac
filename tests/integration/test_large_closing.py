"""A window over many keys closes without holding the event loop, and all its
results commit in the transaction of the offset whose record closed it.

Nothing here is timed. "Without holding the loop" is asserted as: between two
turns of a ticker coroutine, the partition built at most a slice of results
(counted by the operator's ``output`` function). Before, the batch that closed
the window built, serialized and queued every result in one synchronous call,
so the ticker saw them all appear between two of its turns.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import time
import uuid
from pathlib import Path
from typing import Any

from streamremat.core.closing import RESULT_SLICE
from streamremat.core.operator import default_output
from streamremat.runtime.kafka import TopicSpec, consume_all, create_topics, produce
from tests.integration.owners import (
    HOUR_MS,
    Owner,
    expected_results,
    hour_operator,
    records,
    sink_results,
)

KEYS = 5 * RESULT_SLICE + 123


async def test_a_closing_over_many_keys_goes_out_in_slices_in_one_transaction(
    kafka_bootstrap: str, new_topic: Any, tmp_path: Path
) -> None:
    source = new_topic(1, {"retention.ms": "-1"})
    built = 0

    def counted(key: Any, start_ms: int, end_ms: int, value: Any) -> Any:
        nonlocal built
        built += 1
        return default_output(key, start_ms, end_ms, value)

    op = dataclasses.replace(hour_operator(source), output=counted)
    await create_topics(kafka_bootstrap, [TopicSpec(op.sink, 4)])
    base = (int(time.time() * 1000) // HOUR_MS - 3) * HOUR_MS
    sent = records([b"key-%06d" % i for i in range(KEYS)], base)  # the last one closes
    await produce(kafka_bootstrap, source, sent)
    owner = await Owner.take_over(kafka_bootstrap, op, f"closing-{uuid.uuid4().hex[:8]}",
                                  tmp_path / "a", None)
    try:
        await owner.run_to(len(sent) - 1)  # every key in the open window, committed
        assert built == 0
        seen: list[int] = []  # results built, at each turn of the ticker
        done = asyncio.Event()

        async def tick() -> None:
            while not done.is_set():
                seen.append(built)
                await asyncio.sleep(0)

        commits = 0
        commit_transaction = owner.producer.commit_transaction

        async def counted_commit() -> None:
            nonlocal commits
            commits += 1
            await commit_transaction()

        owner.producer.commit_transaction = counted_commit
        ticker = asyncio.create_task(tick())
        await asyncio.sleep(0)
        try:
            await owner.run_to(len(sent))  # the closer: process, flush, commit
        finally:
            done.set()
            await ticker
        seen.append(built)
        assert commits == 1 and owner.runner.committed == len(sent)
    finally:
        await owner.close()

    assert built == KEYS
    steps = [b - a for a, b in itertools.pairwise(seen)]
    assert max(steps) <= RESULT_SLICE, (max(steps), len(seen))
    assert sum(1 for s in steps if s) >= KEYS // RESULT_SLICE
    # Exactly the reference's results, all committed (read_committed), with the offset.
    # (The commit returns before its markers reach every partition: until they do,
    # a read_committed reader stops short.)
    want = expected_results(sent)
    for _ in range(60):
        got = await sink_results(kafka_bootstrap, op.sink)
        if got.total() >= want.total():
            break
        await asyncio.sleep(0.5)
    assert got == want
    everything = await consume_all(kafka_bootstrap, op.sink, isolation_level="read_uncommitted")
    assert len(everything) == KEYS  # no aborted copy
