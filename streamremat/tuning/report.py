"""The words for a ``TunerDecision``: one function, used by the worker's tuner log
line and by ``streamremat tune``, so that both always say the same thing."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from streamremat.tuning.plan_summary import PlanSummary
    from streamremat.tuning.tuner import TunerDecision


def seconds(x: float | None) -> str:
    if x is None:
        return "n/a"
    return "inf" if math.isinf(x) else f"{x:.1f}s"


def _rate(x: float | None) -> str:
    return "n/a" if x is None else f"{x:,.0f}/s"


def _ratio(x: float) -> str:
    return "inf" if math.isinf(x) else f"{x:.2f}"


def _records(x: float | None) -> str:
    return "n/a" if x is None else f"{x:,.0f}"


def _bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def describe_plan(operator: str, p: PlanSummary) -> str:
    """One checkpoint's rematerialization plan for ``operator``, in one sentence:
    what it stores and recomputes, the bytes saved, the extra replay a recovery
    from it reads (records and seconds at the measured replay rate), and how many
    stores each constraint forced (the rest were cheaper to store)."""
    extra = (
        f"a recovery replays {p.extra_replay_records:,} extra records from offset "
        f"{p.replay_from:,} ({seconds(p.extra_replay_s)})"
        if p.extra_replay_records else "no extra replay"
    )
    forced = ", ".join(f"{n} {reason.value}" for reason, n in
                       sorted(p.forced.items(), key=lambda i: i[0].name) if n)  # fmt: skip
    return (
        f"rematerialize {operator}: store {p.groups_stored} window group(s) "
        f"({_bytes(p.bytes_stored)}), recompute {p.groups_recomputed} "
        f"({_bytes(p.bytes_saved)} saved); {extra}; stores forced by: {forced or 'nothing'}"
        f" ({p.cheaper_to_store} cheaper to store)"
    )


def describe(d: TunerDecision) -> list[str]:
    """The decision as a few self-contained sentences (the log joins them with ``|``).

    1. the policy in force and its interval; under a fixed policy also what the
       adaptive one would choose, and why;
    2. the estimates, each sigma named by how it is computed;
    3. the recovery if a failure happened now (from the records a replay would
       read) and its worst case in this checkpoint cycle, beside the RTO;
    4. if the RTO cannot be met: why, and what would help.
    """
    bounds = (
        f"T* {seconds(d.t_optimum_s)}, T_rto {seconds(d.t_rto_s)}, "
        f"T_retention {seconds(d.t_retention_s)}, within [{d.min_interval_s:g}s, "
        f"{d.max_interval_s:g}s]"
    )
    if d.policy == "fixed":
        every = []
        if not math.isinf(d.interval_s):
            every.append(f"{d.interval_s:g}s")
        if d.fixed_records is not None:
            every.append(f"{d.fixed_records:,} records")
        policy = (
            f"policy fixed: checkpoint every {' or '.join(every)}; the adaptive policy "
            f"would choose {seconds(d.tuned_interval_s)} (bound {d.tuned_bound.value}: {bounds})"
        )
    else:
        policy = (
            f"policy adaptive: interval {seconds(d.interval_s)}, active bound "
            f"{d.active_bound.value} ({bounds})"
        )
    mu = _rate(d.replay_rate_eps)
    if d.replay_rate_low_eps is not None:
        mu += f" (low {_rate(d.replay_rate_low_eps)})"
    r = _rate(d.ingest_rate_eps) if d.ingest_measured else "not measured yet"
    if d.ingest_measured and d.replay_rate_eps is not None:
        sigmas = (
            f"sigma mu/r {_ratio(d.sigma)} (for T*), conservative sigma mu_low/r "
            f"{_ratio(d.sigma_rto)} (for T_rto and the worst case)"
        )
    else:  # the config's prior until both rates are measured
        sigmas = f"sigma {_ratio(d.sigma)} (prior, until r and mu are measured)"
    estimates = (
        f"estimates: C {d.checkpoint_cost_s * 1000:.1f}ms, L {d.durable_latency_s:.2f}s "
        f"(p90 {d.durable_latency_p90_s:.2f}s), D {seconds(d.downtime_s)} "
        f"(p90 {seconds(d.downtime_p90_s)}), r {r}, mu {mu}, {sigmas}, "
        f"MTBF {d.mtbf_s / 3600:.1f}h"
    )
    recovery = (
        f"recovery if a failure happened now: predicted {seconds(d.predicted_recovery_s)} "
        f"(replay {_records(d.backlog_records)} records behind the source's end, plus "
        f"arrivals during D), worst case {seconds(d.worst_case_recovery_s)} (D p90, mu low, "
        f"{_records(d.worst_backlog_records)} records by the next durable checkpoint), "
        f"RTO {seconds(d.rto_s)}"
    )
    out = [policy, estimates, recovery]
    if d.infeasible_reason:
        out.append(f"RTO INFEASIBLE: {d.infeasible_reason}")
    return out
