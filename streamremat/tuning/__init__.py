"""Adaptive checkpoint interval: cost model, online estimators, policies (pure, no I/O).

The simulator used to evaluate policies is ``streamremat.tuning.simulate``.
"""

from streamremat.tuning.config import TunerConfig
from streamremat.tuning.exceptions import TunerConfigError, TunerStateError, TuningError
from streamremat.tuning.model import (
    expected_waste,
    min_feasible_rto,
    optimal_interval,
    recovery_from_backlog,
    recovery_time,
    rto_interval,
)
from streamremat.tuning.policy import AdaptiveInterval, FixedInterval, IntervalPolicy
from streamremat.tuning.remat import (
    PlanInputs,
    Reason,
    Rematerialize,
    RematPlan,
    WindowCandidate,
    plan,
)
from streamremat.tuning.tuner import Bound, Tuner, TunerDecision

__all__ = [
    "AdaptiveInterval",
    "Bound",
    "FixedInterval",
    "IntervalPolicy",
    "PlanInputs",
    "Reason",
    "RematPlan",
    "Rematerialize",
    "Tuner",
    "TunerConfig",
    "TunerConfigError",
    "TunerDecision",
    "TunerStateError",
    "TuningError",
    "WindowCandidate",
    "expected_waste",
    "min_feasible_rto",
    "optimal_interval",
    "plan",
    "recovery_from_backlog",
    "recovery_time",
    "rto_interval",
]
