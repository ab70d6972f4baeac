"""kill -9 beyond one tumbling operator: hopping and session windows, an App with
two operators on one source, and ``--guarantee at_least_once`` (issue 10 item 11).

Each scenario is a real worker process killed at seeded random moments while a
feeder writes a few tens of thousands of records; its sinks are compared with the
brute-force reference (``tests/expect.py``). Independent scenarios run
concurrently inside one test, each with its own topics, group and state dirs, so
the suite's wall time grows by the slowest scenario rather than by their sum.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Awaitable, Mapping
from typing import Any

import pytest

from streamremat.runtime.outputs import H_SOURCE, H_STAGE
from tests.fault.checks import (
    check_at_least_once,
    check_output,
    expected_outputs,
    finish,
    read_dead_letters,
    replay_range,
)
from tests.fault.conftest import MakeFaultEnv
from tests.fault.harness import FaultEnv, Feeder

pytestmark = [pytest.mark.fault, pytest.mark.timeout(300)]

#: per scenario: how many keys the feeder spreads records over. Sessions need many
#: keys so that a key's records are often more than the 60 ms gap apart.
KEYS = {"hopping": 20, "session": 100, "two-operators": 60, "quantiles-store": 20,
        "quantiles-recompute": 20}
RECORDS = 24_000  # 6k per partition: ~6 s of event time at 1 ms per record
CHUNK, CHUNK_INTERVAL_S = 1_000, 0.25  # 4k records/s
KILLS = 3


async def kill_while_feeding(
    env: FaultEnv,
    seed: int,
    *extra: str,
    bad_every: int | None = None,
    expect_replay: bool = True,
) -> list[dict[int, tuple[int, int]]]:
    """Run one worker, kill -9 it ``KILLS`` times at seeded points of the input
    while records flow, let it catch up, stop it cleanly. Returns, per kill, the
    source offsets it may re-read.

    The feeder is held a little past the next kill point until the worker is live
    again, so on a slow machine the kills still land mid-stream."""
    rng = random.Random(seed)
    feeder = Feeder(env.bootstrap, env.source, env.partitions, seed=seed,
                    keys=KEYS[env.scenario], bad_every=bad_every)
    step = RECORDS // (KILLS + 1)
    kill_at = [int((i + 1) * step + rng.uniform(-0.3, 0.3) * step) for i in range(KILLS)]
    w = env.worker("a", *extra, checkpoint_interval=2.0)  # most kills need a replay
    w.start()
    await w.wait_live(env.partitions)
    feeder.limit = kill_at[0] + 2 * CHUNK
    feeding = asyncio.create_task(feeder.produce(RECORDS, CHUNK, CHUNK_INTERVAL_S))
    ranges = []
    t0 = time.monotonic()
    for i, at in enumerate(kill_at):
        while feeder.sent < at:
            await asyncio.sleep(0.05)
        w.kill()
        ranges.append(await replay_range(env))
        w.start()
        await w.wait_live(env.partitions)
        feeder.limit = kill_at[i + 1] + 2 * CHUNK if i + 1 < KILLS else None
    await finish(env, feeding, w)
    print(f"{env.scenario}: {KILLS} kills, caught up and stopped in {time.monotonic() - t0:.1f} s")
    restarts = [r for r in env.recoveries() if r.run > 0]
    assert not expect_replay or any(r.replayed > 0 for r in restarts), (
        f"{env.scenario}: no restart replayed"
    )
    assert bad_every is None or feeder.bad_sent > 0
    return ranges


async def check_dead_letters(env: FaultEnv) -> None:
    """Each operator sends each malformed record to its own DLQ once, with the stage
    the reference expects."""
    expected = await expected_outputs(env)
    for op in env.operators:
        want = expected[op.name].dead_letters
        assert want, f"{op.name}: the input had no malformed records"
        dead = await read_dead_letters(env, op)
        got = Counter(dict(r.headers)[H_SOURCE].decode() for r in dead)
        assert got == Counter(want.keys()), (
            f"{op.name}: dead letters differ: missing {sorted(set(want) - set(got))[:5]}, "
            f"unexpected or repeated {sorted((got - Counter(want.keys())).items())[:5]}"
        )
        for r in dead:
            headers = dict(r.headers)
            assert headers[H_STAGE].decode() == want[headers[H_SOURCE].decode()], headers


async def run_all(scenarios: Mapping[str, Awaitable[Any]]) -> dict[str, Any]:
    """Run scenarios concurrently; return their results by name; fail naming every
    scenario that failed."""
    names = list(scenarios)
    results = await asyncio.gather(*scenarios.values(), return_exceptions=True)
    failed = [(n, r) for n, r in zip(names, results, strict=True) if isinstance(r, BaseException)]
    if failed:
        raise AssertionError("\n\n".join(f"scenario {n} failed: {r}" for n, r in failed))
    return dict(zip(names, results, strict=True))


async def test_kill9_hopping_session_two_operators_and_at_least_once(
    make_fault_env: MakeFaultEnv,
) -> None:
    """The workers of all scenarios run and are killed at the same time; the checks
    (the reference is CPU-bound and would stall the other scenarios' event loop)
    come after, one scenario at a time."""
    hopping, session, two = (make_fault_env(s) for s in ("hopping", "session", "two-operators"))
    alo = make_fault_env("two-operators")
    ranges = await run_all({
        "hopping": kill_while_feeding(hopping, 11),
        "session": kill_while_feeding(session, 12),
        "two-operators": kill_while_feeding(two, 13, bad_every=300),
        # Outputs are flushed after each batch but their offsets only committed every
        # 2 s: each kill leaves flushed, uncommitted results to be written again.
        "two-operators at-least-once": kill_while_feeding(
            alo, 14, "--guarantee", "at_least_once", "--commit-interval", "2",
            expect_replay=False,  # checkpoints follow the rare commits: little to replay
        ),
    })
    for env in (hopping, session, two):
        await check_output(env)
    await check_dead_letters(two)
    # At-least-once: nothing lost; a result may be written again only if an unclean
    # stop made the worker re-read the record that closed it (each copy identical).
    extra = await check_at_least_once(alo, ranges["two-operators at-least-once"])
    print(f"at-least-once: extra copies per operator after {KILLS} kills: {extra}")
    assert sum(extra.values()) > 0, "no kill left a result to write twice: the test is moot"
