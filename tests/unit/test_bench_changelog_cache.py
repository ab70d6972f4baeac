"""bench/changelog_cache.py: the caching-changelog model against hand-counted cases,
and the benchmark at CI size (its JSON line; timings are not asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import changelog_cache as cc  # noqa: E402


def _one_key_stream(seconds: int) -> cc.Stream:
    """One key, one event per second from a window boundary on."""
    base = 1_700_000_040_000
    events = [(0, 1, base + 1000 * i, 1000 * i) for i in range(seconds)]
    return cc.Stream([b'"u0"'], [0], events, 1.0)


def test_cache_writes_each_dirty_entry_once_per_commit_interval() -> None:
    # 120 events over two 60 s windows, flushes at 30, 60, 90 s and at the end:
    # w0 is dirty at 30 and 60, w1 at 90 and at the end, so 4 records (not 120).
    out = cc.changelogs(_one_key_stream(120), [30.0], max_bytes=10 * 1024 * 1024)
    cached = out["cached"]["30s"]
    assert cached["records"] == 4
    assert cached["flushes"] == 4
    assert cached["evicted_dirty_records"] == 0
    assert out["per_update"]["records"] == 120
    # the closed window holds the first 60 events: count 60, sum 60
    assert out["closed_windows"] == {(b'"u0"', 1_700_000_040_000): (60, 60)}


def test_a_cache_too_small_for_one_entry_writes_every_update() -> None:
    out = cc.changelogs(_one_key_stream(50), [30.0], max_bytes=1)
    cached = out["cached"]["30s"]
    assert cached["records"] == 50 == cached["evicted_dirty_records"]


def test_record_bytes_are_key_window_start_and_two_varints() -> None:
    # key b'"u0"' (4) + 8 + varint(1) + varint(1) = 14 payload bytes, + 9 framing,
    # + one 61-byte batch header
    out = cc.changelogs(_one_key_stream(1), [30.0], max_bytes=1 << 20)
    assert out["per_update"]["bytes"] == 14 + cc.RECORD_FRAMING + cc.BATCH_HEADER
    assert cc.varint_len(63) == 1 and cc.varint_len(64) == 2 and cc.varint_len(-64) == 1


def test_changelog_cache_small() -> None:
    proc = subprocess.run([sys.executable, "bench/changelog_cache.py", "--small"], cwd=ROOT,
                          capture_output=True, text=True, timeout=240, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["benchmark"] == "changelog_cache"
    rows = summary["results"]
    assert {r["keys"] for r in rows} == {1000, 10000}
    for r in rows:
        assert r["fold_check"]["equal"] and r["fold_check"]["closed_windows"] > 0
        assert r["changelog_per_update"]["records"] == r["events"]
        c30, c10, c01 = (r["changelog_cached"][k]["records"] for k in ("30s", "10s", "0.1s"))
        assert c30 <= c10 <= c01 <= r["events"]
        # arrivals in [0, 120 s): a round at 10, 20, .., 110 s and one at the end
        assert r["checkpoint"]["checkpoints"] == 12 * cc.PARTITIONS
        assert r["checkpoint"]["bytes_per_1M_events"] > 0
