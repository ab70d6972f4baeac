"""Store vs recompute vs the planner (``auto``), swept over lambda and the RTO.

The analytic half of issue 14's benchmark: it evaluates the planner
(``streamremat.tuning.remat.plan``) on the expected-waste objective of DESIGN §8
(the real-broker half — checkpoint bytes/s and recovery after kill -9 — needs
recovery with a plan, which is not built yet). Two jobs, checkpointed every
``T`` seconds over a few hours; at each checkpoint the open windows are groups
with known bytes and first offsets:

* ``quantiles``: exact p50/p99 per key per 10-minute tumbling window, 10k keys:
  one group (the open window), 8 bytes per value plus ~40 per key;
* ``sessions``: ``Collect`` per user session, sessions up to 2 h long and
  staggered: 200 groups (close times) of different ages, 8 bytes per item, on
  a topic that retains 1 h (sessions older than that must be stored).

Per checkpoint, a strategy's expected waste (fraction of capacity) is
``(C0 + stored bytes * cost per byte) / T + lambda * (D + (T/2 + L)/sigma +
extra replay / mu)``, and its worst-case recovery ``D + (r(T+L) + extra + rD) /
(mu_low - r)`` is checked against the RTO; the figure per point is the mean over
the checkpoints. The last stdout line is one JSON object with every point and
the goal checks: auto within 5 % of the better *feasible* pure strategy (one
that never misses the RTO or retention) everywhere, strictly better than both
somewhere, never missing the RTO or retention.

Usage: python bench/remat_sweep.py [--hours 4] [--plot PATH] [--small]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from streamremat.tuning.model import recovery_from_backlog
from streamremat.tuning.remat import PlanInputs, Rematerialize, WindowCandidate, plan

MODES = {"store": Rematerialize.STORE, "recompute": Rematerialize.RECOMPUTE,
         "auto": Rematerialize.AUTO}


@dataclass(frozen=True)
class Job:
    name: str
    rate_eps: float
    retention_s: float | None
    #: (seconds since start) -> open groups as (group id, bytes, age of first record in s)
    groups: Callable[[float], list[tuple[int, int, float]]]


def quantiles_job(rate: float = 5_000.0, keys: int = 10_000, window_s: float = 600.0) -> Job:
    def groups(t: float) -> list[tuple[int, int, float]]:
        age = t % window_s
        n = rate * age
        return [(int(t // window_s), int(8 * n + 40 * min(keys, n)), age)]

    return Job("quantiles", rate, None, groups)


def sessions_job(rate: float = 2_000.0, phases: int = 200, length_s: float = 7_200.0) -> Job:
    per_phase = rate / phases

    def groups(t: float) -> list[tuple[int, int, float]]:
        out = []
        for g in range(phases):
            age = (t + g * length_s / phases) % length_s  # staggered session starts
            out.append((g, int(8 * per_phase * age), age))
        return out

    return Job("sessions", rate, 3_600.0, groups)


@dataclass(frozen=True)
class Point:
    waste: float
    rto_misses: int
    retention_misses: int
    bytes_per_s: float


def evaluate(job: Job, mode: Rematerialize, lam: float, rto_s: float, hours: float,
             interval_s: float = 60.0) -> Point:
    r, mu = job.rate_eps, 20.0 * job.rate_eps
    mu_low, d, lat, c0, per_byte = 0.8 * mu, 10.0, 1.0, 0.05, 2e-8
    sigma = mu / r
    base = lam * (d + (interval_s / 2 + lat) / sigma) + c0 / interval_s
    total = misses = gone = 0.0
    stored_bytes = 0.0
    steps = int(hours * 3600 / interval_s)
    for i in range(1, steps + 1):
        t = i * interval_s
        c = int(r * t)
        safe = None
        if job.retention_s is not None:  # kept until the next checkpoint is durable
            safe = max(0, int(c - r * (job.retention_s - interval_s - lat)))
        inputs = PlanInputs(
            checkpoint_offset=c, byte_cost_s=per_byte, interval_s=interval_s,
            failure_rate_per_s=lam, replay_rate_eps=mu, replay_rate_low_eps=mu_low,
            ingest_rate_eps=r, downtime_p90_s=d, worst_backlog_records=r * (interval_s + lat),
            rto_s=rto_s, safe_from_offset=safe, replay_topic=job.name,
        )
        cands = [WindowCandidate(g, b, max(0, c - int(r * age)))
                 for g, b, age in job.groups(t)]
        p = plan(inputs, cands, mode)
        worst = recovery_from_backlog(d, r * (interval_s + lat) + p.extra_replay_records, r,
                                      mu_low)
        misses += worst > rto_s
        gone += safe is not None and p.replay_from < safe
        total += p.plan_cost + base
        stored_bytes += p.bytes_stored
    return Point(total / steps, int(misses), int(gone), stored_bytes / (steps * interval_s))


def sweep(hours: float, lams: list[float], rtos: list[float]) -> dict[str, object]:
    jobs = [quantiles_job(), sessions_job()]
    out: dict[str, object] = {}
    within = better = safe = True
    better_somewhere = False
    for job in jobs:
        rows = []
        for lam in lams:
            for rto in rtos:
                pts = {name: evaluate(job, mode, lam, rto, hours) for name, mode in MODES.items()}
                feasible = [pts[n].waste for n in ("store", "recompute")
                            if pts[n].rto_misses == 0 and pts[n].retention_misses == 0]
                best_pure = min(feasible) if feasible else math.inf
                auto = pts["auto"]
                within = within and auto.waste <= 1.05 * best_pure
                strictly = auto.waste < min(pts["store"].waste, pts["recompute"].waste) * 0.999
                better_somewhere = better_somewhere or (strictly and auto.rto_misses == 0)
                safe = safe and auto.rto_misses == 0 and auto.retention_misses == 0
                rows.append({
                    "mtbf_h": round(1 / lam / 3600, 3), "rto_s": rto,
                    **{n: {"waste_pct": round(100 * p.waste, 4), "rto_misses": p.rto_misses,
                           "retention_misses": p.retention_misses,
                           "checkpoint_bytes_per_s": round(p.bytes_per_s)}
                       for n, p in pts.items()},
                })
        out[job.name] = rows
    better = better_somewhere
    return {"jobs": out, "auto_within_5pct_of_best_feasible_pure": within,
            "auto_strictly_better_somewhere": better, "auto_never_misses_rto_or_retention": safe,
            "goal_met": within and better and safe}


def _plot(summary: dict[str, object], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    jobs = summary["jobs"]
    assert isinstance(jobs, dict)
    fig, axes = plt.subplots(1, len(jobs), figsize=(6 * len(jobs), 4))
    for ax, (name, rows) in zip(axes, jobs.items(), strict=True):
        rto = max(r["rto_s"] for r in rows)
        pts = sorted((r for r in rows if r["rto_s"] == rto), key=lambda r: r["mtbf_h"])
        for mode in MODES:
            ax.plot([r["mtbf_h"] for r in pts], [r[mode]["waste_pct"] for r in pts],
                    marker="o", label=mode)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("MTBF (h)")
        ax.set_ylabel("expected waste (% of capacity)")
        ax.set_title(f"{name}, RTO {rto:g} s")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hours", type=float, default=4.0)
    ap.add_argument("--plot", default=None, help="write a PNG of waste vs MTBF")
    ap.add_argument("--small", action="store_true", help="CI size: 1 h, a 2x2 sweep")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    if args.small:
        summary = sweep(1.0, [1 / 600, 1 / 86_400], [30.0, 600.0])
    else:
        lams = [1 / (h * 3600) for h in (0.1, 0.5, 1, 4, 24, 168)]
        summary = sweep(args.hours, lams, [15.0, 30.0, 60.0, 120.0, 600.0])
    summary["runtime_s"] = round(time.perf_counter() - started, 2)
    if args.plot:
        _plot(summary, args.plot)
    for name, rows in summary["jobs"].items():  # type: ignore[attr-defined]
        print(f"{name}:")
        for row in rows:
            cells = "  ".join(f"{m} {row[m]['waste_pct']:.3f}%/{row[m]['rto_misses']}"
                              for m in MODES)
            print(f"  MTBF {row['mtbf_h']:>8} h  RTO {row['rto_s']:>5} s  {cells}")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
