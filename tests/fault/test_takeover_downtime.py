"""A real take-over measures D from the dead peer's last commit, not from this
worker's own history (its state dir says it was down 20 minutes ago)."""

from __future__ import annotations

import asyncio
import re
import time

from tests.fault.checks import finish
from tests.fault.harness import FaultEnv, Feeder
from tests.fault.test_faults import wait_split

_TUNER = re.compile(r"\[(?P<p>\d+)\]: tuner: .* D [\d.]+s \(p90 (?P<d>[\d.]+)s\)")
_DOWNTIME = re.compile(r"\[(?P<p>\d+)\]: recovered: .* after an unclean stop, "
                       r"downtime (?P<d>[\d.]+) s")


async def test_take_over_downtime_is_the_gap_since_the_peers_last_commit(
    fault_env: FaultEnv,
) -> None:
    env = fault_env
    feeder = Feeder(env.bootstrap, env.source, env.partitions, seed=5)
    a, b = env.worker("a"), env.worker("b")
    # b's state dir says its previous run was last alive 20 minutes ago (a crash, then
    # this restart); workers once took D of every unclean restore within an hour from it.
    b.state_dir.mkdir(parents=True)
    (b.state_dir / f"{env.app_name}.alive").write_text(repr(time.time() - 1200))
    a.start()
    b.start()
    feeding = asyncio.create_task(feeder.produce(60_000, 500, 0.2))
    await wait_split(env, a, b)
    await asyncio.sleep(2.5)  # a commits and checkpoints its partitions
    lost = a.owned()
    assert not feeding.done(), "the peer must die with input flowing (it commits then)"
    killed_at = time.monotonic()
    a.kill()
    await b.wait_for(lambda w: w.owned() == set(range(env.partitions)), 60,
                     "take-over of the dead peer's partitions")
    gap_s = time.monotonic() - killed_at
    await asyncio.sleep(1.5)  # b checkpoints them and logs the tuner's view
    log = b.log_text()
    tuned = {int(m["p"]): float(m["d"]) for m in _TUNER.finditer(log)}
    assert lost <= set(tuned), f"no tuner line for {lost}\n{env.dump_logs()}"
    # The prior is ~5 s (3 s session timeout); one 20-minute sample would be hundreds.
    assert all(tuned[p] < 30 for p in lost), tuned
    measured = {int(m["p"]): float(m["d"]) for m in _DOWNTIME.finditer(log)}
    print(f"take-over {gap_s:.1f} s after the kill; measured downtime {measured}, "
          f"tuner D p90 {tuned}")
    assert set(measured) == lost, measured
    # From a's last commit (<= 0.2 s before the kill) to b's restore (before it is live).
    assert all(1.0 <= d <= gap_s + 1.0 for d in measured.values()), (measured, gap_s)
    await finish(env, feeding, b)
