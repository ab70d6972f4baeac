"""Seeded discrete-time simulator of one task: ingest, checkpoints, failures, recovery.

The worker is a fluid model stepped every ``step_s`` seconds:

* the source grows at ``r(t)`` events/s; a live worker keeps up (lag 0);
* a checkpoint fixes the position, costs ``C(t)`` capacity-seconds and is
  durable ``C + L`` seconds later; only one is in flight;
* failures arrive as a Poisson process with a piecewise rate; the position
  falls back to the last *durable* checkpoint, the task is down for ``D``, then
  processes at ``mu`` while the source keeps growing; recovery ends when the
  lag is back to 0 (the crossing is interpolated inside the step);
* a failure during a recovery restarts it from the same checkpoint.

The policy only sees what a real scheduler sees. An ``AdaptiveInterval``'s
tuner is fed measured (noisy) observations, never the true parameters, and is
restored from the bytes stored in the last durable checkpoint after each
failure, as the runtime does. Failure times and per-failure D and mu come
from their own random stream, so every policy meets the same failures.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, replace

from streamremat.tuning.config import TunerConfig
from streamremat.tuning.exceptions import TunerConfigError
from streamremat.tuning.policy import AdaptiveInterval, IntervalPolicy
from streamremat.tuning.profiles import Constant, Diurnal, Profile, Ramp, Steps
from streamremat.tuning.tuner import Tuner

_OBSERVE_INGEST_EVERY_S = 10.0


@dataclass(frozen=True)
class Scenario:
    """True parameters of a simulated task (the tuner never reads them)."""

    name: str
    description: str
    duration_s: float
    ingest_eps: Profile
    replay_eps: float
    checkpoint_cost_s: Profile
    durable_latency_s: Profile
    downtime_s: Profile
    failure_rate_per_s: Steps
    rto_s: float
    noise: float = 0.25
    replay_noise: float = 0.1
    step_s: float = 1.0

    def __post_init__(self) -> None:
        if self.duration_s <= 0 or self.step_s <= 0 or self.replay_eps <= 0:
            raise TunerConfigError("scenario duration_s, step_s and replay_eps must be > 0")

    def with_duration(self, duration_s: float) -> Scenario:
        return replace(self, duration_s=duration_s)


@dataclass(frozen=True)
class TracePoint:
    """The policy's interval at a checkpoint start (and the tuner's bounds, if adaptive)."""

    t_s: float
    interval_s: float
    t_optimum_s: float = math.nan
    t_rto_s: float = math.nan


@dataclass(frozen=True)
class SimResult:
    scenario: str
    policy: str
    seed: int
    duration_s: float
    checkpoints: int
    checkpoint_s: float
    rework_s: float
    downtime_s: float
    failures: int
    rto_violations: int
    recovery_s: tuple[float, ...]
    trace: tuple[TracePoint, ...] = field(repr=False)

    @property
    def overhead_pct(self) -> float:
        """Capacity lost to checkpoints and to re-processing lost work, % of run time."""
        return 100.0 * (self.checkpoint_s + self.rework_s) / self.duration_s

    @property
    def checkpoint_overhead_pct(self) -> float:
        return 100.0 * self.checkpoint_s / self.duration_s

    @property
    def rto_violation_rate(self) -> float:
        return self.rto_violations / self.failures if self.failures else 0.0


def percentile(values: list[float] | tuple[float, ...], q: float) -> float:
    """Linear-interpolated percentile, ``q`` in [0, 100]; ``nan`` when empty."""
    if not values:
        return math.nan
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


#: The prior MTBF of the evaluation's tuners (seconds).
SIMULATION_PRIOR_MTBF_S = 6 * 3600.0


def adaptive_config(scenario: Scenario) -> TunerConfig:
    """What an operator would configure: the RTO; everything else default, except
    the failure prior: the evaluation in docs/tuning.md was run with a 6 h prior
    MTBF (the worker's default is 24 h), and its figures must stay reproducible."""
    return TunerConfig(rto_s=scenario.rto_s, prior_mtbf_s=SIMULATION_PRIOR_MTBF_S)


@dataclass(frozen=True)
class _Failure:
    t_s: float
    downtime_s: float
    replay_eps: float


def failure_schedule(scenario: Scenario, seed: int) -> list[_Failure]:
    """Poisson failures (thinning over the piecewise rate), with their D and mu draws."""
    rng = random.Random(f"{seed}:failures")
    peak = scenario.failure_rate_per_s.peak
    out: list[_Failure] = []
    t = 0.0
    while peak > 0:
        t += rng.expovariate(peak)
        if t >= scenario.duration_s:
            break
        accept = rng.random() < scenario.failure_rate_per_s.at(t) / peak
        d = scenario.downtime_s.at(t) * rng.lognormvariate(0.0, scenario.noise)
        mu = scenario.replay_eps * rng.lognormvariate(0.0, scenario.replay_noise)
        if accept:
            out.append(_Failure(t, d, mu))
    return out


def simulate(scenario: Scenario, policy: IntervalPolicy, seed: int, name: str = "") -> SimResult:
    """Run ``policy`` through ``scenario``; deterministic for a given ``seed``."""
    sim = _Run(scenario, policy, seed)
    sim.run()
    return SimResult(
        scenario=scenario.name,
        policy=name or str(getattr(policy, "name", type(policy).__name__)),
        seed=seed,
        duration_s=scenario.duration_s,
        checkpoints=sim.checkpoints,
        checkpoint_s=sim.checkpoint_s,
        rework_s=sim.rework_s,
        downtime_s=sim.downtime_s,
        failures=sim.failures,
        rto_violations=sim.violations,
        recovery_s=tuple(sim.recoveries),
        trace=tuple(sim.trace),
    )


@dataclass
class _InFlight:
    start_s: float
    position: float
    durable_at_s: float
    cost_s: float
    blob: bytes | None


_LIVE, _DOWN, _CATCHUP = 0, 1, 2


class _Run:
    """State of one simulation run; ``run()`` is the time loop."""

    def __init__(self, scenario: Scenario, policy: IntervalPolicy, seed: int) -> None:
        self.sc = scenario
        self.policy = policy
        self.adaptive = policy if isinstance(policy, AdaptiveInterval) else None
        self.noise = random.Random(f"{seed}:measurements")
        self.schedule = failure_schedule(scenario, seed)
        # Results.
        self.checkpoints = 0
        self.checkpoint_s = self.rework_s = self.downtime_s = 0.0
        self.failures = self.violations = 0
        self.recoveries: list[float] = []
        self.trace: list[TracePoint] = []
        # Worker state; positions are cumulative event counts.
        self.mode = _LIVE
        self.ingested = self.processed = self.high_water = 0.0
        self.durable_pos = self.durable_start_s = 0.0
        self.durable_blob: bytes | None = None
        self.last_start_s = self.last_pos = 0.0
        self.inflight: _InFlight | None = None
        self.episode: list[float] = []
        self.down_until_s = self.restore_s = 0.0
        self.replay_from = 0.0
        self.mu = scenario.replay_eps
        self.last_downtime_s = 0.0
        self.observed_events = 0.0
        self.next_observe_s = 0.0

    def run(self) -> None:
        sc, dt = self.sc, self.sc.step_s
        next_failure = 0
        t = 0.0
        if self.adaptive is not None:
            self.adaptive.tuner.observe_ingest(0.0, 0)
        while t < sc.duration_s or self.mode != _LIVE:
            t1 = t + dt
            while next_failure < len(self.schedule) and self.schedule[next_failure].t_s < t1:
                self._fail(t, self.schedule[next_failure])
                next_failure += 1
            r = sc.ingest_eps.at(t + 0.5 * dt)
            if self.mode == _LIVE:
                self.ingested += r * dt
                self.processed = self.high_water = self.ingested
            else:
                self._recover_step(t, t1, r)
            if self.adaptive is not None and t1 >= self.next_observe_s and self.mode != _DOWN:
                self.adaptive.tuner.observe_ingest(t1, round(self.ingested - self.observed_events))
                self.observed_events = self.ingested
                self.next_observe_s = t1 + _OBSERVE_INGEST_EVERY_S
            if self.inflight is not None and t1 >= self.inflight.durable_at_s:
                self._durable(self.inflight)
            if self.mode == _LIVE and self.inflight is None and t1 < sc.duration_s:
                self._maybe_checkpoint(t1, r)
            t = t1

    def _fail(self, t: float, f: _Failure) -> None:
        self.failures += 1
        self.episode.append(t)
        self.processed = self.durable_pos
        self.inflight = None
        self.last_start_s, self.last_pos = self.durable_start_s, self.durable_pos
        self.mode = _DOWN
        self.down_until_s = t + f.downtime_s
        self.last_downtime_s = f.downtime_s
        self.downtime_s += f.downtime_s
        self.mu = f.replay_eps

    def _recover_step(self, t: float, t1: float, r: float) -> None:
        if self.mode == _DOWN:
            if self.down_until_s >= t1:
                self.ingested += r * (t1 - t)
                return
            self.ingested += r * (self.down_until_s - t)
            t = self.down_until_s
            self._restore(t)
        mu = self.mu
        lag = self.ingested - self.processed
        span = t1 - t
        if mu > r and lag <= (mu - r) * span:
            t_end = t + lag / (mu - r)
            self._account_replay(self.processed + mu * (t_end - t))
            self.ingested += r * span
            self._caught_up(t_end)
        else:
            self.ingested += r * span
            self._account_replay(self.processed + mu * span)

    def _account_replay(self, new_pos: float) -> None:
        redone = min(new_pos, self.high_water) - min(self.processed, self.high_water)
        self.rework_s += max(redone, 0.0) / self.mu
        self.processed = new_pos
        self.high_water = max(self.high_water, new_pos)

    def _restore(self, t: float) -> None:
        self.mode, self.restore_s, self.replay_from = _CATCHUP, t, self.processed
        if self.adaptive is not None:
            cfg = self.adaptive.tuner.config
            blob = self.durable_blob
            tuner = Tuner(cfg) if blob is None else Tuner.from_bytes(blob, cfg)
            tuner.observe_failure(t)
            tuner.observe_ingest(t, 0)
            self.adaptive.tuner = tuner
            self.observed_events = self.ingested

    def _caught_up(self, t_end: float) -> None:
        for t_fail in self.episode:
            rec = t_end - t_fail
            self.recoveries.append(rec)
            self.violations += rec > self.sc.rto_s
        self.episode = []
        if self.adaptive is not None:
            self.adaptive.tuner.observe_recovery(
                self.last_downtime_s,
                round(self.processed - self.replay_from),
                t_end - self.restore_s,
            )
        self.mode = _LIVE
        self.processed = self.high_water = self.ingested

    def _durable(self, ck: _InFlight) -> None:
        self.inflight = None
        self.durable_pos, self.durable_start_s, self.durable_blob = ck.position, ck.start_s, ck.blob
        if self.adaptive is not None:
            self.adaptive.tuner.observe_checkpoint(
                ck.durable_at_s, ck.cost_s, ck.durable_at_s - ck.start_s, int(ck.cost_s * 5e7)
            )

    def _maybe_checkpoint(self, t: float, r: float) -> None:
        records = round(self.ingested - self.last_pos)
        if not self.policy.should_checkpoint(t, records, t - self.last_start_s):
            return
        self.policy.start_interval(t)
        sc, noise = self.sc, self.noise
        cost = sc.checkpoint_cost_s.at(t) * noise.lognormvariate(0.0, sc.noise)
        latency = sc.durable_latency_s.at(t) * noise.lognormvariate(0.0, sc.noise)
        tuner = self.adaptive.tuner if self.adaptive is not None else None
        blob = tuner.to_bytes() if tuner is not None else None
        self.inflight = _InFlight(t, self.ingested, t + cost + latency, cost, blob)
        self.last_start_s, self.last_pos = t, self.ingested
        self.checkpoints += 1
        self.checkpoint_s += cost
        if tuner is not None:
            d = tuner.decision(t)
            self.trace.append(TracePoint(t, d.interval_s, d.t_optimum_s, d.t_rto_s))
            # The pause put the live loop behind by r*C; it caught up at full speed.
            mu = sc.replay_eps
            if mu > r > 0:
                events = r * cost * mu / (mu - r)
                busy = events / (mu * noise.lognormvariate(0.0, sc.replay_noise))
                tuner.observe_backlog(round(events), busy)
        else:
            self.trace.append(TracePoint(t, self.policy.interval_s(t)))


# -- scenarios -------------------------------------------------------------------------

HOUR_S = 3600.0


def steady(duration_s: float = 24 * HOUR_S) -> Scenario:
    return Scenario(
        name="steady",
        description="20k ev/s, mu 100k ev/s (sigma 5), C 0.3 s, L 2 s, D 10 s, MTBF 4 h, RTO 120 s",
        duration_s=duration_s,
        ingest_eps=Constant(20_000.0),
        replay_eps=100_000.0,
        checkpoint_cost_s=Constant(0.3),
        durable_latency_s=Constant(2.0),
        downtime_s=Constant(10.0),
        failure_rate_per_s=Steps(((0.0, 1 / (4 * HOUR_S)),)),
        rto_s=120.0,
    )


def diurnal(duration_s: float = 24 * HOUR_S) -> Scenario:
    return Scenario(
        name="diurnal",
        description="10k-40k ev/s over 24 h (peak at 12 h), mu 120k ev/s (sigma 3-12), "
        "C 0.5 s, L 2 s, D 12 s, MTBF 3 h, RTO 90 s",
        duration_s=duration_s,
        ingest_eps=Diurnal(mean=25_000.0, amplitude=0.6),
        replay_eps=120_000.0,
        checkpoint_cost_s=Constant(0.5),
        durable_latency_s=Constant(2.0),
        downtime_s=Constant(12.0),
        failure_rate_per_s=Steps(((0.0, 1 / (3 * HOUR_S)),)),
        rto_s=90.0,
    )


def failure_shift(duration_s: float = 24 * HOUR_S) -> Scenario:
    return Scenario(
        name="failure-shift",
        description="30k ev/s, mu 150k ev/s (sigma 5), C 0.8 s, L 3 s, D 15 s, MTBF 12 h, "
        "then 30 min from 1/3 of the run (flaky node), RTO 180 s",
        duration_s=duration_s,
        ingest_eps=Constant(30_000.0),
        replay_eps=150_000.0,
        checkpoint_cost_s=Constant(0.8),
        durable_latency_s=Constant(3.0),
        downtime_s=Constant(15.0),
        failure_rate_per_s=Steps(((0.0, 1 / (12 * HOUR_S)), (duration_s / 3, 1 / 1800.0))),
        rto_s=180.0,
    )


def growing_state(duration_s: float = 24 * HOUR_S) -> Scenario:
    return Scenario(
        name="growing-state",
        description="15k ev/s, mu 90k ev/s (sigma 6), state grows: C 0.05->2 s, "
        "L 0.5->5 s, D 8->20 s, MTBF 2 h, RTO 120 s",
        duration_s=duration_s,
        ingest_eps=Constant(15_000.0),
        replay_eps=90_000.0,
        checkpoint_cost_s=Ramp(0.05, 2.0, duration_s),
        durable_latency_s=Ramp(0.5, 5.0, duration_s),
        downtime_s=Ramp(8.0, 20.0, duration_s),
        failure_rate_per_s=Steps(((0.0, 1 / (2 * HOUR_S)),)),
        rto_s=120.0,
    )


SCENARIOS = {
    "steady": steady,
    "diurnal": diurnal,
    "failure-shift": failure_shift,
    "growing-state": growing_state,
}
"""Scenario factories by name; each takes ``duration_s``."""
