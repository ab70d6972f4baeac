"""Fault tests on the real broker (DESIGN §5, §6).

Each test runs real worker processes (``tests.fault.apps:app``), injects a
fault, and compares the sink read with ``read_committed`` with what the
brute-force reference (``tests/unit/reference.py``, via ``tests/expect.py``)
computes from the source records, as a multiset of ``(key, start_ms, end_ms,
value)``: nothing lost, nothing duplicated. The engine never computes its own
expectation, so an engine bug cannot cancel out.
"""

from __future__ import annotations

import asyncio
import random
import signal
import time
from collections import Counter

import pytest

from streamremat.runtime.outputs import H_REASON, H_SOURCE, H_STAGE
from streamremat.state.frame import TaskId
from streamremat.state.rocksdb import corrupt_latest
from tests.fault.apps import OPERATOR
from tests.fault.checks import (
    check_output,
    committed_offsets,
    expected_outputs,
    finish,
    read_dead_letters,
)
from tests.fault.harness import FaultEnv, Feeder, WorkerProc, recovery_summary

pytestmark = [pytest.mark.fault, pytest.mark.timeout(300)]

#: records the feeder sends before a two-worker test releases it (both are live)
HELD = 4_000


async def wait_split(env: FaultEnv, a: WorkerProc, b: WorkerProc, timeout_s: float = 60) -> None:
    """Wait until ``a`` and ``b`` each run half of the partitions, live."""
    half = env.partitions // 2
    deadline = time.monotonic() + timeout_s
    while not (len(a.owned()) == half and len(b.owned()) == half
               and not a.owned() & b.owned()):
        for w in (a, b):
            assert w.running, f"worker {w.name} exited\n" + env.dump_logs()
        assert time.monotonic() < deadline, (
            f"no 2/2 split within {timeout_s} s: a {a.owned()}, b {b.owned()}\n"
            + env.dump_logs()
        )
        await asyncio.sleep(0.1)


async def test_kill9_ten_times_gives_the_failure_free_output(fault_env: FaultEnv) -> None:
    """kill -9 one worker at 10 seeded random moments while 200k events flow."""
    env = fault_env
    total, kills = 200_000, 10
    rng = random.Random(20261130)
    feeder = Feeder(env.bootstrap, env.source, env.partitions, seed=1)
    w = env.worker("a", checkpoint_interval=3.0)  # most kills land between checkpoints
    w.start()
    await w.wait_live(env.partitions)
    feeding = asyncio.create_task(feeder.produce(total, 2_500, 0.8))
    sent_at_kill = []
    for _ in range(kills):
        await asyncio.sleep(rng.uniform(0.3, 2.5))
        sent_at_kill.append(feeder.sent)
        w.kill()
        w.start()
        await w.wait_live(env.partitions)
    # The kills hit a moving stream, not the idle tail.
    assert sum(0 < n < total for n in sent_at_kill) >= kills - 2, sent_at_kill
    await finish(env, feeding, w)
    await check_output(env)
    restarts = [r for r in env.recoveries() if r.run > 0]
    replayed_runs = {r.run for r in restarts if r.replayed > 0}
    assert len(replayed_runs) >= kills // 2, recovery_summary(restarts)
    assert any(r.unclean for r in restarts)


async def test_survivor_restores_a_dead_workers_partitions_from_kafka(
    fault_env: FaultEnv,
) -> None:
    """Two machines; one dies for good; the other restores its tasks from the
    compacted checkpoint topic (its own disk has nothing newer)."""
    env = fault_env
    feeder = Feeder(env.bootstrap, env.source, env.partitions, seed=2)
    a, b = env.worker("a"), env.worker("b")
    a.start()
    b.start()
    feeder.limit = HELD  # until both are live: a slow start must not use up the stream
    feeding = asyncio.create_task(feeder.produce(80_000, 2_000, 0.5))
    await wait_split(env, a, b)
    feeder.limit = None
    await asyncio.sleep(2.5)  # b checkpoints (every 1 s) and replicates
    lost = b.owned()
    seen = len(a.recoveries(-1))
    b.kill()
    await a.wait_for(lambda w: w.owned() == set(range(env.partitions)), 60,
                     "take-over of all partitions")
    taken = [r for r in a.recoveries(-1)[seen:] if r.partition in lost]
    assert {r.partition for r in taken} == lost, taken
    assert all(r.source == "kafka" for r in taken), taken
    assert all(r.unclean and r.checkpoint_offset is not None for r in taken), taken
    assert not feeding.done()
    await finish(env, feeding, a)
    await check_output(env)


async def test_zombie_after_sigstop_is_fenced(fault_env: FaultEnv) -> None:
    """Freeze a worker past its session timeout; the other takes over and makes
    progress; the thawed zombie must not commit for the partitions it lost."""
    env = fault_env
    feeder = Feeder(env.bootstrap, env.source, env.partitions, seed=3)
    a, b = env.worker("a"), env.worker("b")
    a.start()
    b.start()
    feeder.limit = HELD  # until both are live: a slow start must not use up the stream
    feeding = asyncio.create_task(feeder.produce(100_000, 2_000, 0.5))
    await wait_split(env, a, b)
    feeder.limit = None
    await asyncio.sleep(1.5)
    lost = b.owned()
    b.signal(signal.SIGSTOP)
    try:
        await a.wait_for(lambda w: w.owned() == set(range(env.partitions)), 60,
                         "take-over of the zombie's partitions")
        before = await committed_offsets(env)
        deadline = time.monotonic() + 30
        while True:  # a commits new records of the partitions it took over
            after = await committed_offsets(env)
            if all(after[p] > before[p] for p in lost):
                break
            assert time.monotonic() < deadline, (before, after)
            await asyncio.sleep(0.2)
    finally:
        b.signal(signal.SIGCONT)
    thawed_at = len(b.log_text())
    await b.wait_for(lambda w: "fenced by a newer owner" in w.log_text()[thawed_at:]
                     or not w.owned() & lost, 30, "the zombie to notice it lost its partitions")
    assert not feeding.done()
    await finish(env, feeding, a, b)
    await check_output(env)
    # Until it is assigned partitions again, the thawed zombie must neither commit
    # (fenced) nor checkpoint the partitions it lost: a late checkpoint would reuse
    # a seq the new owner already wrote to the compacted replica and replace it there.
    thawed = b.log_text()[thawed_at:].split("streamremat.worker: assigned: ")[0]
    fenced = {p for p in lost if f"{env.source}[{p}]: fenced by a newer owner" in thawed}
    late = [line for line in thawed.splitlines() if "checkpoint seq" in line
            and any(f"{OPERATOR}:{env.source}:{p}:" in line for p in lost)]
    print(f"zombie: fenced on {sorted(fenced)} of lost {sorted(lost)}; late checkpoints {late}")
    assert fenced, "the thawed zombie was never fenced\n" + env.dump_logs()
    assert not late, "the thawed zombie checkpointed partitions it lost:\n" + "\n".join(late)


async def test_corrupt_newest_local_checkpoint_falls_back_to_previous(
    fault_env: FaultEnv,
) -> None:
    """The newest local checkpoint is damaged while the worker is stopped and
    there is no replica: restore falls back to the previous one and replays."""
    env = fault_env
    feeder = Feeder(env.bootstrap, env.source, env.partitions, seed=4)
    # One checkpoint soon after going live, then none for 30 s: the clean one at the
    # stop is the newest, and the fallback below it is seconds of records older.
    w = env.worker("a", "--no-replica", checkpoint_interval=30.0)
    w.start()
    await w.wait_live(env.partitions)
    feeding = asyncio.create_task(feeder.produce(60_000, 2_000, 0.4))
    await asyncio.sleep(4.0)
    code, _ = await w.stop()
    assert code == 0, env.dump_logs()
    damaged = {0, 1}
    for p in damaged:
        corrupt_latest(w.rocksdb_path, TaskId(OPERATOR, env.source, p))
    w.start()
    await w.wait_live(env.partitions)
    after = {r.partition: r for r in w.recoveries(-1)}
    for p in damaged:
        r = after[p]
        assert r.source == "rocksdb" and r.checkpoint_offset is not None, r
        assert r.replayed > 0 and r.checkpoint_offset < r.committed_offset, r
    for p in set(range(env.partitions)) - damaged:
        assert after[p].replayed == 0, after[p]
    assert "checkpoint skipped on restore" in w.log_text()
    await finish(env, feeding, w)
    await check_output(env)


async def test_dead_letters_exactly_once_across_a_kill(fault_env: FaultEnv) -> None:
    """Malformed records (not JSON, no field x, no key) go to the DLQ exactly once,
    with the reason header, even with a kill -9 in the middle."""
    env = fault_env
    feeder = Feeder(env.bootstrap, env.source, env.partitions, seed=5, bad_every=150)
    w = env.worker("a", checkpoint_interval=30.0)  # kills land between checkpoints: replay
    w.start()
    await w.wait_live(env.partitions)
    feeding = asyncio.create_task(feeder.produce(80_000, 2_000, 0.4))
    rng = random.Random(5)
    for _ in range(2):
        await asyncio.sleep(rng.uniform(1.5, 3.0))
        w.kill()
        w.start()
        await w.wait_live(env.partitions)
    await finish(env, feeding, w)
    await check_output(env)
    expected = (await expected_outputs(env))[OPERATOR].dead_letters
    assert len(expected) == feeder.bad_sent > 100
    dead = await read_dead_letters(env)
    by_source = Counter(dict(r.headers)[H_SOURCE].decode() for r in dead)
    dup = {k: n for k, n in by_source.items() if n > 1}
    assert not dup, f"dead letters written more than once: {list(dup.items())[:10]}"
    assert set(by_source) == set(expected), (
        f"missing {sorted(set(expected) - set(by_source))[:10]}, "
        f"unexpected {sorted(set(by_source) - set(expected))[:10]}"
    )
    for r in dead:
        headers = dict(r.headers)
        assert headers[H_STAGE].decode() == expected[headers[H_SOURCE].decode()], headers
        assert headers[H_REASON], headers
    assert any(r.replayed > 0 for r in env.recoveries() if r.run > 0)


async def test_sigterm_exits_cleanly_and_restart_replays_nothing(fault_env: FaultEnv) -> None:
    env = fault_env
    feeder = Feeder(env.bootstrap, env.source, env.partitions, seed=6)
    w = env.worker("a")
    w.start()
    await w.wait_live(env.partitions)
    feeding = asyncio.create_task(feeder.produce(40_000, 2_000, 0.4))
    await asyncio.sleep(2.5)  # mid-stream: records keep arriving
    assert not feeding.done()
    code, took = await w.stop(timeout_s=20)
    assert code == 0, env.dump_logs()
    assert took < 10, f"SIGTERM took {took:.1f} s"
    assert "stopped" in w.log_text() and "(unclean)" not in w.log_text()
    w.start()
    await w.wait_live(env.partitions)
    after = w.recoveries(-1)
    assert {r.partition for r in after} == set(range(env.partitions))
    assert all(r.replayed == 0 and not r.unclean for r in after), after
    await finish(env, feeding, w)
    await check_output(env)
    print(f"SIGTERM to exit: {took:.2f} s")
