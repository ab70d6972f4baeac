"""Configuration of the adaptive checkpoint-interval tuner."""

from __future__ import annotations

import math
from dataclasses import dataclass

from streamremat.tuning.exceptions import TunerConfigError

P90_Z = 1.2816
"""Standard-normal quantile used for the conservative (p90) estimates."""


@dataclass(frozen=True)
class TunerConfig:
    """What the operator tells the tuner. Times are seconds.

    ``rto_s`` is the recovery-time objective (failure -> lag back to ~0);
    ``math.inf`` disables the RTO bound. The interval never leaves
    ``[min_interval_s, max_interval_s]``. These defaults are the worker's too
    (``CheckpointSettings``, the CLI flags and docs/tuning.md take them from here).
    """

    rto_s: float = 120.0
    min_interval_s: float = 5.0
    max_interval_s: float = 600.0
    # Failure-rate prior: ``prior_failures`` pseudo-failures over
    # ``prior_failures * prior_mtbf_s`` seconds, observations discounted with
    # ``failure_half_life_s`` so that a change in the failure rate is followed
    # (a second, fast posterior catches a rise sooner; the larger rate is used).
    prior_mtbf_s: float = 24 * 3600.0
    prior_failures: float = 0.5
    failure_half_life_s: float = 6 * 3600.0
    failure_fast_half_life_s: float = 1.5 * 3600.0
    # Interval smoothing: ignore targets within ``deadband`` (fraction) of the
    # current interval; move by at most ``max_step_factor`` per decision.
    deadband: float = 0.1
    max_step_factor: float = 2.0
    # Use at most this fraction of the source topic's retention.
    retention_safety: float = 0.5
    # Used until the first measurement replaces them.
    prior_downtime_s: float = 15.0
    prior_sigma: float = 2.0
    # Estimators: time constant of the ingest-rate EWMA and smallest weight of
    # a new sample in the EWMAs of C, L, D and mu.
    rate_half_life_s: float = 60.0
    sample_weight: float = 0.1
    conservative_z: float = P90_Z

    def __post_init__(self) -> None:
        _check(self.rto_s > 0, f"rto_s must be > 0 (got {self.rto_s}); use math.inf for no RTO")
        _check(
            0 < self.min_interval_s <= self.max_interval_s and math.isfinite(self.max_interval_s),
            f"need 0 < min_interval_s <= max_interval_s < inf (got {self.min_interval_s}, "
            f"{self.max_interval_s}); fix --min-interval / --max-interval",
        )
        _check(
            self.prior_mtbf_s > 0 and self.prior_failures > 0,
            "prior_mtbf_s and prior_failures must be > 0; fix --prior-mtbf",
        )
        _check(
            0 < self.failure_fast_half_life_s <= self.failure_half_life_s,
            "need 0 < failure_fast_half_life_s <= failure_half_life_s",
        )
        _check(0 <= self.deadband < 1, f"deadband must be in [0, 1) (got {self.deadband})")
        _check(self.max_step_factor > 1, f"max_step_factor must be > 1 ({self.max_step_factor})")
        _check(0 < self.retention_safety <= 1, "retention_safety must be in (0, 1]")
        _check(self.prior_downtime_s >= 0, "prior_downtime_s must be >= 0")
        _check(self.prior_sigma > 0, "prior_sigma must be > 0")
        _check(self.rate_half_life_s > 0, "rate_half_life_s must be > 0")
        _check(0 < self.sample_weight <= 1, "sample_weight must be in (0, 1]")
        _check(self.conservative_z >= 0, "conservative_z must be >= 0")


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise TunerConfigError(message)
