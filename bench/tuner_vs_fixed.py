"""Adaptive checkpoint interval vs fixed intervals, in the seeded simulator.

Runs every scenario x policy x seed, prints a table, and prints one JSON
object as the last line of stdout:

    {"scenarios": {name: {"policies": {policy: {"overhead_pct", "rto_violation_rate",
      "p99_recovery_s", ...}}, "adaptive_pareto_optimal": bool,
      "adaptive_beats_rto_equivalent_fixed": bool, "goal_met": bool, ...}},
     "goal_met": bool, "runtime_s": float, ...}

Usage: python bench/tuner_vs_fixed.py [--seeds 10] [--hours 24] [--plot PATH] [--small]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from streamremat.tuning.policy import AdaptiveInterval, FixedInterval, IntervalPolicy
from streamremat.tuning.simulate import (
    SCENARIOS,
    Scenario,
    SimResult,
    adaptive_config,
    percentile,
    simulate,
)
from streamremat.tuning.tuner import Tuner

ADAPTIVE = "adaptive"
FIXED_DEFAULT_S = (10.0, 60.0, 150.0, 300.0)


@dataclass(frozen=True)
class Summary:
    policy: str
    overhead_pct: float
    checkpoint_overhead_pct: float
    rto_violation_rate: float
    p99_recovery_s: float
    failures: int
    mean_interval_s: float

    def as_json(self) -> dict[str, float | int]:
        return {
            "overhead_pct": round(self.overhead_pct, 4),
            "checkpoint_overhead_pct": round(self.checkpoint_overhead_pct, 4),
            "rto_violation_rate": round(self.rto_violation_rate, 4),
            "p99_recovery_s": round(self.p99_recovery_s, 2),
            "failures": self.failures,
            "mean_interval_s": round(self.mean_interval_s, 1),
        }


def make_policy(name: str, scenario: Scenario) -> IntervalPolicy:
    if name == ADAPTIVE:
        return AdaptiveInterval(Tuner(adaptive_config(scenario)))
    return FixedInterval(seconds=float(name.removeprefix("fixed-").removesuffix("s")))


def run_one(job: tuple[str, float, str, int]) -> SimResult:
    scenario_name, duration_s, policy_name, seed = job
    scenario = SCENARIOS[scenario_name](duration_s)
    return simulate(scenario, make_policy(policy_name, scenario), seed, name=policy_name)


def summarize(policy: str, results: Sequence[SimResult]) -> Summary:
    failures = sum(r.failures for r in results)
    recoveries = [x for r in results for x in r.recovery_s]
    total_s = sum(r.duration_s for r in results)
    checkpoints = sum(r.checkpoints for r in results)
    return Summary(
        policy=policy,
        overhead_pct=sum(r.overhead_pct * r.duration_s for r in results) / total_s,
        checkpoint_overhead_pct=sum(r.checkpoint_overhead_pct * r.duration_s for r in results)
        / total_s,
        rto_violation_rate=sum(r.rto_violations for r in results) / failures if failures else 0.0,
        p99_recovery_s=percentile(recoveries, 99) if recoveries else 0.0,
        failures=failures,
        mean_interval_s=total_s / checkpoints if checkpoints else float("inf"),
    )


def dominates(a: Summary, b: Summary) -> bool:
    """``a`` is at least as good as ``b`` on all three figures and better on one."""
    fa = (a.overhead_pct, a.rto_violation_rate, a.p99_recovery_s)
    fb = (b.overhead_pct, b.rto_violation_rate, b.p99_recovery_s)
    return all(x <= y for x, y in zip(fa, fb, strict=True)) and fa != fb


def verdict(summaries: dict[str, Summary]) -> dict[str, object]:
    ad = summaries[ADAPTIVE]
    fixed = [s for name, s in summaries.items() if name != ADAPTIVE]
    dominated_by = [s.policy for s in fixed if dominates(s, ad)]
    rto_equivalent = [s for s in fixed if s.rto_violation_rate <= ad.rto_violation_rate]
    not_beaten = [s.policy for s in rto_equivalent if s.overhead_pct <= ad.overhead_pct]
    return {
        "adaptive_pareto_optimal": not dominated_by,
        "dominated_by": dominated_by,
        "fixed_meeting_rto_as_often": [s.policy for s in rto_equivalent],
        "adaptive_beats_rto_equivalent_fixed": not not_beaten,
        "not_beaten": not_beaten,
        "goal_met": not dominated_by and not not_beaten,
    }


def print_table(name: str, scenario: Scenario, summaries: dict[str, Summary]) -> None:
    print(f"\n## {name}: {scenario.description}")
    print(
        f"{'policy':<12}{'overhead %':>11}{'ckpt %':>9}{'RTO viol/failure':>18}"
        f"{'p99 recovery s':>16}{'failures':>10}{'mean T s':>10}"
    )
    for s in summaries.values():
        print(
            f"{s.policy:<12}{s.overhead_pct:>11.3f}{s.checkpoint_overhead_pct:>9.3f}"
            f"{s.rto_violation_rate:>18.4f}{s.p99_recovery_s:>16.1f}{s.failures:>10d}"
            f"{s.mean_interval_s:>10.0f}"
        )


def plot(
    path: str,
    results: Sequence[SimResult],
    summaries: dict[str, dict[str, Summary]],
    duration_s: float,
) -> None:
    """Top: overhead vs p99 recovery per policy; bottom: the adaptive interval over time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    names = list(SCENARIOS)
    fig, axes = plt.subplots(2, len(names), figsize=(5 * len(names), 8.5), squeeze=False)
    for col, sc_name in enumerate(names):
        scenario = SCENARIOS[sc_name](duration_s)
        top, bottom = axes[0][col], axes[1][col]
        for s in summaries[sc_name].values():
            adaptive = s.policy == ADAPTIVE
            top.scatter(
                s.overhead_pct,
                s.p99_recovery_s,
                s=90 if adaptive else 40,
                c="tab:red" if adaptive else "tab:blue",
                marker="*" if adaptive else "o",
                zorder=3,
            )
            top.annotate(
                f"{s.policy.removeprefix('fixed-')}\nviol {100 * s.rto_violation_rate:.1f}%",
                (s.overhead_pct, s.p99_recovery_s),
                textcoords="offset points",
                xytext=(6, 4),
                fontsize=8,
            )
        top.axhline(scenario.rto_s, color="gray", ls="--", lw=1, label=f"RTO {scenario.rto_s:g} s")
        top.set_xscale("log")
        top.xaxis.set_minor_formatter(NullFormatter())
        top.xaxis.set_major_formatter(ScalarFormatter())
        top.set_xlabel("capacity overhead % (checkpoints + re-processing)")
        top.set_ylabel("p99 recovery time (s)")
        top.set_title(sc_name)
        top.legend(loc="upper right", fontsize=8)

        run = next(r for r in results if r.scenario == sc_name and r.policy == ADAPTIVE)
        hours = [p.t_s / 3600 for p in run.trace]
        bottom.step(
            hours,
            [p.interval_s for p in run.trace],
            where="post",
            c="tab:red",
            label="adaptive interval",
        )
        bottom.plot(
            hours,
            [p.t_optimum_s for p in run.trace],
            c="tab:green",
            lw=0.8,
            alpha=0.7,
            label="T* (estimated)",
        )
        bottom.plot(
            hours,
            [p.t_rto_s for p in run.trace],
            c="tab:purple",
            lw=0.8,
            alpha=0.7,
            label="T_rto (estimated)",
        )
        for s in summaries[sc_name].values():
            if s.policy != ADAPTIVE:
                bottom.axhline(
                    float(s.policy.removeprefix("fixed-").removesuffix("s")),
                    color="gray",
                    lw=0.6,
                    ls=":",
                )
        for t_fail in _failure_hours(run):
            bottom.axvline(t_fail, color="black", lw=0.4, alpha=0.3)
        bottom.set_yscale("log")
        bottom.set_ylim(4, 2000)
        bottom.set_xlabel("hours (seed 0; thin lines: failures)")
        bottom.set_ylabel("interval (s)")
        bottom.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _failure_hours(run: SimResult) -> list[float]:
    from streamremat.tuning.simulate import failure_schedule

    scenario = SCENARIOS[run.scenario](run.duration_s)
    return [f.t_s / 3600 for f in failure_schedule(scenario, run.seed)]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seeds", type=int, default=20, help="seeds per scenario and policy (>= 5)")
    p.add_argument("--hours", type=float, default=24.0, help="simulated hours per run")
    p.add_argument("--fixed", type=str, default=",".join(f"{s:g}" for s in FIXED_DEFAULT_S))
    p.add_argument("--plot", type=str, default=None, help="write a PNG figure to this path")
    p.add_argument("--jobs", type=int, default=1, help="worker processes")
    p.add_argument("--small", action="store_true", help="CI size: 2 seeds x 2 hours")
    args = p.parse_args(argv)
    if args.small:
        args.seeds, args.hours = 2, 2.0
    started = time.perf_counter()
    duration_s = args.hours * 3600.0
    policies = [ADAPTIVE] + [f"fixed-{float(x):g}s" for x in args.fixed.split(",")]
    jobs = [
        (sc, duration_s, pol, seed)
        for sc in SCENARIOS
        for pol in policies
        for seed in range(args.seeds)
    ]
    if args.jobs > 1:
        with ProcessPoolExecutor(args.jobs) as pool:
            results = list(pool.map(run_one, jobs, chunksize=4))
    else:
        results = [run_one(j) for j in jobs]

    out: dict[str, object] = {}
    all_summaries: dict[str, dict[str, Summary]] = {}
    goal = True
    print(f"tuner vs fixed: {args.seeds} seeds x {args.hours:g} h per scenario and policy")
    for sc_name, factory in SCENARIOS.items():
        scenario = factory(duration_s)
        summaries = {
            pol: summarize(pol, [r for r in results if r.scenario == sc_name and r.policy == pol])
            for pol in policies
        }
        all_summaries[sc_name] = summaries
        v = verdict(summaries)
        goal = goal and bool(v["goal_met"])
        print_table(sc_name, scenario, summaries)
        print(f"verdict: {v}")
        out[sc_name] = {
            "rto_s": scenario.rto_s,
            "policies": {pol: s.as_json() for pol, s in summaries.items()},
            **v,
        }
    if args.plot:
        plot(args.plot, results, all_summaries, duration_s)
        print(f"plot written to {args.plot}")
    summary = {
        "seeds": args.seeds,
        "hours": args.hours,
        "goal_met": goal,
        "runtime_s": round(time.perf_counter() - started, 2),
        "scenarios": out,
    }
    print(json.dumps(summary, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
