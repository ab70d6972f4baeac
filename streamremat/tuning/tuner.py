"""The per-task adaptive checkpoint-interval tuner (DESIGN section 8).

Callers pass timestamps (``now_s``, seconds on any monotonic-enough clock
shared by the task's workers); the tuner never reads a clock and does no I/O.
"""

from __future__ import annotations

import enum
import json
import math
from dataclasses import dataclass

from streamremat.tuning.config import TunerConfig
from streamremat.tuning.estimators import EwmaStat, FailureRate, RateEwma
from streamremat.tuning.exceptions import TunerStateError
from streamremat.tuning.model import (
    expected_waste,
    min_feasible_rto,
    optimal_interval,
    recovery_from_backlog,
    rto_interval,
)
from streamremat.tuning.report import describe

STATE_VERSION = 1


class Bound(enum.Enum):
    """Which term of ``clamp(min(T*, T_rto, T_retention), T_min, T_max)`` decided,
    or ``FIXED``: a fixed checkpoint policy is in force."""

    OPTIMUM = "optimum"
    RTO = "rto"
    RETENTION = "retention"
    MIN = "min"
    MAX = "max"
    FIXED = "fixed"


@dataclass(frozen=True)
class TunerDecision:
    """Everything the tuner used and chose at ``now_s``; what metrics and logs show.

    Means feed ``T*`` and ``predicted_recovery_s``; the conservative values
    (``*_p90``, ``replay_rate_low_eps``, ``sigma_rto``) feed ``T_rto`` and
    ``worst_case_recovery_s``. ``math.inf`` means "no bound" (no RTO, no
    retention, idle source). Under a fixed policy ``interval_s`` is the fixed
    one, ``active_bound`` is ``FIXED``, and ``tuned_interval_s`` /
    ``tuned_bound`` say what the adaptive policy would choose.
    """

    now_s: float
    policy: str
    checkpoint_cost_s: float
    byte_cost_s: float | None
    durable_latency_s: float
    durable_latency_p90_s: float
    downtime_s: float
    downtime_p90_s: float
    ingest_rate_eps: float
    ingest_measured: bool
    replay_rate_eps: float | None
    replay_rate_low_eps: float | None
    sigma: float
    sigma_rto: float
    failure_rate_per_s: float
    failures_observed: float
    t_optimum_s: float
    t_rto_s: float
    t_retention_s: float
    target_s: float
    interval_s: float
    active_bound: Bound
    tuned_interval_s: float
    tuned_bound: Bound
    min_interval_s: float
    max_interval_s: float
    fixed_records: int | None
    rto_s: float
    rto_infeasible: bool
    infeasible_reason: str | None
    checkpoint_age_s: float | None
    backlog_records: float | None
    worst_backlog_records: float | None
    predicted_recovery_s: float | None
    worst_case_recovery_s: float | None
    expected_overhead: float

    @property
    def mtbf_s(self) -> float:
        return 1.0 / self.failure_rate_per_s

    def explain(self) -> str:
        """One log line; the same words as ``streamremat tune`` (``report.describe``)."""
        return " | ".join(describe(self))


class Tuner:
    """Online estimates of C, L, D, r, mu and lambda, and the interval rule.

    One per task. ``next_interval`` is one decision step (smoothing applies per
    step); ``decision`` is read-only. ``to_bytes``/``from_bytes`` carry the
    estimates and the failure count inside each checkpoint, so they survive
    restarts and move with the partition.
    """

    def __init__(self, config: TunerConfig) -> None:
        self.config = config
        w = config.sample_weight
        self._cost = EwmaStat(w)
        self._latency = EwmaStat(w)
        self._downtime = EwmaStat(
            w, mean=config.prior_downtime_s, var=(0.5 * config.prior_downtime_s) ** 2, count=1.0
        )
        self._replay = EwmaStat(w)
        self._ingest = RateEwma(config.rate_half_life_s)
        self._failures = FailureRate(
            config.prior_failures,
            config.prior_mtbf_s,
            config.failure_half_life_s,
            config.failure_fast_half_life_s,
        )
        self._interval_s: float | None = None
        self._retention_s: float | None = None
        self._durable_position_s: float | None = None
        self._checkpoint_bytes = 0
        self._byte_cost = EwmaStat(w)  # capacity-seconds per checkpoint byte (the planner's)

    # -- observations -------------------------------------------------------------

    def observe_checkpoint(
        self, now_s: float, cost_s: float, durable_latency_s: float, size_bytes: int = 0
    ) -> None:
        """A checkpoint became durable at ``now_s``.

        ``cost_s``: capacity-seconds it took from processing; ``durable_latency_s``:
        seconds from the moment its offset was fixed until durable.
        """
        self._failures.advance(now_s)
        self._cost.update(max(cost_s, 0.0))
        self._latency.update(max(durable_latency_s, 0.0))
        self._durable_position_s = now_s - durable_latency_s
        self._checkpoint_bytes = size_bytes
        if size_bytes > 0:
            self._byte_cost.update(max(cost_s, 0.0) / size_bytes)

    def observe_ingest(self, now_s: float, events: int) -> None:
        """``events`` appended to the source since the previous call (first call: origin)."""
        self._failures.advance(now_s)
        self._ingest.observe(now_s, float(events))

    def observe_backlog(self, events: int, busy_s: float) -> None:
        """The live loop was behind and processed ``events`` in ``busy_s`` busy seconds."""
        if events > 0 and busy_s > 0:
            self._replay.update(events / busy_s)

    def observe_recovery(
        self, downtime_s: float | None, replayed_events: int, replay_s: float
    ) -> None:
        """A restore finished: ``downtime_s`` (detect + restore; ``None`` after a clean
        stop or hand-over, which is no failure), then the replay."""
        if downtime_s is not None:
            self._downtime.update(max(downtime_s, 0.0))
        if replayed_events > 0 and replay_s > 0:
            self._replay.update(replayed_events / replay_s)

    def observe_failure(self, now_s: float) -> None:
        """An unclean shutdown or a partition lost without hand-over, seen at restore."""
        self._failures.observe_failure(now_s)

    def set_retention(self, retention_s: float | None) -> None:
        """The source topic's retention (``None``: unlimited)."""
        self._retention_s = retention_s

    # -- decisions ----------------------------------------------------------------

    @property
    def current_interval_s(self) -> float | None:
        """The interval chosen by the last ``next_interval`` (``None`` before the first)."""
        return self._interval_s

    def next_interval(self, now_s: float) -> float:
        """Take one decision step and return the interval (seconds) to use next."""
        self._failures.advance(now_s)
        chosen = self.decision(now_s).interval_s
        self._interval_s = chosen
        return chosen

    def decision(
        self,
        now_s: float,
        backlog_records: float | None = None,
        *,
        checkpoint_age_s: float | None = None,
        fixed_interval_s: float | None = None,
        fixed_records: int | None = None,
    ) -> TunerDecision:
        """What ``next_interval(now_s)`` would choose, with every input. No state change.

        ``backlog_records``: records between the newest durable checkpoint's
        offset and the source's end now, i.e. what a replay would read; when
        not given, ``r * checkpoint_age_s`` stands in. ``checkpoint_age_s``
        overrides the tracked age of that checkpoint (seconds since its offset
        was current). ``fixed_interval_s`` / ``fixed_records``: a fixed policy
        is in force (the decision reports it, and its worst case uses it).
        """
        cfg, z = self.config, self.config.conservative_z
        c = self._cost.mean
        l_mean, l_hi = self._latency.mean, self._latency.upper(z)
        d_mean, d_hi = self._downtime.mean, self._downtime.upper(z)
        r = self._ingest.rate if self._ingest.known else 0.0
        mu = self._replay.mean if self._replay.known else None
        mu_low = self._replay.lower(z) if self._replay.known else None
        if mu is None or mu_low is None or not self._ingest.known:
            sigma = sigma_rto = cfg.prior_sigma  # not measured yet: assume a slow replay
        elif r <= 0:
            sigma = sigma_rto = math.inf  # idle source: nothing to replay
        else:
            sigma, sigma_rto = mu / r, mu_low / r
        lam = self._failures.rate_at(now_s)

        t_opt = optimal_interval(c, sigma, lam)
        t_rto = rto_interval(cfg.rto_s, d_hi, l_hi, sigma_rto)
        t_ret = math.inf if self._retention_s is None else cfg.retention_safety * self._retention_s
        target, bound = _clamp_rule(t_opt, t_rto, t_ret, cfg.min_interval_s, cfg.max_interval_s)
        hard_cap = max(min(t_rto, t_ret, cfg.max_interval_s), cfg.min_interval_s)
        tuned = self._smooth(target, hard_cap)
        fixed = fixed_interval_s is not None or fixed_records is not None
        chosen = tuned
        if fixed:
            chosen = math.inf if fixed_interval_s is None else fixed_interval_s

        reason = _infeasible_reason(cfg, t_rto, sigma_rto, d_hi, l_hi)
        if checkpoint_age_s is None and self._durable_position_s is not None:
            checkpoint_age_s = max(now_s - self._durable_position_s, 0.0)
        if backlog_records is None and checkpoint_age_s is not None:
            backlog_records = r * checkpoint_age_s
        # Until the next checkpoint is durable (T + L after the last one's offset),
        # r more records per second join the backlog: the worst case of this cycle.
        cycle = r * (chosen + l_hi) if r > 0 else 0.0
        if fixed_records is not None:
            cycle = min(cycle, fixed_records + r * l_hi)
        worst_backlog = None
        if backlog_records is not None:
            worst_backlog = backlog_records + max(0.0, cycle - r * (checkpoint_age_s or 0.0))
        # Replay speed when not measured yet: the prior speed-up over ingest.
        mu_mean = mu if mu is not None else (cfg.prior_sigma * r if r > 0 else None)
        mu_hi_risk = mu_low if mu_low is not None else mu_mean
        return TunerDecision(
            now_s=now_s,
            policy="fixed" if fixed else "adaptive",
            checkpoint_cost_s=c,
            byte_cost_s=self._byte_cost.mean if self._byte_cost.known else None,
            durable_latency_s=l_mean,
            durable_latency_p90_s=l_hi,
            downtime_s=d_mean,
            downtime_p90_s=d_hi,
            ingest_rate_eps=r,
            ingest_measured=self._ingest.known,
            replay_rate_eps=mu,
            replay_rate_low_eps=mu_low,
            sigma=sigma,
            sigma_rto=sigma_rto,
            failure_rate_per_s=lam,
            failures_observed=self._failures.n,
            t_optimum_s=t_opt,
            t_rto_s=t_rto,
            t_retention_s=t_ret,
            target_s=target,
            interval_s=chosen,
            active_bound=Bound.FIXED if fixed else bound,
            tuned_interval_s=tuned,
            tuned_bound=bound,
            min_interval_s=cfg.min_interval_s,
            max_interval_s=cfg.max_interval_s,
            fixed_records=fixed_records,
            rto_s=cfg.rto_s,
            rto_infeasible=reason is not None,
            infeasible_reason=reason,
            checkpoint_age_s=checkpoint_age_s,
            backlog_records=backlog_records,
            worst_backlog_records=worst_backlog,
            predicted_recovery_s=_recovery(d_mean, backlog_records, r, mu_mean),
            worst_case_recovery_s=_recovery(d_hi, worst_backlog, r, mu_hi_risk),
            expected_overhead=expected_waste(chosen, c, l_mean, d_mean, sigma, lam),
        )

    def _smooth(self, target: float, hard_cap: float) -> float:
        """Deadband and step limit; neither may hold the interval above a hard bound."""
        prev = self._interval_s
        if prev is None:
            return target
        if abs(target - prev) <= self.config.deadband * prev:
            chosen = prev
        else:
            f = self.config.max_step_factor
            chosen = min(max(target, prev / f), prev * f)
        cfg = self.config
        return min(max(min(chosen, hard_cap), cfg.min_interval_s), cfg.max_interval_s)

    # -- persistence --------------------------------------------------------------

    def to_bytes(self) -> bytes:
        """Compact, versioned state to store inside each checkpoint."""
        state = {
            "v": STATE_VERSION,
            "C": self._cost.summary(),
            "L": self._latency.summary(),
            "D": self._downtime.summary(),
            "mu": self._replay.summary(),
            "r": self._ingest.summary(),
            "fail": self._failures.summary(),
            "T": self._interval_s,
            "Cb": self._byte_cost.summary(),
        }
        return json.dumps(state, separators=(",", ":"), allow_nan=False).encode()

    @classmethod
    def from_bytes(cls, data: bytes, config: TunerConfig) -> Tuner:
        """Rebuild a warm tuner; the new ``config`` (RTO, bounds) applies from now on."""
        try:
            state = json.loads(data)
            version = state["v"]
        except (ValueError, TypeError, KeyError) as exc:
            raise TunerStateError(
                f"tuner state is not decodable ({exc}); start a fresh Tuner"
            ) from exc
        if version != STATE_VERSION:
            raise TunerStateError(
                f"tuner state version {version} is not supported (this build reads "
                f"{STATE_VERSION}); upgrade streamremat or start a fresh Tuner"
            )
        tuner = cls(config)
        try:
            tuner._cost.restore(state["C"])
            tuner._latency.restore(state["L"])
            tuner._downtime.restore(state["D"])
            tuner._replay.restore(state["mu"])
            tuner._ingest.restore(state["r"])
            tuner._failures.restore(state["fail"])
            t = state["T"]
            if "Cb" in state:  # absent in state written before the planner existed
                tuner._byte_cost.restore(state["Cb"])
        except (ValueError, TypeError, KeyError) as exc:
            raise TunerStateError(f"tuner state is malformed ({exc}); start a fresh Tuner") from exc
        tuner._interval_s = None if t is None else float(t)
        return tuner


def _clamp_rule(
    t_opt: float, t_rto: float, t_ret: float, t_min: float, t_max: float
) -> tuple[float, Bound]:
    value, bound = min(
        (t_rto, Bound.RTO), (t_ret, Bound.RETENTION), (t_opt, Bound.OPTIMUM), key=lambda p: p[0]
    )
    if value < t_min:
        return t_min, Bound.MIN
    if value > t_max:
        return t_max, Bound.MAX
    return value, bound


def _recovery(
    d_s: float, backlog: float | None, r: float, mu: float | None
) -> float | None:
    """``recovery_from_backlog``; ``None`` when it cannot be known (no backlog
    figure, or records to replay at a replay speed never measured)."""
    if backlog is None:
        return None
    if mu is None:
        return d_s if backlog <= 0 and r <= 0 else None
    return recovery_from_backlog(d_s, backlog, r, mu)


def _infeasible_reason(
    cfg: TunerConfig, t_rto: float, sigma_rto: float, d_hi: float, l_hi: float
) -> str | None:
    """Why the RTO cannot be met, and advice that can work in that case."""
    if math.isinf(cfg.rto_s):
        return None
    if sigma_rto <= 1:
        return (
            f"replay is not faster than ingest (conservative sigma mu_low/r={sigma_rto:.2f} "
            "<= 1), so lag never returns to 0 after a failure; add processing capacity "
            "(more partitions/workers)"
        )
    if t_rto >= cfg.min_interval_s:
        return None
    need = min_feasible_rto(d_hi, l_hi, sigma_rto, cfg.min_interval_s)
    head = (
        f"--rto-seconds {cfg.rto_s:g} is below what a recovery takes: with D_p90={d_hi:.1f}s, "
        f"L_p90={l_hi:.1f}s and conservative sigma mu_low/r={sigma_rto:.2f}, checkpointing "
        f"every --min-interval {cfg.min_interval_s:g}s still needs {need:.1f}s"
    )
    if t_rto <= 0:
        # No interval helps: the downtime plus what arrives meanwhile already miss it.
        return (
            f"{head}, and no interval could meet it (T_rto {t_rto:.1f}s <= 0); raise "
            f"--rto-seconds to >= {math.ceil(need)}, or shorten the downtime D (a shorter "
            "--session-timeout-ms detects a crash sooner; a local state dir restores faster), "
            "or replay faster (more partitions/workers)"
        )
    return (
        f"{head}; raise --rto-seconds to >= {math.ceil(need)}, or lower --min-interval to "
        f"<= {math.floor(t_rto * 10) / 10:.1f}s"
    )
