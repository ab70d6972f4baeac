"""Smoke test of ``bench/rematerialize.py`` at its CI size on the session's broker:
every job under every mode ran its kills on the real broker and reported its
figures, and the simulator's goal checks hold (timings are not asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_rematerialize_bench_small(kafka_bootstrap: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "rematerialize.py"), "--small",
         "--bootstrap", kafka_bootstrap, "--work-dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["bench"] == "rematerialize"
    real = summary["real_broker"]
    assert set(real) == {"quantiles", "sessions"}
    for job, modes in real.items():
        assert set(modes) == {"store", "recompute", "auto"}, job
        for mode, f in modes.items():
            where = f"{job}/{mode}"
            assert f["exit_code"] == 0, where
            assert f["records"] > 0 and f["checkpoints"] > 0, where
            assert f["checkpoint_bytes_per_s"] > 0 and f["checkpoint_overhead_pct"] > 0, where
            assert f["kills"] == summary["size"]["kills"] == len(f["recovery_wall_s"]), where
            assert f["recovery_wall_s_median"] >= f["recovery_engine_s_median"] >= 0, where
    sim = summary["simulator"]
    assert set(sim["jobs"]) == {"quantiles", "sessions"}
    assert sim["auto_never_misses_rto_or_retention"] is True
    assert sim["goal_met"] is True
