"""Checkpoint scheduling: when a partition checkpoints, and what the tuner learns.

One ``CheckpointScheduler`` per source partition. It wraps the interval policy
(fixed, or adaptive through a ``Tuner``) and turns the runtime's measurements
into tuner observations. Its state travels inside every checkpoint (frame
``meta``), so failure counts and estimates survive restarts and follow the
partition to another worker.
"""

from __future__ import annotations

import logging
import struct

from streamremat.runtime.settings import CheckpointSettings
from streamremat.tuning import AdaptiveInterval, FixedInterval, Tuner, TunerConfig, TunerDecision
from streamremat.tuning.exceptions import TunerStateError
from streamremat.tuning.plan_summary import PlanSummary
from streamremat.tuning.policy import IntervalPolicy

log = logging.getLogger("streamremat.worker")

_META_MAGIC = b"SRM1"
_META_PLAN_MAGIC = b"SRM2"  # SRM1's head, then the tuner state's length, it, a plan summary
_META_HEAD = struct.Struct(">4sq")  # magic, wall time of the checkpoint in ms
_TUNER_LEN = struct.Struct(">I")


def encode_meta(wall_ms: int, tuner_state: bytes) -> bytes:
    return _META_HEAD.pack(_META_MAGIC, wall_ms) + tuner_state


def with_plan(meta: bytes, plan: PlanSummary | None) -> bytes:
    """``meta`` (from ``encode_meta``) carrying one task's plan summary as well:
    the plan its checkpoint was written with, for ``streamremat tune``."""
    if plan is None or meta[:4] != _META_MAGIC:
        return meta
    wall_ms, state = decode_meta(meta)
    assert wall_ms is not None
    return (_META_HEAD.pack(_META_PLAN_MAGIC, wall_ms) + _TUNER_LEN.pack(len(state)) + state
            + plan.to_bytes())


def _split(meta: bytes) -> tuple[int | None, bytes, bytes]:
    if len(meta) < _META_HEAD.size or meta[:4] not in (_META_MAGIC, _META_PLAN_MAGIC):
        return None, b"", b""
    _, wall_ms = _META_HEAD.unpack_from(meta)
    rest = meta[_META_HEAD.size :]
    if meta[:4] == _META_MAGIC:
        return wall_ms, rest, b""
    if len(rest) < _TUNER_LEN.size:
        return wall_ms, b"", b""
    (n,) = _TUNER_LEN.unpack_from(rest)
    body = rest[_TUNER_LEN.size :]
    return wall_ms, body[:n], body[n:]


def decode_meta(meta: bytes) -> tuple[int | None, bytes]:
    """(checkpoint wall time in ms, tuner state); (None, b"") for foreign or empty meta."""
    wall_ms, state, _ = _split(meta)
    return wall_ms, state


def decode_plan(meta: bytes) -> PlanSummary | None:
    """The plan summary ``with_plan`` put in ``meta``; None if it holds none or an
    unreadable one (a checkpoint from before plans, or a newer format)."""
    _, _, plan = _split(meta)
    if not plan:
        return None
    try:
        return PlanSummary.from_bytes(plan)
    except TunerStateError as exc:
        log.warning("plan summary in the checkpoint is unreadable (%s)", exc)
        return None


#: A sample of D is plausible up to this many (session timeout + commit interval)
#: past the previous owner's last sign of life, plus the restore: a failure is
#: noticed within one session timeout, an owner with input commits at least every
#: commit interval, and a rebalance that waits for other members takes a few more
#: session timeouts. A longer gap is idle time (no input, so no commits) or an
#: outage of the whole app: neither says how long a failover takes.
PLAUSIBLE_DETECTIONS = 6


#: What the prior downtime D adds to the time a crash goes unnoticed: a new owner
#: starting and restoring. An upper bound: the process starts while the group is
#: still detecting the crash.
PRIOR_START_AND_RESTORE_S = 2.0


def downtime_sample(restored_s: float, last_alive_s: float | None, restore_s: float,
                    session_timeout_s: float, commit_interval_s: float) -> tuple[float, bool]:
    """D of an unclean recovery and whether it was measured: from the previous
    owner's last sign of life for the partition (its last commit or checkpoint, wall
    clock) until the state was restored at ``restored_s``. Unknown or implausible
    (negative: clocks disagree; too long: see ``PLAUSIBLE_DETECTIONS``) gives the
    estimate session timeout + restore instead."""
    if last_alive_s is not None:
        gap = restored_s - last_alive_s
        if 0 <= gap <= PLAUSIBLE_DETECTIONS * (session_timeout_s + commit_interval_s) + restore_s:
            return gap, True
    return session_timeout_s + restore_s, False


def tuner_config(ck: CheckpointSettings, detect_s: float = 10.0) -> TunerConfig:
    """``detect_s``: how long a crash goes unnoticed (the group's session timeout);
    with a couple of seconds to start and restore, it is the prior downtime D."""
    return TunerConfig(
        rto_s=ck.rto_s,
        min_interval_s=ck.min_interval_s,
        max_interval_s=ck.max_interval_s,
        prior_mtbf_s=ck.prior_mtbf_s,
        prior_downtime_s=detect_s + PRIOR_START_AND_RESTORE_S,
    )


class CheckpointScheduler:
    """Decides when to checkpoint; feeds the adaptive tuner with measurements."""

    def __init__(self, settings: CheckpointSettings, detect_s: float = 10.0) -> None:
        self.settings = settings
        self.config = tuner_config(settings, detect_s)
        # The tuner always learns, so metrics and `streamremat tune` show what it
        # would choose even while a fixed interval is in force.
        self.tuner = Tuner(self.config)
        self.policy: IntervalPolicy
        self.fixed: FixedInterval | None = None
        if settings.policy == "adaptive":
            self.policy = AdaptiveInterval(self.tuner)
        else:
            self.fixed = FixedInterval(seconds=settings.interval_s,
                                       records=settings.interval_records)
            self.policy = self.fixed
        self._unclean = False

    # -- restore ----------------------------------------------------------------

    def restore(self, meta: bytes, unclean: bool, now_s: float,
                retention_s: float | None) -> None:
        """Continue from a checkpoint's tuner state; count an unclean stop as a failure."""
        _, state = decode_meta(meta)
        if state:
            try:
                self.tuner = Tuner.from_bytes(state, self.config)
            except TunerStateError as exc:
                log.warning("tuner state in the checkpoint is unreadable (%s); starting "
                            "from the priors", exc)
            if self.fixed is None:
                self.policy = AdaptiveInterval(self.tuner)
        self.tuner.set_retention(retention_s)
        self._unclean = unclean
        if unclean:
            self.tuner.observe_failure(now_s)

    def recovered(self, downtime_s: float, replayed: int, replay_s: float) -> None:
        """The restore of ``restore`` finished. D is the downtime *per failure*: a
        clean start or hand-over (a restore of a few ms) is no sample of it, or it
        would drag D, and every recovery prediction, far below a real failover."""
        self.tuner.observe_recovery(downtime_s if self._unclean else None, replayed,
                                    replay_s)

    # -- live -------------------------------------------------------------------

    def batch(self, records: int, busy_s: float, backlogged: bool) -> None:
        """A batch was processed; ``backlogged`` batches measure full-speed throughput."""
        if backlogged:
            self.tuner.observe_backlog(records, busy_s)

    def source_grew(self, now_s: float, records: int) -> None:
        """The source partition's end offset grew by ``records``: the ingest rate r,
        which is what replay has to catch up with (not what we happen to process)."""
        self.tuner.observe_ingest(now_s, records)

    def due(self, now_s: float, records_since: int, seconds_since: float) -> bool:
        """Whether the policy wants a checkpoint now. A query: the tuner is unchanged."""
        return self.policy.should_checkpoint(now_s, records_since, seconds_since)

    def start_interval(self, now_s: float) -> None:
        """A scheduled checkpoint is taken now: the policy starts its next interval
        (the adaptive one takes its tuner decision step here, once per checkpoint)."""
        self.policy.start_interval(now_s)

    def checkpointed(self, now_s: float, cost_s: float, durable_latency_s: float,
                     size_bytes: int) -> None:
        self.tuner.observe_checkpoint(now_s, cost_s, durable_latency_s, size_bytes)

    def meta(self, wall_ms: int) -> bytes:
        return encode_meta(wall_ms, self.tuner.to_bytes())

    def decision(self, now_s: float, checkpoint_age_s: float | None = None,
                 backlog_records: float | None = None) -> TunerDecision:
        """The tuner's figures, saying which policy is in force; under a fixed one,
        the interval (and the worst-case recovery) are the fixed policy's.
        ``backlog_records``: source end offset minus the durable checkpoint's."""
        fixed = self.fixed
        return self.tuner.decision(
            now_s, backlog_records, checkpoint_age_s=checkpoint_age_s,
            fixed_interval_s=None if fixed is None else fixed.seconds,
            fixed_records=None if fixed is None else fixed.records,
        )
