"""The rematerialization plan of each task at a checkpoint (DESIGN §9): the
planner (``tuning/remat.py::plan``) on the tuner's decision, with the retention
bound of the topic that replay reads."""

from __future__ import annotations

import asyncio
import collections
import logging
import math
from collections.abc import Sequence
from typing import Any

from aiokafka import TopicPartition
from aiokafka.errors import KafkaError

from streamremat.core.task import Task
from streamremat.state.frame import TaskId
from streamremat.tuning import TunerDecision
from streamremat.tuning.remat import (
    Rematerialize,
    RematPlan,
    WindowCandidate,
    plan,
    plan_inputs,
)

#: Samples of the partition's end offset kept for the retention bound.
MAX_SAMPLES = 4096
#: Samples read from the broker when a partition is assigned (``broker_samples``).
SEED_SAMPLES = 16

log = logging.getLogger("streamremat.worker")


class RetentionBound:
    """The smallest offset retention keeps long enough, from samples of the
    partition's end offset: a record at or after the end offset seen at wall
    time ``w`` was appended after ``w``, so it lives until at least
    ``w + retention``. Before the first sample nothing is known: those offsets
    count as outside retention."""

    def __init__(self, retention_s: float | None) -> None:
        self.retention_s = retention_s
        self._samples: collections.deque[tuple[float, int]] = collections.deque(
            maxlen=MAX_SAMPLES)

    async def seed_from(self, consumer: Any, tp: TopicPartition, now_s: float) -> None:
        """Start with ``broker_samples`` of ``tp`` (at assignment, before any
        ``observe``: they are older than every observed sample)."""
        samples = await broker_samples(consumer, tp, self.retention_s, now_s)
        self._samples.extendleft(reversed(samples))

    def observe(self, now_s: float, highwater: int | None) -> None:
        if highwater is None or (self._samples and self._samples[-1][1] == highwater):
            return
        self._samples.append((now_s, highwater))

    def safe_from(self, now_s: float, needed_for_s: float, checkpoint_offset: int) -> int | None:
        """The smallest offset still retained ``needed_for_s`` from now (None:
        retention is unlimited); ``checkpoint_offset`` when no sample is young
        enough to tell."""
        if self.retention_s is None or math.isinf(self.retention_s):
            return None
        cutoff = now_s + needed_for_s - self.retention_s
        for wall, highwater in self._samples:
            if wall >= cutoff:
                return min(highwater, checkpoint_offset)
        return checkpoint_offset


async def broker_samples(consumer: Any, tp: TopicPartition, retention_s: float | None,
                         now_s: float) -> list[tuple[float, int]]:
    """Samples for ``RetentionBound`` from the broker's time index, so that a new
    owner knows the retention of offsets appended before it started (without
    them it forces every window open across a restart to be stored).

    Time-based retention deletes whole segments from the log start, oldest
    first, once a segment's largest record timestamp is older than the
    retention, and stops at the first one that is not: so every offset at or
    after the first one whose timestamp is >= ``w`` (``offsets_for_times``)
    lives until at least ``w + retention``, as a sample ``(w, offset)`` says.
    Timestamps are spread over the retention period, one every
    ``retention / SEED_SAMPLES``; a timestamp past the last record's gives the
    end offset. None on any error (the bound then learns from its own samples)."""
    if retention_s is None or math.isinf(retention_s) or not hasattr(consumer,
                                                                     "offsets_for_times"):
        return []  # unlimited; or a consumer that lists no offsets
    step = retention_s / SEED_SAMPLES
    walls = [now_s - retention_s + step * k for k in range(1, SEED_SAMPLES + 1)]
    try:
        end = (await consumer.end_offsets([tp]))[tp]
        found = await asyncio.gather(*(consumer.offsets_for_times({tp: int(w * 1000)})
                                       for w in walls))
    except (KafkaError, OSError) as exc:
        log.info("%s[%d]: the retention bound starts without the broker's time index: %r",
                 tp.topic, tp.partition, exc)
        return []
    samples = []
    for wall, by_tp in zip(walls, found, strict=True):
        hit = by_tp.get(tp)
        samples.append((wall, end if hit is None else hit.offset))
    return samples


def plan_checkpoint(
    tasks: Sequence[Task], task_ids: Sequence[TaskId], decision: TunerDecision,
    checkpoint_offset: int, safe_from: int | None, topic: str, clean: bool = False,
) -> dict[TaskId, RematPlan]:
    """Each task's plan for the checkpoint about to be written at ``checkpoint_offset``.

    A ``clean`` checkpoint (revocation, shutdown) stores every group: the next
    owner restores from it for certain, so a recompute there is no bet on a
    failure that may not come but extra replay paid every time; and a group
    rebalancing faster than that replay would hand the same recompute range on
    for ever (seen in bench/rematerialize.py under ``auto``)."""
    inputs = plan_inputs(decision, checkpoint_offset, safe_from, topic)
    return {
        task_id: plan(inputs, [WindowCandidate(*g) for g in task.groups()],
                      Rematerialize.STORE if clean
                      else Rematerialize(task.operator.rematerialize))
        for task, task_id in zip(tasks, task_ids, strict=True)
    }


def needed_for_s(decision: TunerDecision) -> float:
    """How long a checkpoint's replay range must stay retained: until the next
    checkpoint is durable, plus a recovery within the RTO."""
    rto = decision.rto_s if math.isfinite(decision.rto_s) else 0.0
    return decision.interval_s + decision.durable_latency_p90_s + decision.downtime_p90_s + rto
