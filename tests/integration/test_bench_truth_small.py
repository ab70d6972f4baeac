"""bench/replay_backlog.py and bench/recovery_machine_loss.py at CI size on the real
broker: they run to their JSON line and what they measure is what they claim
(timings are not asserted: this machine is shared)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _last_json(args: list[str]) -> dict[str, Any]:
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=540,
                          cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert isinstance(summary, dict)
    return summary


@pytest.mark.timeout(600)
def test_bench_replay_backlog_small(kafka_bootstrap: str) -> None:
    summary = _last_json(["bench/replay_backlog.py", "--small", "--bootstrap", kafka_bootstrap])
    per = summary["results"]["1000"]
    whole, backlog = per["whole_topic"], per["backlog"]
    for r in (whole, backlog):
        assert r["events"] == 30_000
        assert r["replayed"] == 30_000  # the whole topic, from the empty checkpoint
        # each replay reader, the native one and aiokafka's records, replayed all of it
        assert {m: v["replayed"] for m, v in r["by_reader"].items()} == {
            "native": [30_000], "records": [30_000]}
        assert r["live_events_per_s"] > 0 and r["replay_events_per_s"] > 0
    # the whole topic spans ~17 windows: most of it is behind the horizon; the
    # backlog lies in one open window: nothing is
    assert whole["skippable"] > 0.8
    assert backlog["skippable"] == 0.0
    goal = per["goal_backlog_replay_over_live"]
    assert goal["goal"] == 2.0 and goal["measured"] == backlog["replay_over_live"]


@pytest.mark.timeout(600)
def test_bench_recovery_machine_loss_small(kafka_bootstrap: str, tmp_path: Path) -> None:
    summary = _last_json(["bench/recovery_machine_loss.py", "--small", "--engines",
                          "streamremat", "--bootstrap", kafka_bootstrap,
                          "--work-dir", str(tmp_path)])
    sr = summary["results"]["streamremat"]
    assert sr["events"] == 20_000 and sr["recovery_s"] > 0
    # every partition came back from the replica topic (the local state was deleted)
    restored = sr["restored"]
    assert set(restored) == {"0", "1", "2", "3"}
    assert all(r["from"] == "kafka" for r in restored.values())
    assert sum(int(r["checkpoint_offset"]) for r in restored.values()) == 20_000
    # restored state + the appended tail: every event is in the results
    assert sr["check"] == {"expected_count": 20_100, "results_count": 20_100, "equal": True}
