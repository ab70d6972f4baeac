"""kill -9 a worker whose operator keeps exact quantiles (``Quantiles``: every value
of the window in state, the state issue 14 rematerializes), under
``rematerialize="store"`` and ``"recompute"`` at once: at seeded random moments
while records flow, restart it each time; the read_committed sink must equal the
brute-force reference (``tests/unit/reference.py::ref_quantile``, a from-scratch
sort and interpolation), so a lost, repeated or reordered value in a restored or
rebuilt window shows in p50/p99. Under recompute, a restart must have rebuilt
windows by replaying from below its checkpoint offset."""

from __future__ import annotations

import pytest

from tests.fault.checks import check_output
from tests.fault.conftest import MakeFaultEnv
from tests.fault.harness import recovery_summary
from tests.fault.test_scenarios import kill_while_feeding, run_all

pytestmark = [pytest.mark.fault, pytest.mark.timeout(300)]


async def test_kill9_exact_quantiles_match_the_reference(make_fault_env: MakeFaultEnv) -> None:
    store, recompute = make_fault_env("quantiles-store"), make_fault_env("quantiles-recompute")
    await run_all({"store": kill_while_feeding(store, 21),
                   "recompute": kill_while_feeding(recompute, 22)})  # fmt: skip
    for env in (store, recompute):
        await check_output(env)
    restarts = [r for r in recompute.recoveries() if r.run > 0]
    rebuilt = [r for r in restarts if r.checkpoint_offset is not None
               and r.replayed > r.committed_offset - r.checkpoint_offset]  # fmt: skip
    assert rebuilt, recovery_summary(restarts)
