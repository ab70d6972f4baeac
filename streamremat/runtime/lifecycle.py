"""The lifecycle of one source partition on a worker, and its retry policy.

A partition moves through explicit phases, checked at every transition::

    RESTORING ─► REPLAYING ─► LIVE
        │            │          │
        └────────────┴──────────┴─► BACKOFF (a Kafka step failed: paused, retried later)
                     └──────────┴─► FENCED  (another worker owns it now: paused)
    any of RESTORING, REPLAYING, LIVE ─► CLOSED (revoked or shut down)

BACKOFF, FENCED and CLOSED end one ``PartitionRunner``; a retry after BACKOFF,
or a new assignment, starts a new one in RESTORING. Metrics show the phase of
every assigned partition (``streamremat_partition_state``).
"""

from __future__ import annotations

import enum
import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.errors import ConcurrentTransactions, KafkaError, KafkaTimeoutError

from streamremat.metrics.sensor import Sensor
from streamremat.runtime.client import KafkaClientConfig
from streamremat.runtime.exceptions import PhaseError, WorkerError

log = logging.getLogger("streamremat.worker")


class Phase(enum.Enum):
    RESTORING = "restoring"
    REPLAYING = "replaying"
    LIVE = "live"
    BACKOFF = "backoff"
    FENCED = "fenced"
    CLOSED = "closed"


_NEXT: Final[dict[Phase, frozenset[Phase]]] = {
    Phase.RESTORING: frozenset({Phase.REPLAYING, Phase.LIVE, Phase.BACKOFF, Phase.CLOSED}),
    Phase.REPLAYING: frozenset({Phase.LIVE, Phase.BACKOFF, Phase.FENCED, Phase.CLOSED}),
    Phase.LIVE: frozenset({Phase.BACKOFF, Phase.FENCED, Phase.CLOSED}),
    Phase.BACKOFF: frozenset(),
    Phase.FENCED: frozenset(),
    Phase.CLOSED: frozenset(),
}

def check_transition(what: str, old: Phase, new: Phase) -> None:
    """Raise ``PhaseError`` unless ``old -> new`` is a transition of the diagram."""
    if new not in _NEXT[old]:
        raise PhaseError(f"{what}: no transition {old.value} -> {new.value}")


def is_retriable(exc: BaseException) -> bool:
    """Transient broker trouble: leader changes, not enough replicas, a coordinator
    that moved or is loading, request timeouts, lost connections."""
    if isinstance(exc, KafkaError):
        return bool(exc.retriable) or isinstance(exc, KafkaTimeoutError | ConcurrentTransactions)
    return isinstance(exc, TimeoutError | ConnectionError)


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded exponential backoff with jitter for a failing partition.

    Attempt ``n`` (from 1) waits ``d/2 + uniform(0, d/2)`` with
    ``d = min(cap_s, base_s * 2**(n-1))`` ("equal jitter": never less than half
    the step, so a flapping broker is not hammered, and partitions spread out).
    Retriable errors get ``retriable_attempts`` (about two minutes with the
    defaults: enough for a broker restart or a leader election); other Kafka
    errors (a record too large, a broken transaction) ``other_attempts``, then the
    worker stops with the cause. A partition that commits again starts afresh.
    """

    base_s: float = 0.5
    cap_s: float = 15.0
    retriable_attempts: int = 12
    other_attempts: int = 3

    def delay_s(self, attempt: int, rng: random.Random) -> float:
        step = min(self.cap_s, self.base_s * 2.0 ** max(0, attempt - 1))
        return step / 2 + rng.uniform(0, step / 2)

    def budget(self, retriable: bool) -> int:
        return self.retriable_attempts if retriable else self.other_attempts


@dataclass
class Retry:
    """Where one partition stands in its retries."""

    attempts: int = 0
    due_s: float = 0.0  # monotonic time of the next attempt
    cause: str = ""


class Parking:
    """Assigned partitions that have no runner: backing off (retried when due) or
    fenced (until the group takes them away). Their metric series stay, showing
    the state; the consumer keeps them paused."""

    def __init__(self, policy: RetryPolicy, sensor: Sensor,
                 pause: Callable[[TopicPartition], None],
                 operators: Callable[[TopicPartition], Sequence[str]],
                 rng: random.Random | None = None) -> None:
        self.policy = policy
        self.sensor = sensor
        self._pause = pause  # no fetches for a parked partition
        self._operators = operators
        self._rng = rng or random.Random()
        self._retries: dict[TopicPartition, Retry] = {}
        self.backoff: set[TopicPartition] = set()
        self.fenced: set[TopicPartition] = set()

    def _report(self, tp: TopicPartition, phase: Phase) -> None:
        for op in self._operators(tp):
            self.sensor.on_partition_state(op, tp.partition, phase.value)

    def back_off(self, tp: TopicPartition, exc: BaseException, now_s: float) -> WorkerError | None:
        """Schedule the next attempt for ``tp`` after ``exc``; the fatal error instead
        once the retry budget for that kind of error is spent."""
        retry = self._retries.setdefault(tp, Retry())
        retry.attempts += 1
        retry.cause = f"{type(exc).__name__}: {exc}"
        retriable = is_retriable(exc)
        budget = self.policy.budget(retriable)
        name = f"{tp.topic}[{tp.partition}]"
        if retry.attempts > budget:
            return WorkerError(
                f"{name}: giving up after {budget} retries; last error {retry.cause} "
                f"({'transient' if retriable else 'not transient'}). Check the brokers' "
                "health and logs; nothing of the failed work was committed"
            )
        delay = self.policy.delay_s(retry.attempts, self._rng)
        retry.due_s = now_s + delay
        self._pause(tp)
        self.backoff.add(tp)
        self._report(tp, Phase.BACKOFF)
        log.warning("%s: %s; backing off %.1f s (attempt %d of %d), then rebuilding it from "
                    "its checkpoint", name, retry.cause, delay, retry.attempts, budget,
                    extra={"event": "backoff", "topic": tp.topic, "partition": tp.partition,
                           "attempt": retry.attempts, "delay_s": delay,
                           "error": type(exc).__name__})
        return None

    def fence(self, tp: TopicPartition) -> None:
        self._pause(tp)
        self.fenced.add(tp)
        self._report(tp, Phase.FENCED)

    def due(self, now_s: float) -> list[TopicPartition]:
        """The partitions whose next attempt is due; they leave the backoff set."""
        ready = sorted((tp for tp in self.backoff if self._retries[tp].due_s <= now_s),
                       key=lambda tp: (tp.topic, tp.partition))
        self.backoff.difference_update(ready)
        return ready

    def committed(self, tp: TopicPartition) -> None:
        """``tp`` committed again: its next failure starts a fresh budget."""
        self._retries.pop(tp, None)

    def assigned(self, tps: Sequence[TopicPartition]) -> None:
        """Newly assigned here (restoring soon): a fresh retry budget, series shown."""
        for tp in tps:
            self.forget(tp)
            for op in self._operators(tp):
                self.sensor.on_task_assigned(op, tp.partition)
            self._report(tp, Phase.RESTORING)

    def revoked(self, tps: Sequence[TopicPartition]) -> None:
        """No longer assigned here: no retries, no gauges (counters stay)."""
        for tp in tps:
            self.forget(tp)
            for op in self._operators(tp):
                self.sensor.on_task_revoked(op, tp.partition)

    def forget(self, tp: TopicPartition) -> None:
        """``tp`` is no longer assigned here."""
        self._retries.pop(tp, None)
        self.backoff.discard(tp)
        self.fenced.discard(tp)


def session_alive(consumer: Any) -> bool:
    """Whether the consumer's group session is up: aiokafka has no public flag, so
    this reads its coordinator (known coordinator and a member id)."""
    coordinator = getattr(consumer, "_coordinator", None)
    return (coordinator is not None and getattr(coordinator, "coordinator_id", None) is not None
            and bool(getattr(coordinator, "member_id", "")))


async def start_producer(client: KafkaClientConfig, transactional_id: str | None = None) -> Any:
    """An idempotent ``acks=all`` producer, started; with ``transactional_id``, a
    partition's, whose ``init_transactions`` fences the previous owner. If the start
    fails (e.g. the broker is down), nothing is left open."""
    producer = AIOKafkaProducer(
        transactional_id=transactional_id, enable_idempotence=True, acks="all",
        **client.producer_kwargs(linger_ms=5, max_batch_size=256 * 1024),
    )
    try:
        await producer.start()
    except BaseException:
        try:
            await producer.stop()
        except Exception as exc:  # it never started: nothing to release
            log.debug("producer stop failed: %s", exc)
        raise
    return producer
