"""Broker outage (issue 10 item 6, issue 12 item 4): the only broker stops for ~15 s
mid-run and starts again. The worker must ride it out (its partitions back off
and recover; it never exits) and the output must be exactly the brute-force
reference's (``tests/unit/reference.py``): nothing lost, nothing duplicated.

The test runs its own broker, since it stops it; the session broker is not used.
"""

from __future__ import annotations

import asyncio
import random
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamremat.dev.broker import BrokerConfig, DevBroker, free_port_pair
from streamremat.runtime.kafka import TopicSpec, create_topics
from tests.fault.checks import (
    assert_same_results,
    read_results,
    read_source,
    reference_results,
    wait_caught_up,
)
from tests.fault.harness import FaultEnv, Feeder
from tests.fault.test_faults import wait_split

pytestmark = [pytest.mark.fault, pytest.mark.timeout(420)]

PARTITIONS = 4
OUTAGE_S = 15.0


def _port_pair_outside_ephemeral_range() -> int:
    """Free ports ``p, p + 1`` below the kernel's ephemeral range: while the broker is
    down, a client reconnecting to an ephemeral port can be given that same port as
    its own source port (a TCP self-connect) and the broker could not bind it again."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(max(1024, low - 12_000), low - 2)
        if all(_free(p) for p in (port, port + 1)):
            return port
    return free_port_pair()


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[DevBroker]:
    port = _port_pair_outside_ephemeral_range()
    broker = DevBroker(BrokerConfig(port=port, data_dir=tmp_path / f"kafka-{port}",
                                    stop_with_parent=True))
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


async def test_worker_survives_a_broker_outage(own_broker: DevBroker, tmp_path: Path) -> None:
    bootstrap = own_broker.config.bootstrap
    source = f"loss-{uuid.uuid4().hex[:8]}"
    await create_topics(bootstrap, [TopicSpec(source, PARTITIONS, {"retention.ms": "-1"})])
    env = FaultEnv(bootstrap=bootstrap, source=source, partitions=PARTITIONS,
                   app_name=f"loss-{uuid.uuid4().hex[:8]}", workdir=tmp_path)
    try:
        feeder = Feeder(bootstrap, source, PARTITIONS, seed=12)
        # Two machines; b dies while the broker is down, so a takes b's partitions over
        # (restore, replay) while the broker is still coming back.
        a, b = env.worker("a", "--max-batch", "200"), env.worker("b", "--max-batch", "200")
        a.start()
        b.start()
        await wait_split(env, a, b, timeout_s=90)
        await feeder.produce(6_000, 1_000, 0.25)
        await feeder.produce(20_000, 5_000, 0.0)
        own_broker.stop()
        b.kill()
        await asyncio.sleep(OUTAGE_S)
        assert a.running, "the worker exited while the broker was down\n" + env.dump_logs()
        own_broker.start()
        await a.wait_for(lambda w: w.owned() == set(range(PARTITIONS)), 120,
                         "take-over of the dead worker's partitions")
        await feeder.produce(6_000, 1_000, 0.25)
        await wait_caught_up(env, [a], timeout_s=240)
        code, _ = await a.stop()
        assert code == 0, f"worker exited {code}\n" + env.dump_logs()
        assert len(a.logs) == 1  # one run: it never exited
        expected = reference_results(await read_source(env))
        assert sum(expected.values()) > 100
        assert_same_results(await read_results(env), expected, env.dump_logs())
    finally:
        await env.cleanup()
        print(env.dump_logs(80))
