"""The retention bound of the rematerialization plans starts from the broker's
time index (``RetentionBound.seed_from``), so a new owner knows how long the
offsets appended before it started are kept.

Before, a new owner had no sample of the source's end offset, counted every
offset below its first checkpoint as outside retention, and forced every window
open across the restart to be stored (``first offset outside retention``)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition

from streamremat import Count, Operator, Sum, Tumbling
from streamremat.runtime.kafka import ProducerRecord, TopicSpec, create_topics, produce
from streamremat.runtime.remat_plans import SEED_SAMPLES, broker_samples
from streamremat.tuning.remat import Reason
from tests.integration.owners import Owner

MINUTE = 60_000
RETENTION_MS = 120 * MINUTE
OLD = 100  # records older than a checkpoint's replay may rely on


def _rows(now_ms: int) -> list[ProducerRecord]:
    """``OLD`` records 110 minutes old (inside the 2 h retention, but not for the
    hour a checkpoint interval plus its recovery needs), then 200 over the last
    30 minutes."""
    old = [ProducerRecord(b"k%d" % (i % 7), orjson.dumps({"x": i}), now_ms - 110 * MINUTE + i, 0)
           for i in range(OLD)]
    new = [ProducerRecord(b"k%d" % (i % 7), orjson.dumps({"x": i}),
                          now_ms - 30 * MINUTE + i * 8_000, 0) for i in range(200)]
    return old + new


async def test_broker_samples_are_the_time_index(kafka_bootstrap: str, new_topic: Any) -> None:
    source = new_topic(1, {"retention.ms": str(RETENTION_MS)})
    now_ms = int(time.time() * 1000)
    rows = _rows(now_ms)
    await produce(kafka_bootstrap, source, rows)
    tp = TopicPartition(source, 0)
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap, group_id=None)
    await consumer.start()
    try:
        samples = await broker_samples(consumer, tp, RETENTION_MS / 1000, now_ms / 1000)
    finally:
        await consumer.stop()
    assert len(samples) == SEED_SAMPLES
    for wall_s, offset in samples:
        # the first offset whose timestamp is >= the sample's time; the end when none is
        want = next((i for i, r in enumerate(rows) if (r.timestamp_ms or 0) >= wall_s * 1000),
                    len(rows))
        assert offset == want, (wall_s, offset, want)
    assert [w for w, _ in samples] == sorted(w for w, _ in samples)
    assert samples[-1] == (now_ms / 1000, len(rows))


async def test_a_new_owner_may_recompute_windows_older_than_itself(
    kafka_bootstrap: str, new_topic: Any, tmp_path: Path
) -> None:
    source = new_topic(1, {"retention.ms": str(RETENTION_MS)})
    op = Operator(name="sums", source=source, sink=f"{source}-out", window=Tumbling(30 * MINUTE),
                  aggregate={"n": Count(), "total": Sum("x")}, rematerialize="recompute")
    await create_topics(kafka_bootstrap, [TopicSpec(op.sink, 1)])
    now_ms = int(time.time() * 1000)
    rows = _rows(now_ms)
    await produce(kafka_bootstrap, source, rows)
    owner = await Owner.take_over(kafka_bootstrap, op, f"seed-{uuid.uuid4().hex[:8]}",
                                  tmp_path / "a", None, retention_s=RETENTION_MS / 1000)
    try:
        await owner.run_to(len(rows))
        await owner.runner.checkpoint()
        [plan] = owner.runner.last_plans.values()
    finally:
        await owner.close()
    # The open window holds only new records (the old ones' windows closed).
    [group] = plan.groups
    assert group.first_offset is not None and group.first_offset >= OLD
    assert not group.store and group.reason is Reason.REQUESTED_RECOMPUTE, plan
    assert plan.replay_from == group.first_offset < len(rows)
