"""kill -9 a worker whose operator keeps exact quantiles (``Quantiles``: every value
of the window in state, the state issue 14 rematerializes): at seeded random
moments while records flow, restart it each time; the read_committed sink must
equal the brute-force reference (``tests/unit/reference.py::ref_quantile``, a
from-scratch sort and interpolation), so a lost, repeated or reordered value in
a restored or replayed window shows in p50/p99."""

from __future__ import annotations

import pytest

from tests.fault.checks import check_output
from tests.fault.conftest import MakeFaultEnv
from tests.fault.test_scenarios import kill_while_feeding

pytestmark = [pytest.mark.fault, pytest.mark.timeout(300)]


async def test_kill9_exact_quantiles_match_the_reference(make_fault_env: MakeFaultEnv) -> None:
    env = make_fault_env("quantiles")
    await kill_while_feeding(env, 21)
    await check_output(env)
