"""bench/close_scale.py at CI size on the real broker: it runs to its JSON line,
both paths commit every result, and the sliced one lets the loop turn more
often (a count, not a timing: this machine is shared)."""

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
    # 20,000 results in slices of result_slice: the ticker ran at least once per slice
    assert sliced["ticks"] >= 20_000 // summary["result_slice"]
    assert summary["goal_stall_ms"] == 200.0 and isinstance(summary["goal_met"], bool)
