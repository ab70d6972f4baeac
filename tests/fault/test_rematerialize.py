"""Recovery with a rematerialization plan on the real broker (DESIGN §9).

A worker runs a session ``Collect`` (state that grows with the data) under
``rematerialize="recompute"``: its checkpoints hold the sessions' first offsets
instead of their values. It is killed -9 and restarted while records flow; the
sink must equal the brute-force reference, the restarts must have rebuilt the
sessions by replaying from below the checkpoint offset, and the checkpoints
must be a fraction of what the same job writes under ``"store"``.
"""

from __future__ import annotations

import asyncio
import random
import re

import pytest

from tests.fault.checks import check_output, finish
from tests.fault.conftest import MakeFaultEnv
from tests.fault.harness import FaultEnv, Feeder, recovery_summary

pytestmark = [pytest.mark.fault, pytest.mark.timeout(300)]

CHECKPOINT = re.compile(r"checkpoint seq \d+ (?:full|delta) at offset \d+: (\d+) bytes")

TOTAL = 20_000


def checkpoint_bytes(env: FaultEnv) -> int:
    return sum(int(m.group(1)) for w in env.workers for path in w.logs
               for m in CHECKPOINT.finditer(path.read_text(errors="replace")))


async def run(env: FaultEnv, kills: int) -> None:
    rng = random.Random(20261201)
    feeder = Feeder(env.bootstrap, env.source, env.partitions, seed=3)
    w = env.worker("a", checkpoint_interval=1.0)
    w.start()
    await w.wait_live(env.partitions)
    feeding = asyncio.create_task(feeder.produce(TOTAL, 1_000, 0.4))
    for _ in range(kills):
        await asyncio.sleep(rng.uniform(1.5, 2.5))
        w.kill()
        w.start()
        await w.wait_live(env.partitions)
    await finish(env, feeding, w)
    await check_output(env)


async def test_recompute_sessions_survive_kill9_with_small_checkpoints(
    make_fault_env: MakeFaultEnv,
) -> None:
    recompute = make_fault_env("collect-recompute")
    await run(recompute, kills=2)
    restarts = [r for r in recompute.recoveries() if r.run > 0]
    # Rebuilt by the extra replay: a restart read from below its checkpoint offset.
    rebuilt = [r for r in restarts if r.checkpoint_offset is not None
               and r.replayed > r.committed_offset - r.checkpoint_offset]
    assert rebuilt, recovery_summary(restarts)

    store = make_fault_env("collect-store")
    await run(store, kills=0)
    stored, recomputed = checkpoint_bytes(store), checkpoint_bytes(recompute)
    print(f"checkpoint bytes: store {stored}, recompute {recomputed}")
    assert recomputed * 3 < stored, (stored, recomputed)


async def test_a_clean_stop_stores_every_window_so_the_restart_replays_nothing_extra(
    make_fault_env: MakeFaultEnv,
) -> None:
    """The checkpoint written at a clean stop (or a revocation) is restored for
    certain, so it stores even the groups ``recompute`` leaves out elsewhere: the
    restart must not replay from below it (before: the next owner replayed the
    same recompute range after every handover, and a group rebalancing faster
    than that replay never got live)."""
    env = make_fault_env("collect-recompute")
    feeder = Feeder(env.bootstrap, env.source, env.partitions, seed=5)
    w = env.worker("a", checkpoint_interval=1.0)
    w.start()
    await w.wait_live(env.partitions)
    feeding = asyncio.create_task(feeder.produce(TOTAL, 2_000, 0.3))
    await asyncio.sleep(1.5)
    code, _ = await w.stop()
    assert code == 0, env.dump_logs()
    w.start()
    await w.wait_live(env.partitions)
    restarts = [r for r in env.recoveries() if r.run > 0]
    assert restarts and all(not r.unclean for r in restarts), recovery_summary(restarts)
    extra = [r for r in restarts if r.checkpoint_offset is not None
             and r.replayed > r.committed_offset - r.checkpoint_offset]
    assert not extra, recovery_summary(restarts)
    await finish(env, feeding, w)
    await check_output(env)
