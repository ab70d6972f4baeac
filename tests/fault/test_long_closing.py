"""kill -9 in the middle of a closing committed in several transactions.

One window over many keys on one partition closes; the worker's producers have
a transaction timeout of 100 ms (``--kafka-config``), so its results
commit in several transactions, each with the offset of the closing's batch and
how far the results got. The worker is killed after the first of them, and the
restarted one replays to that offset, closes the window again and emits the
rest: the sink must be exactly the brute-force reference's.
"""

from __future__ import annotations

import asyncio
import time

from aiokafka import AIOKafkaProducer

from streamremat.runtime.client import KafkaClientConfig
from tests.fault.checks import check_output, wait_caught_up
from tests.fault.harness import FaultEnv

#: (the brute-force reference scans every open window per record: keep it small)
KEYS = 8_000
PARTIAL = "a closing committed in part"


async def test_kill9_between_a_closings_transactions(fault_env: FaultEnv) -> None:
    env = fault_env
    config = env.workdir / "kafka.toml"
    config.write_text("[producer]\ntransaction_timeout_ms = 100\n")
    bootstrap = KafkaClientConfig.of(env.bootstrap).bootstrap_servers
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20)
    await producer.start()
    try:
        # Every key in the window [1000, 2000) of partition 0, then one record
        # that closes it.
        for i in range(KEYS):
            await producer.send(env.source, b'{"x": %d}' % (i % 97), key=b"key-%06d" % i,
                                partition=0, timestamp_ms=1_000 + i % 1_000)
        await producer.send_and_wait(env.source, b'{"x": 1}', key=b"closer", partition=0,
                                     timestamp_ms=9_000)
    finally:
        await producer.stop()
    w = env.worker("a", "--kafka-config", str(config))
    w.start()
    started = time.monotonic()
    while PARTIAL not in w.log_text():
        assert w.running, env.dump_logs()
        assert time.monotonic() - started < 120, "no closing committed in part\n" + env.dump_logs()
        await asyncio.sleep(0.02)
    w.kill()
    first = w.log_text()
    assert "recovered" in first and "closing committed in part" in first
    w.start()
    await wait_caught_up(env, [w])
    code, _ = await w.stop()
    assert code == 0, env.dump_logs()
    # The restart resumed a closing committed in part: the offset not past the
    # closer (at offset KEYS).
    restart = w.recoveries(run=1)
    assert any(r.partition == 0 and r.committed_offset <= KEYS for r in restart), restart
    await check_output(env)
