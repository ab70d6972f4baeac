"""Every pure benchmark runs at a small size and ends with its JSON summary line,
so the harnesses keep working (timings are not asserted: this machine is shared)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from streamremat.core import fastpath

ROOT = Path(__file__).resolve().parents[2]


def _last_json(args: list[str]) -> dict[str, object]:
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=240, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert isinstance(summary, dict)
    return summary


def test_core_throughput_small() -> None:
    summary = _last_json(["bench/core_throughput.py", "--small"])
    rates = summary["events_per_s"]
    assert isinstance(rates, dict)
    assert {"tumbling_count_1k_keys", "tumbling_count_100k_keys", "hopping_sum_1k_keys",
            "session_count_10k_keys"} <= set(rates)
    assert all(isinstance(v, int | float) and v > 0 for v in rates.values())
    # each path (native where it is built), and the goal, on the last line
    by_path = summary["by_path"]
    row = by_path["tumbling_count_sum_1k_keys"]
    assert isinstance(row, dict) and row["pure"] > 0 and row["fast"] > 0
    assert ("native" in row) == ("table" in row) == summary["native_built"]
    assert summary["goals"] == {"tumbling_count_sum_1k_keys": 4_000_000}
    assert isinstance(summary["goals_met"], dict)


@pytest.mark.parametrize("scenario_key", ["scenarios"])
def test_tuner_vs_fixed_small(scenario_key: str) -> None:
    summary = _last_json(["bench/tuner_vs_fixed.py", "--small"])
    scenarios = summary[scenario_key]
    assert isinstance(scenarios, dict)
    assert {"steady", "diurnal", "failure-shift", "growing-state"} <= set(scenarios)
    for result in scenarios.values():
        assert "adaptive" in result["policies"]
        assert {"fixed-10s", "fixed-60s", "fixed-150s", "fixed-300s"} <= set(result["policies"])


def test_remat_sweep_small() -> None:
    summary = _last_json(["bench/remat_sweep.py", "--small"])
    jobs = summary["jobs"]
    assert isinstance(jobs, dict) and set(jobs) == {"quantiles", "sessions"}
    for rows in jobs.values():
        for row in rows:
            assert row["auto"]["rto_misses"] == 0 and row["auto"]["retention_misses"] == 0
            assert row["auto"]["waste_pct"] <= row["store"]["waste_pct"]
    assert summary["goal_met"] is True


def test_state_scale_small() -> None:
    summary = _last_json(["bench/state_scale.py", "--small"])
    runs = summary["runs"]
    assert isinstance(runs, dict) and set(runs) == {
        "count_sum_20000_table", "count_sum_20000_dicts", "collect_2000x10"}
    for row in runs.values():
        assert row["memory_bytes_per_entry"] > 0 and row["checkpoint_bytes"] > 0
    # the native table where it is built, the same checkpoint bytes either way
    native = fastpath.native_module is not None and fastpath.native_enabled
    assert runs["count_sum_20000_table"]["native_table"] is native
    assert runs["count_sum_20000_dicts"]["native_table"] is False
    assert (runs["count_sum_20000_table"]["checkpoint_bytes"]
            == runs["count_sum_20000_dicts"]["checkpoint_bytes"])
    for big in (runs["count_sum_20000_table"], runs["count_sum_20000_dicts"]):
        # The ticker ran beside both. How often it turned is a timing: CI saw a
        # 20k-entry table restore within one 10 ms tick. That the work lets the
        # loop turn is proven speed-free by test_native_state.py::
        # test_encode_and_restore_let_the_gil_go.
        for ticks in (big["checkpoint_ticks"], big["restore_ticks"]):
            assert isinstance(ticks, int) and ticks >= 0
        assert big["checkpoint_stall_ms"] >= 0 and big["restore_stall_ms"] >= 0
