"""bench/close_scale.py at CI size on the real broker: it runs to its JSON line,
both paths commit every result, and each run reports its figures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(600)
def test_bench_close_scale_small(kafka_bootstrap: str) -> None:
    done = subprocess.run([sys.executable, "bench/close_scale.py", "--small", "--bootstrap",
                           kafka_bootstrap], capture_output=True, text=True, timeout=540,
                          cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    sliced, one_go = summary["runs"]["sliced_20000"], summary["runs"]["one_go_20000"]
    assert sliced["results_checked"] is True and one_go["results_checked"] is True
    # That the loop turns between slices is tests/integration/test_large_closing.py's
    # check (results sent per turn, a count). Here only that the bench measures: its
    # 10 ms ticker need not wake between two fast slices (CI: 18 ticks, 20 slices).
    for run in (sliced, one_go):
        assert run["ticks"] >= 1 and run["longest_stall_ms"] >= 0 and run["close_s"] > 0
    assert summary["goal_stall_ms"] == 200.0 and isinstance(summary["goal_met"], bool)
