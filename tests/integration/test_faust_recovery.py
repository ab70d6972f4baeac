"""A faust partition recovers as a worker's does: its retention bound starts from
the broker's time index (``RetentionBound.seed_from``), so a restart does not
force every open window into the checkpoint, and the offsets it lists come from
the bridge's own client, not through faust's consumer thread.

Before, the bridge's positioner listed no end offsets nor times: the bound of a
new owner had no sample, counted every offset below its first checkpoint as
outside retention, and forced the open windows to be stored (the worker's
``tests/integration/test_retention_seed.py`` case, in faust).
The partition is the bridge's ``FaustPartition`` on the real broker.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from streamremat import Count, Operator, Sum, Tumbling
from streamremat.core.topology import compile_app
from streamremat.metrics.sensor import Sensor
from streamremat.runtime.kafka import TopicSpec, create_topics, produce, retention_s, topic_config
from streamremat.runtime.lifecycle import Phase
from streamremat.runtime.scheduling import CheckpointScheduler
from streamremat.runtime.settings import Guarantee
from streamremat.state.rocksdb import RocksDBCheckpointStore
from streamremat.tuning.remat import Reason
from tests.integration.owners import settings
from tests.integration.test_retention_seed import MINUTE, OLD, RETENTION_MS, _rows

pytest.importorskip("faust", reason="the faust extra is part of `make venv`")
from streamremat.integrations.faust.bridge import FaustPartition, _Positioner


async def test_a_faust_partition_may_recompute_windows_older_than_itself(
    kafka_bootstrap: str, new_topic: Any, tmp_path: Path
) -> None:
    source = new_topic(1, {"retention.ms": str(RETENTION_MS)})
    op = Operator(name="sums", source=source, sink=f"{source}-out", window=Tumbling(30 * MINUTE),
                  aggregate={"n": Count(), "total": Sum("x")}, rematerialize="recompute")
    await create_topics(kafka_bootstrap, [TopicSpec(op.sink, 1)])
    rows = _rows(int(time.time() * 1000))
    await produce(kafka_bootstrap, source, rows)

    tp = TopicPartition(source, 0)
    s = dataclasses.replace(settings(kafka_bootstrap, tmp_path), guarantee=Guarantee.AT_LEAST_ONCE)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all",
                                enable_idempotence=True)  # as the bridge makes them
    offsets = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap, group_id=None,
                               enable_auto_commit=False)
    reader = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap, enable_auto_commit=False)
    local = RocksDBCheckpointStore(tmp_path / "ck.rocksdb")
    for client in (producer, offsets, reader):
        await client.start()
    runner = FaustPartition(
        tp, compile_app(op).stages, settings=s, group_id="faust-recovery", producer=producer,
        local=local, replica=None, scheduler=CheckpointScheduler(s.checkpoints),
        sensor=Sensor(), retention_s=retention_s(await topic_config(kafka_bootstrap, source)),
    )

    async def never_committed(_tp: TopicPartition) -> tuple[int | None, str]:
        return None, ""

    try:
        positioner = _Positioner(offsets)
        await runner.recover(positioner, never_committed)
        assert runner.phase is Phase.LIVE and positioner.seeks == {tp: 0}
        reader.assign([tp])
        reader.seek(tp, positioner.seeks[tp])
        fetched: list[Any] = []
        while len(fetched) < len(rows):
            fetched.extend((await reader.getmany(tp, timeout_ms=1_000)).get(tp, []))
        runner.process(fetched)
        await runner.deliver()
        runner.committed_at(runner.position)  # as after faust's commit at the position
        await runner.checkpoint()
        [plan] = runner.last_plans.values()
    finally:
        await runner.close()
        for client in (producer, offsets, reader):
            await client.stop()
        await local.close()
    # The open window holds only new records (the old ones' windows closed): it is
    # recomputed from the source, as requested, not stored for want of a bound.
    [group] = plan.groups
    assert group.first_offset is not None and group.first_offset >= OLD
    assert not group.store and group.reason is Reason.REQUESTED_RECOMPUTE, plan
    assert plan.replay_from == group.first_offset < len(rows)
