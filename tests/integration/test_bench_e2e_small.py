"""Smoke test of ``bench/e2e_throughput.py`` at a tiny size on the session's broker.

Checks the JSON summary's keys and that the counts are right (every event raw,
live-committed and replayed; the sink holds exactly the expected window results;
replay emits nothing), never the timings.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "e2e_throughput.py"
EVENTS = 4000
KEYS = 50


def test_e2e_bench_small(kafka_bootstrap: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--events", str(EVENTS), "--keys", str(KEYS),
         "--checkpoint-interval", "1", "--bootstrap", kafka_bootstrap,
         "--work-dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])

    for key in ("raw_events_per_s", "live_events_per_s", "replay_events_per_s",
                "live_over_raw", "replay_over_live", "goals", "goals_met", "seconds",
                "checkpoint", "changelog", "changelog_over_checkpoint", "live_breakdown",
                "catch_up_spread"):
        assert key in summary, key
    assert summary["bench"] == "e2e_throughput"
    assert summary["events"] == EVENTS and summary["keys"] == KEYS
    for key in ("raw_events_per_s", "live_events_per_s", "replay_events_per_s"):
        assert summary[key] > 0, key

    processed = summary["processed"]
    assert processed["raw"] == EVENTS
    assert processed["live_committed"] == EVENTS
    # A rebalance mid-replay restarts it from the checkpoint taken on revocation.
    assert processed["replayed"] == EVENTS or summary["replay_rebalances"] > 0
    assert summary["worker_exit_codes"] == [0, 0]

    results = summary["results"]
    assert results["ok"], results
    assert results["emitted"] == results["expected"] > 0
    assert results["n_sum"] == results["expected_n_sum"]
    assert summary["replay_emitted"] == 0

    checkpoint, changelog = summary["checkpoint"], summary["changelog"]
    assert checkpoint["count"] >= 1 and checkpoint["bytes"] > 0
    assert checkpoint["interval_s"] == 1
    assert changelog["records"] == EVENTS
    assert changelog["bytes"] > changelog["payload_bytes"] > 0
