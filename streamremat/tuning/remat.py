"""The rematerialization planner (DESIGN §9): per group of open windows, store
its accumulators in the checkpoint, or recompute them by replay after a failure.

Pure and deterministic: the same ``PlanInputs`` and candidates give the same
plan. Groups are what the caller makes them (one window, or every window with
one close time); their identity is ``group`` (e.g. the close time in ms).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from streamremat.tuning.exceptions import TunerConfigError
from streamremat.tuning.tuner import TunerDecision


class Rematerialize(enum.Enum):
    """The per-operator choice: let the planner decide, or always store/recompute.
    ``RECOMPUTE`` still stores a group whose replay would be impossible (unknown
    first offset, outside retention): correctness is never traded."""

    AUTO = "auto"
    STORE = "store"
    RECOMPUTE = "recompute"


class Reason(enum.Enum):
    """Why a group is stored or recomputed."""

    CHEAPER_TO_STORE = "cheaper to store"
    CHEAPER_TO_RECOMPUTE = "cheaper to recompute"
    REQUESTED_STORE = "rematerialize='store'"
    REQUESTED_RECOMPUTE = "rematerialize='recompute'"
    UNKNOWN_OFFSET = "first offset unknown"
    RETENTION = "first offset outside retention"
    RTO = "extra replay would exceed the RTO"
    NO_REPLAY_RATE = "replay rate not measured yet"


FORCED = frozenset({Reason.REQUESTED_STORE, Reason.UNKNOWN_OFFSET, Reason.RETENTION,
                    Reason.RTO, Reason.NO_REPLAY_RATE})


@dataclass(frozen=True)
class WindowCandidate:
    """One open window (or several): ``encoded_bytes`` it would add to the
    checkpoint, ``first_offset`` the source offset of its first record (``None``:
    unknown, e.g. restored from a checkpoint that did not record it)."""

    group: int
    encoded_bytes: int
    first_offset: int | None


@dataclass(frozen=True)
class PlanInputs:
    """What the tuner measured, for the checkpoint about to be taken at offset ``c``.

    ``byte_cost_s``: capacity-seconds per checkpoint byte; ``interval_s``: the
    current interval T; ``failure_rate_per_s``: lambda; ``replay_rate_eps``: mu
    (mean, for the cost) and ``replay_rate_low_eps`` (conservative, for the RTO);
    ``downtime_p90_s``, ``ingest_rate_eps`` and ``worst_backlog_records`` (what a
    replay from ``c`` reads in the worst case of this cycle) give the recovery
    time the RTO bounds. ``safe_from_offset``: the smallest offset of the topic
    that replay reads (the source, or the repartition topic when the operator
    re-keys) that retention keeps until the next checkpoint is durable
    (``None``: unlimited); ``replay_topic`` names it in reasons.
    """

    checkpoint_offset: int
    byte_cost_s: float
    interval_s: float
    failure_rate_per_s: float
    replay_rate_eps: float | None
    replay_rate_low_eps: float | None
    ingest_rate_eps: float
    downtime_p90_s: float
    worst_backlog_records: float
    rto_s: float
    safe_from_offset: int | None = None
    replay_topic: str = "source"

    def __post_init__(self) -> None:
        if self.interval_s <= 0 or self.byte_cost_s < 0 or self.failure_rate_per_s < 0:
            raise TunerConfigError(
                f"planner inputs out of range: interval_s {self.interval_s} must be > 0, "
                f"byte_cost_s {self.byte_cost_s} and failure_rate_per_s "
                f"{self.failure_rate_per_s} >= 0"
            )


@dataclass(frozen=True)
class GroupPlan:
    group: int
    store: bool
    reason: Reason
    encoded_bytes: int
    first_offset: int | None


@dataclass(frozen=True)
class RematPlan:
    """The plan for one checkpoint. ``replay_from`` is ``o_min`` (the checkpoint
    offset when nothing is recomputed); costs are fractions of capacity."""

    checkpoint_offset: int
    groups: tuple[GroupPlan, ...]
    replay_from: int
    bytes_stored: int
    bytes_saved: int
    extra_replay_records: int
    extra_replay_s: float
    store_all_cost: float
    plan_cost: float

    @property
    def recompute(self) -> frozenset[int]:
        return frozenset(g.group for g in self.groups if not g.store)

    def forced(self) -> dict[Reason, int]:
        """How many groups each constraint forced to be stored."""
        out: dict[Reason, int] = {}
        for g in self.groups:
            if g.store and g.reason in FORCED:
                out[g.reason] = out.get(g.reason, 0) + 1
        return out


def plan_inputs(
    decision: TunerDecision,
    checkpoint_offset: int,
    safe_from_offset: int | None = None,
    replay_topic: str = "source",
) -> PlanInputs:
    """The planner's inputs from the tuner's decision for a checkpoint at
    ``checkpoint_offset``; a byte cost not measured yet counts as 0 (store all)."""
    r, t = decision.ingest_rate_eps, decision.interval_s
    backlog = r * (t + decision.durable_latency_p90_s) if r > 0 else 0.0
    return PlanInputs(
        checkpoint_offset=checkpoint_offset,
        byte_cost_s=decision.byte_cost_s or 0.0,
        interval_s=t,
        failure_rate_per_s=decision.failure_rate_per_s,
        replay_rate_eps=decision.replay_rate_eps,
        replay_rate_low_eps=decision.replay_rate_low_eps,
        ingest_rate_eps=r,
        downtime_p90_s=decision.downtime_p90_s,
        worst_backlog_records=backlog,
        rto_s=decision.rto_s,
        safe_from_offset=safe_from_offset,
        replay_topic=replay_topic,
    )


def max_extra_replay(inputs: PlanInputs) -> float:
    """Most records a recovery may replay beyond ``c`` and still meet the RTO:
    ``D + (B + extra + r*D) / (mu_low - r) <= RTO`` solved for ``extra``."""
    if math.isinf(inputs.rto_s):
        return math.inf
    mu, r, d = inputs.replay_rate_low_eps, inputs.ingest_rate_eps, inputs.downtime_p90_s
    if mu is None or mu <= r:
        return -math.inf
    return (inputs.rto_s - d) * (mu - r) - inputs.worst_backlog_records - r * d


def _merge_groups(candidates: Iterable[WindowCandidate]) -> list[WindowCandidate]:
    sizes: dict[int, int] = {}
    firsts: dict[int, int | None] = {}
    for c in candidates:
        sizes[c.group] = sizes.get(c.group, 0) + c.encoded_bytes
        if c.group not in firsts:
            firsts[c.group] = c.first_offset
        else:
            prev = firsts[c.group]
            firsts[c.group] = (
                None if prev is None or c.first_offset is None else min(prev, c.first_offset)
            )
    return [WindowCandidate(g, sizes[g], firsts[g]) for g in sorted(sizes)]


def plan(
    inputs: PlanInputs,
    candidates: Iterable[WindowCandidate],
    mode: Rematerialize = Rematerialize.AUTO,
) -> RematPlan:
    """Choose store or recompute for every group, minimising expected waste.

    1. Merge candidates per group (bytes add up; the first offset is the
       smallest, unknown if any is unknown).
    2. Force *store* where recomputing is impossible or unsafe: ``mode`` STORE;
       first offset unknown; first offset below ``safe_from_offset``
       (retention); in AUTO mode also a first offset further than
       ``max_extra_replay`` before ``c`` (the RTO), or no measured replay rate.
    3. The others are candidates. Recomputing a set costs
       ``lambda * (c - o_min) / mu`` (one extra replay from its smallest first
       offset per failure) and saves ``bytes * byte_cost_s / T`` per group; for
       a given ``o_min`` every candidate starting at or after it is free to
       recompute, so the optimum is a suffix by first offset: try each (and
       none), keep the cheapest; ties keep more stored.
    4. ``mode`` RECOMPUTE recomputes every candidate (correctness still forces).
    """
    c = inputs.checkpoint_offset
    groups = _merge_groups(candidates)
    budget = max_extra_replay(inputs)
    forced: dict[int, Reason] = {}
    free: list[WindowCandidate] = []
    for g in groups:
        o = g.first_offset
        if mode is Rematerialize.STORE:
            forced[g.group] = Reason.REQUESTED_STORE
        elif o is None:
            forced[g.group] = Reason.UNKNOWN_OFFSET
        elif inputs.safe_from_offset is not None and o < inputs.safe_from_offset:
            forced[g.group] = Reason.RETENTION
        elif mode is Rematerialize.AUTO and inputs.replay_rate_eps is None:
            forced[g.group] = Reason.NO_REPLAY_RATE
        elif mode is Rematerialize.AUTO and c - min(o, c) > budget:
            forced[g.group] = Reason.RTO
        else:
            free.append(g)

    per_byte = inputs.byte_cost_s / inputs.interval_s
    store_all = sum(g.encoded_bytes for g in groups) * per_byte
    # Newest first offset first; the group id breaks ties, so the order is total.
    free.sort(key=lambda g: (-_offset(g), g.group))
    costs = _suffix_costs(inputs, free, store_all, per_byte)
    if mode is Rematerialize.RECOMPUTE:
        best_k = len(free)
    else:
        best_k = min(range(len(costs)), key=lambda k: (costs[k], k))
    chosen = free[:best_k]
    recompute = {g.group for g in chosen}
    why = Reason.REQUESTED_RECOMPUTE if mode is Rematerialize.RECOMPUTE else None
    out = []
    for g in groups:
        if g.group in forced:
            store, reason = True, forced[g.group]
        elif g.group in recompute:
            store, reason = False, why or Reason.CHEAPER_TO_RECOMPUTE
        else:
            store, reason = True, Reason.CHEAPER_TO_STORE
        out.append(GroupPlan(g.group, store, reason, g.encoded_bytes, g.first_offset))
    replay_from = min([c] + [_offset(g) for g in chosen])
    saved = sum(g.encoded_bytes for g in chosen)
    extra = c - replay_from
    mu = inputs.replay_rate_eps
    return RematPlan(
        checkpoint_offset=c,
        groups=tuple(out),
        replay_from=replay_from,
        bytes_stored=sum(g.encoded_bytes for g in groups) - saved,
        bytes_saved=saved,
        extra_replay_records=extra,
        extra_replay_s=extra / mu if mu else (math.inf if extra else 0.0),
        store_all_cost=store_all,
        plan_cost=costs[best_k],
    )


def _offset(g: WindowCandidate) -> int:
    assert g.first_offset is not None  # unknown offsets are forced to store first
    return g.first_offset


def _suffix_costs(
    inputs: PlanInputs, free: list[WindowCandidate], store_all: float, per_byte: float
) -> list[float]:
    """Expected waste (fraction of capacity) when the first ``k`` of ``free``
    (sorted newest first) are recomputed, for every ``k`` in ``0..len(free)``."""
    c, mu, lam = inputs.checkpoint_offset, inputs.replay_rate_eps, inputs.failure_rate_per_s
    costs = [store_all]
    saved = 0
    for g in free:
        saved += g.encoded_bytes
        extra = max(c - _offset(g), 0)  # o_min of the prefix: its last (oldest) offset
        replay = 0.0 if extra == 0 else (lam * extra / mu if mu else math.inf)
        costs.append(store_all - saved * per_byte + replay)
    return costs


def summarize(plans: Mapping[str, RematPlan]) -> dict[str, dict[str, float]]:
    """Per operator: windows stored/recomputed, bytes saved, extra replay expected."""
    return {
        name: {
            "groups_stored": sum(1 for g in p.groups if g.store),
            "groups_recomputed": sum(1 for g in p.groups if not g.store),
            "bytes_saved": p.bytes_saved,
            "extra_replay_records": p.extra_replay_records,
            "extra_replay_s": p.extra_replay_s,
        }
        for name, p in plans.items()
    }
