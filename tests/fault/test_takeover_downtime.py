"""A real take-over measures D from the dead peer's last commit, not from this
worker's own history (its state dir says it was down 20 minutes ago)."""

from __future__ import annotations

import asyncio
import re
import time

from streamremat.runtime.commit_meta import decode_commit_metadata
from streamremat.runtime.kafka import admin_client
from tests.fault.apps import OPERATOR
from tests.fault.checks import finish
from tests.fault.harness import FaultEnv, Feeder
from tests.fault.test_faults import wait_split

_TUNER = re.compile(r"\[(?P<p>\d+)\]: tuner: .* D [\d.]+s \(p90 (?P<d>[\d.]+)s\)")
_DOWNTIME = re.compile(r"\[(?P<p>\d+)\]: recovered: .* after an unclean stop, "
                       r"downtime (?P<d>[\d.]+) s")


async def _last_commits_s(env: FaultEnv) -> dict[int, float]:
    """Per source partition, the wall time of the group's last commit (its metadata)."""
    async with admin_client(env.bootstrap) as admin:
        found = await admin.list_consumer_group_offsets(env.group)
    out = {}
    for tp, om in found.items():
        at_ms = decode_commit_metadata(om.metadata).at_ms
        if tp.topic == env.source and at_ms is not None:
            out[tp.partition] = at_ms / 1000
    return out


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
    # The stream is held until both are live (a slow start must not use it up): the
    # peer must die with input flowing, so that it commits until then.
    feeder.limit = 2_000
    feeding = asyncio.create_task(feeder.produce(60_000, 500, 0.2))
    await wait_split(env, a, b)
    feeder.limit = None
    lost = a.owned()
    await a.wait_for(lambda w: all(f"{OPERATOR}:{env.source}:{p}: checkpoint seq" in w.log_text()
                                   for p in lost), 60, "a checkpoint of each of its partitions")
    await asyncio.sleep(1.0)  # records flow: a commits them every 0.2 s
    assert not feeding.done(), "the peer must die with input flowing (it commits then)"
    killed_at, killed_wall = time.monotonic(), time.time()
    a.kill()
    seen = len(b.log_text())
    # Read before b can commit: a's session (3 s) must expire before b takes over.
    last_commit = await _last_commits_s(env)
    assert lost <= set(last_commit) and all(last_commit[p] <= killed_wall for p in lost), (
        last_commit, killed_wall)
    await b.wait_for(lambda w: w.owned() == set(range(env.partitions)), 60,
                     "take-over of the dead peer's partitions")
    gap_s, taken_wall = time.monotonic() - killed_at, time.time()
    # b checkpoints them and logs the tuner's view, usually within a second.
    await b.wait_for(lambda w: lost <= {int(m["p"]) for m in _TUNER.finditer(w.log_text()[seen:])},
                     60, f"a tuner line for each of {sorted(lost)}")
    log = b.log_text()[seen:]
    tuned = {int(m["p"]): float(m["d"]) for m in _TUNER.finditer(log)}
    # The prior is ~5 s (3 s session timeout); one 20-minute sample would be hundreds.
    assert all(tuned[p] < 30 for p in lost), tuned
    measured = {int(m["p"]): float(m["d"]) for m in _DOWNTIME.finditer(log)}
    print(f"take-over {gap_s:.1f} s after the kill; measured downtime {measured}, "
          f"tuner D p90 {tuned}; a's last commit "
          f"{killed_wall - max(last_commit[p] for p in lost):.2f} s before the kill")
    assert set(measured) == lost, measured
    # From a's last commit (or a later checkpoint) to b's restore (before it is live):
    # at least the 3 s session timeout minus a commit interval, at most until b was seen
    # live.
    assert all(1.0 <= d <= taken_wall - last_commit[p] + 0.1 for p, d in measured.items()), (
        measured, last_commit, taken_wall)
    await finish(env, feeding, b)
