"""The one hook interface the runtime reports through (after faust `sensors/base.py`).

The runtime always holds a `Sensor`; the base class does nothing, so no call
site checks for None and a worker without metrics pays one method call.

Labels are bounded: an app, an operator name, a source partition, and small
fixed vocabularies (`kind`, `source`, `reason`). Never a key, an offset or an
exception message: pass `type(exc).__name__` as a reason, not `str(exc)`.
"""

from __future__ import annotations

import enum
from bisect import bisect_left
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

__all__ = [
    "BOUNDS",
    "E2E_LATENCY_BUCKETS_S",
    "PARTITION_STATES",
    "REMAT_FORCED_REASONS",
    "LatencyBatch",
    "RematSummaryLike",
    "Sensor",
    "TunerDecisionLike",
    "TunerReading",
    "forced_labels",
    "read_tuner_decision",
]

# Event time -> emission spans a commit interval at least; the tail covers replays.
E2E_LATENCY_BUCKETS_S: Final[tuple[float, ...]] = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
)

# A partition's lifecycle (runtime/lifecycle.py), as metrics and /ready show it.
PARTITION_STATES: Final[tuple[str, ...]] = ("restoring", "replaying", "live", "backoff", "fenced")

# Which term of `clamp(min(T*, T_rto, T_retention), T_min, T_max)` set the interval.
BOUNDS: Final[tuple[str, ...]] = ("optimum", "rto", "retention", "min", "max", "fixed")


# Constraints that force the planner to store a window group (tuning/remat.py
# ``FORCED``, by ``Reason`` member name in lower case); a fixed vocabulary, so
# every reason's series exists (at 0) once a task reports a plan.
REMAT_FORCED_REASONS: Final[tuple[str, ...]] = (
    "requested_store", "unknown_offset", "retention", "rto", "no_replay_rate",
)


@dataclass(frozen=True, slots=True)
class LatencyBatch:
    """Many latency observations, already binned: cheap to build, merge and report.

    `counts[i]` counts values `<= bounds_s[i]` and above the previous bound (not
    cumulative); the last count is the `+Inf` bucket.
    """

    counts: tuple[int, ...]
    sum_s: float
    bounds_s: tuple[float, ...] = E2E_LATENCY_BUCKETS_S

    def __post_init__(self) -> None:
        if len(self.counts) != len(self.bounds_s) + 1:
            raise ValueError(
                f"LatencyBatch needs len(bounds_s) + 1 = {len(self.bounds_s) + 1} counts "
                f"(the last is +Inf), got {len(self.counts)}"
            )

    @classmethod
    def of(
        cls, seconds: Iterable[float], bounds_s: tuple[float, ...] = E2E_LATENCY_BUCKETS_S
    ) -> LatencyBatch:
        counts = [0] * (len(bounds_s) + 1)
        total = 0.0
        for s in seconds:
            counts[bisect_left(bounds_s, s)] += 1
            total += s
        return cls(tuple(counts), total, bounds_s)

    @property
    def count(self) -> int:
        return sum(self.counts)

    def merge(self, other: LatencyBatch) -> LatencyBatch:
        if other.bounds_s != self.bounds_s:
            raise ValueError("cannot merge LatencyBatch values binned over different bounds_s")
        counts = tuple(a + b for a, b in zip(self.counts, other.counts, strict=True))
        return LatencyBatch(counts, self.sum_s + other.sum_s, self.bounds_s)


@dataclass(frozen=True, slots=True)
class TunerReading:
    """One tuner decision as the metrics see it. None: the tuner did not say."""

    interval_s: float | None = None
    C: float | None = None  # capacity-seconds lost per checkpoint
    L: float | None = None  # seconds until a checkpoint is durable
    D: float | None = None  # downtime per failure, seconds
    r: float | None = None  # ingest rate, records/s
    mu: float | None = None  # replay throughput, records/s
    sigma: float | None = None  # mu / r
    lam: float | None = None  # failure rate, 1/s
    t_star: float | None = None
    t_rto: float | None = None
    t_retention: float | None = None
    bound: str | None = None  # one of BOUNDS
    rto_infeasible: bool | None = None
    predicted_recovery_s: float | None = None
    rto_s: float | None = None


# Accept a Mapping or any object (e.g. `streamremat.tuning.tuner.TunerDecision`)
# with these attributes, under the first name found; metrics import no tuner code.
# A value of None (e.g. no replay measured yet) leaves the gauge as it was.
_ALIASES: Final[dict[str, tuple[str, ...]]] = {
    "interval_s": ("interval_s", "interval", "T"),
    "C": ("C", "c", "checkpoint_cost_s"),
    "L": ("L", "l", "durable_latency_s"),
    "D": ("D", "d", "downtime_s"),
    "r": ("r", "ingest_rate_eps"),
    "mu": ("mu", "replay_rate_eps"),
    "sigma": ("sigma",),
    "lam": ("lambda", "lambda_", "lam", "failure_rate_per_s", "failure_rate"),
    "t_star": ("t_star", "t_star_s", "t_optimum_s"),
    "t_rto": ("t_rto", "t_rto_s"),
    "t_retention": ("t_retention", "t_retention_s"),
    "bound": ("bound", "active_bound"),
    "rto_infeasible": ("rto_infeasible",),
    "predicted_recovery_s": ("predicted_recovery_s", "predicted_recovery", "t_rec"),
    "rto_s": ("rto_s", "rto"),
}

TunerDecisionLike = Mapping[str, float | str | bool] | object


def _lookup(decision: TunerDecisionLike, names: tuple[str, ...]) -> object:
    for name in names:
        if isinstance(decision, Mapping):
            if name in decision:
                return decision[name]
        elif hasattr(decision, name):
            return getattr(decision, name)
    return None


def _bound_name(value: object) -> str:
    raw = value.value if isinstance(value, enum.Enum) else value
    name = str(raw).lower()
    if name not in BOUNDS:
        raise ValueError(f"tuner bound {value!r} is not one of {', '.join(BOUNDS)}")
    return name


def read_tuner_decision(decision: TunerDecisionLike) -> TunerReading:
    """Normalise a tuner decision (Mapping or object). Absent fields stay None."""
    found = {field: _lookup(decision, names) for field, names in _ALIASES.items()}
    floats: dict[str, float | None] = {}
    for field, value in found.items():
        if field in ("bound", "rto_infeasible"):
            continue
        floats[field] = None if value is None else float(value)  # type: ignore[arg-type]
    bound = found["bound"]
    infeasible = found["rto_infeasible"]
    return TunerReading(
        **floats,
        bound=None if bound is None else _bound_name(bound),
        rto_infeasible=None if infeasible is None else bool(infeasible),
    )


class RematSummaryLike(Protocol):
    """What metrics read of a checkpoint's plan: the planner's summary of it,
    `streamremat.tuning.plan_summary.PlanSummary` (metrics import no tuner code)."""

    @property
    def groups_stored(self) -> int: ...
    @property
    def groups_recomputed(self) -> int: ...
    @property
    def bytes_stored(self) -> int: ...
    @property
    def bytes_saved(self) -> int: ...
    @property
    def extra_replay_records(self) -> int: ...
    @property
    def extra_replay_s(self) -> float: ...
    @property
    def forced(self) -> Mapping[Any, int]:
        """Groups stored because a constraint forced it, by reason (an enum or its name)."""
        ...


def _reason_label(reason: object) -> str:
    raw = reason.name if isinstance(reason, enum.Enum) else str(reason)
    label = raw.lower()
    if label not in REMAT_FORCED_REASONS:
        raise ValueError(f"remat reason {reason!r} is not one of {', '.join(REMAT_FORCED_REASONS)}")
    return label


def forced_labels(summary: RematSummaryLike) -> dict[str, int]:
    """The forced stores of a plan by `REMAT_FORCED_REASONS` label (0 for the others)."""
    forced: dict[str, int] = dict.fromkeys(REMAT_FORCED_REASONS, 0)
    for reason, n in summary.forced.items():
        forced[_reason_label(reason)] += n
    return forced


class Sensor:
    """Runtime hooks. Every method is a no-op here; implementations override what they need.

    `operator` is the operator's name, `partition` its source partition: the
    pair names a task. All durations are seconds, sizes bytes.
    """

    # Lifecycle: series for a task exist between these two calls.
    def on_task_assigned(self, operator: str, partition: int) -> None:
        """The task was assigned to this worker (before restore)."""

    def on_task_revoked(self, operator: str, partition: int) -> None:
        """The task left this worker: drop its per-partition gauges (counters keep
        counting where they were if it comes back: they never go back within a process)."""

    def on_partition_state(self, operator: str, partition: int, state: str) -> None:
        """The task's partition entered `state`: one of `PARTITION_STATES`."""

    def on_loop(self, session_alive: bool, joined: bool) -> None:
        """The worker's loop went round (every iteration: cheap). `session_alive`: its
        group session is up; `joined`: the group has given it an assignment."""

    # Live loop: called once per batch, so implementations must be cheap.
    def on_records_in(self, operator: str, partition: int, n: int) -> None:
        """`n` records consumed from the source."""

    def on_records_out(self, operator: str, partition: int, n: int) -> None:
        """`n` records emitted to the sink."""

    def on_batch(self, operator: str, partition: int, n: int, busy_s: float) -> None:
        """A batch of `n` records was processed in `busy_s` seconds."""

    def on_lag(self, operator: str, partition: int, lag_records: int) -> None:
        """Records between the read position and the source's high watermark."""

    def on_e2e_latency(
        self, operator: str, partition: int, latencies: Iterable[float] | LatencyBatch
    ) -> None:
        """Event timestamp -> emission, in seconds, for many emissions at once."""

    def on_commit(self, duration_s: float) -> None:
        """A transaction (outputs + offsets) committed in `duration_s`."""

    # Checkpoints.
    def on_checkpoint(
        self, operator: str, partition: int, duration_s: float, size_bytes: int, kind: str
    ) -> None:
        """A checkpoint is durable. `kind`: "full" or "incremental"."""

    def on_checkpoint_failed(self, operator: str, partition: int, reason: str) -> None:
        """A checkpoint was not written. `reason`: a short class, e.g. an exception type."""

    def on_checkpoint_age(self, operator: str, partition: int, age_s: float) -> None:
        """Seconds since the newest durable checkpoint was taken (restored ones included)."""

    # Recovery.
    def on_restore(self, operator: str, partition: int, duration_s: float, source: str) -> None:
        """State loaded in `duration_s`. `source`: "local", "kafka" or "none"."""

    def on_replay(self, operator: str, partition: int, records: int, seconds: float) -> None:
        """`records` replayed in `seconds` (a chunk, or the whole replay)."""

    def on_replay_progress(self, operator: str, partition: int, done: int, total: int) -> None:
        """Replay position: `done` of `total` records. Report done == total at the end."""

    def on_checkpoint_fallback(self, operator: str, partition: int, reason: str) -> None:
        """An invalid checkpoint was skipped for an older one (or the earliest offset)."""

    def on_failure_detected(self, operator: str, partition: int) -> None:
        """An unclean shutdown or lost partition was detected for this task."""

    def on_retention_gap(self, operator: str, partition: int, skipped: int) -> None:
        """`--on-retention-gap=reset` skipped `skipped` source offsets the task needed
        but the source no longer has (retention or DeleteRecords removed them)."""

    def on_committed_offset_missing(self, operator: str, partition: int) -> None:
        """A checkpoint exists but the group has no committed offset (expired or
        deleted): outputs after the checkpoint may be emitted a second time."""

    # Bad input and windows.
    def on_dead_letter(self, operator: str, partition: int, reason_class: str) -> None:
        """One record went to the dead-letter topic."""

    def on_late(self, operator: str, partition: int, n: int) -> None:
        """`n` records arrived after their windows closed."""

    def on_open_windows(self, operator: str, partition: int, windows: int, keys: int) -> None:
        """Windows and keys currently held in state."""

    # Tuner.
    def on_tuner(self, operator: str, partition: int, decision: TunerDecisionLike) -> None:
        """A tuner decision: a Mapping or an object; see `read_tuner_decision`."""

    def on_remat_plan(self, operator: str, partition: int, plan: RematSummaryLike) -> None:
        """The rematerialization plan a checkpoint of the task was written with, as
        its summary (`streamremat.tuning.plan_summary.PlanSummary`)."""
