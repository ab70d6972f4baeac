"""Broker loss on the 3-node cluster (``secure_cluster``, SASL_SSL, every topic RF 3).

Mid-run, ``kill -9`` the node that leads a source partition and the checkpoint
topic's partition of it (both created with that node as preferred leader), and
while it is down ``kill -9`` the worker once and start it again; then restart
the node. The output must be exactly the brute-force reference's (nothing lost,
nothing duplicated) and the worker must never exit on its own. Prints how long
the worker took to commit again on the partition whose leader died, and what
it logged meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
import uuid
from collections import Counter
from pathlib import Path

from aiokafka.admin import NewTopic

from streamremat.dev.cluster import DevCluster
from streamremat.runtime.kafka import admin_client, delete_topics
from streamremat.state.kafka import KafkaCheckpointConfig
from tests.fault.checks import (
    assert_same_results,
    committed_offsets,
    read_results,
    read_source,
    reference_results,
    wait_caught_up,
)
from tests.fault.harness import FaultEnv, Feeder

PARTITIONS = 3
VICTIM = 1  # node id: preferred leader of partition 0 of the source and the checkpoints


async def _leader(env: FaultEnv, topic: str, partition: int) -> int:
    async with admin_client(env.bootstrap) as admin:
        (described,) = await admin.describe_topics([topic])
    return int(next(p["leader"] for p in described["partitions"]
                    if p["partition"] == partition))


async def _committed(env: FaultEnv, partition: int) -> int:
    with contextlib.suppress(Exception):  # a coordinator may be moving: ask again
        return (await committed_offsets(env)).get(partition, -1)
    return -1


async def test_leader_broker_killed_mid_run(secure_cluster: DevCluster, tmp_path: Path) -> None:
    admin = secure_cluster.client("admin")
    run = uuid.uuid4().hex[:8]
    env = FaultEnv(bootstrap=admin, source=f"loss-{run}", partitions=PARTITIONS,
                   app_name=f"loss-{run}", workdir=tmp_path,
                   kafka_config=secure_cluster.config.root / "client-streamremat.properties")
    # Node VICTIM first in partition 0's replicas: it leads both partitions 0.
    assignment = {p: [(VICTIM - 1 + p + i) % 3 + 1 for i in range(3)] for p in range(PARTITIONS)}
    checkpoint_config = {**KafkaCheckpointConfig(partitions=PARTITIONS).topic_config(),
                         "min.insync.replicas": "2"}
    async with admin_client(admin) as client:
        await client.create_topics([
            NewTopic(env.source, -1, -1, assignment,
                     {"retention.ms": "-1", "min.insync.replicas": "2"}),
            NewTopic(env.checkpoint_topic, -1, -1, assignment, checkpoint_config),
        ])
    feeder = Feeder(admin, env.source, PARTITIONS, seed=7, step_ms=5)
    feeding = asyncio.create_task(feeder.produce(total=9000, chunk=150, interval_s=0.3))
    try:
        worker = env.worker("a", checkpoint_interval=2.0)
        worker.start()
        await worker.wait_live(PARTITIONS, timeout_s=120)
        await worker.wait_for(lambda w: "checkpoint seq" in w.log_text(), 60, "a checkpoint")
        assert await _leader(env, env.source, 0) == VICTIM
        assert await _leader(env, env.checkpoint_topic, 0) == VICTIM

        log_before = len(worker.log_text())
        at_kill = -1
        while at_kill <= 0:  # partition 0 has committed, and we could read it
            await asyncio.sleep(0.1)
            at_kill = await _committed(env, 0)
        killed_at = time.monotonic()  # within a millisecond of reading ``at_kill``
        assert secure_cluster.kill(VICTIM)
        while await _committed(env, 0) <= at_kill:
            assert worker.running, "worker exited after the broker died\n" + env.dump_logs()
            assert time.monotonic() - killed_at < 180, "no commit 180 s after the kill\n" + \
                env.dump_logs()
            await asyncio.sleep(0.2)
        resumed_s = time.monotonic() - killed_at
        said = Counter(
            re.sub(r"\d+", "N", line.split(" ", 2)[2])[:160]
            for line in worker.log_text()[log_before:].splitlines()
            if " WARNING " in line or " ERROR " in line
        )
        print(f"\nleader node {VICTIM} killed: partition 0 committed again after "
              f"{resumed_s:.1f} s; the worker logged meanwhile (count, message):")
        print("\n".join(f"{n:5d} {text}" for text, n in said.most_common(12)))

        worker.kill()  # kill -9 the worker while the node is still down
        worker.start()
        await worker.wait_live(PARTITIONS, timeout_s=120)
        secure_cluster.start_node(VICTIM)
        await feeding
        await wait_caught_up(env, [worker], timeout_s=240)
        assert worker.running, env.dump_logs()
        code, _ = await worker.stop(timeout_s=60)
        assert code == 0, env.dump_logs()

        expected = reference_results(await read_source(env))
        assert sum(expected.values()) > 500
        assert_same_results(await read_results(env), expected, env.dump_logs())
    finally:
        feeding.cancel()
        with contextlib.suppress(BaseException):
            await feeding
        secure_cluster.start_node(VICTIM)
        await env.cleanup()
        await delete_topics(admin, [env.source])
