"""What one partition tells its ``CheckpointScheduler``, and what it shows of it.

The runner counts records and checkpoints here; the scheduler's tuner learns the
batches' throughput and the source's growth from it, and its reasoning goes to
the gauges and, after each checkpoint, to the log.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

from streamremat.metrics.sensor import Sensor
from streamremat.runtime.scheduling import CheckpointScheduler
from streamremat.tuning.plan_summary import PlanSummary
from streamremat.tuning.remat import RematPlan
from streamremat.tuning.report import describe_plan

log = logging.getLogger("streamremat.worker")


class TunerFeed:
    """One partition's checkpoint bookkeeping, between its runner and its scheduler."""

    def __init__(self, scheduler: CheckpointScheduler) -> None:
        self.scheduler = scheduler
        #: checkpoint at the next chance (set on going live)
        self.checkpoint_soon = False
        self.records_since_checkpoint = 0
        self.last_checkpoint_mono = time.monotonic()
        self.last_checkpoint_wall = time.time()
        #: the offset of the newest checkpoint (-1: none yet)
        self.checkpointed_at = -1
        self.last_highwater: int | None = None

    def due(self) -> bool:
        """Whether a checkpoint is due now. A query: nothing changes."""
        if self.checkpoint_soon:
            return True
        return self.scheduler.due(
            time.time(), self.records_since_checkpoint,
            time.monotonic() - self.last_checkpoint_mono,
        )

    def processed(self, live_records: int) -> None:
        """``live_records`` records were processed live (since the last checkpoint)."""
        self.records_since_checkpoint += live_records

    def batch_done(self, records: int, busy_s: float, backlogged: bool) -> None:
        self.scheduler.batch(records, busy_s, backlogged)

    def observe_source(self, highwater: int | None) -> None:
        """Feed the tuner the source's growth since the last call (its ingest rate r)."""
        if highwater is not None:
            if self.last_highwater is not None:
                self.scheduler.source_grew(time.time(), max(0, highwater - self.last_highwater))
            self.last_highwater = highwater

    def backlog(self, highwater: int | None, restored: int) -> int | None:
        """Records a replay would read on a failure now: newest checkpoint (or the
        offset the partition was restored at) to the end."""
        start = self.checkpointed_at if self.checkpointed_at >= 0 else restored
        return None if highwater is None else max(0, highwater - start)

    def report_gauges(self, sensor: Sensor, names: list[str], partition: int, position: int,
                      highwater: int | None, restored: int) -> None:
        """Periodic gauges: lag, checkpoint age and the tuner's reasoning (reads only)."""
        age = time.time() - self.last_checkpoint_wall
        decision = self.scheduler.decision(time.time(), age, self.backlog(highwater, restored))
        for name in names:
            if highwater is not None:
                sensor.on_lag(name, partition, max(0, highwater - position))
            sensor.on_checkpoint_age(name, partition, age)
            sensor.on_tuner(name, partition, decision)

    def checkpoint_skipped(self) -> None:
        """A checkpoint was due but nothing changed since the last one: a new interval."""
        self.last_checkpoint_mono = time.monotonic()

    def checkpoint_written(self, where: str, position: int, restored: int,
                           plans: Mapping[str, RematPlan] | None = None,
                           sensor: Sensor | None = None, partition: int = -1) -> None:
        """A checkpoint at ``position`` was written: a new interval; log the tuner
        and, per operator, the rematerialization plan it was written with
        (``plans``, by operator name; also reported to ``sensor``), in the words
        ``streamremat tune`` uses."""
        self.checkpoint_soon = False
        self.checkpointed_at = position
        self.last_checkpoint_mono = time.monotonic()
        self.last_checkpoint_wall = time.time()
        self.records_since_checkpoint = 0
        decision = self.scheduler.decision(time.time(), 0.0,
                                           self.backlog(self.last_highwater, restored))
        words = decision.explain()
        for name, plan in sorted((plans or {}).items()):
            summary = PlanSummary.of(plan)
            words += " | " + describe_plan(name, summary)
            if sensor is not None:
                sensor.on_remat_plan(name, partition, summary)
        log.info("%s: tuner: %s", where, words,
                 extra={"event": "tuner", "interval_s": decision.interval_s,
                        "bound": decision.active_bound.name.lower(),
                        "predicted_recovery_s": decision.predicted_recovery_s})
