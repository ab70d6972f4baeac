"""The partition lifecycle (checked transitions) and the retry policy, pure."""

from __future__ import annotations

import random

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import (
    KafkaConnectionError,
    MessageSizeTooLargeError,
    NotEnoughReplicasError,
    NotLeaderForPartitionError,
    RequestTimedOutError,
)

from streamremat.metrics.sensor import Sensor
from streamremat.runtime.exceptions import PhaseError
from streamremat.runtime.lifecycle import (
    Parking,
    Phase,
    RetryPolicy,
    check_transition,
    is_retriable,
)

TP = TopicPartition("clicks", 3)


def test_transitions_follow_the_diagram() -> None:
    for old, new in [(Phase.RESTORING, Phase.REPLAYING), (Phase.REPLAYING, Phase.LIVE),
                     (Phase.RESTORING, Phase.LIVE), (Phase.LIVE, Phase.FENCED),
                     (Phase.LIVE, Phase.BACKOFF), (Phase.RESTORING, Phase.BACKOFF),
                     (Phase.LIVE, Phase.CLOSED)]:
        check_transition("p", old, new)
    for old, new in [(Phase.LIVE, Phase.REPLAYING), (Phase.CLOSED, Phase.LIVE),
                     (Phase.FENCED, Phase.LIVE), (Phase.BACKOFF, Phase.LIVE),
                     (Phase.RESTORING, Phase.FENCED), (Phase.LIVE, Phase.RESTORING)]:
        with pytest.raises(PhaseError, match=f"{old.value} -> {new.value}"):
            check_transition("p", old, new)


def test_broker_trouble_is_retriable_and_a_too_large_record_is_not() -> None:
    for exc in (KafkaConnectionError(), RequestTimedOutError(), NotLeaderForPartitionError(),
                NotEnoughReplicasError(), TimeoutError(), ConnectionResetError()):
        assert is_retriable(exc), exc
    assert not is_retriable(MessageSizeTooLargeError())
    assert not is_retriable(ValueError())


def test_delays_grow_exponentially_with_jitter_and_stay_bounded() -> None:
    policy = RetryPolicy(base_s=0.5, cap_s=15.0)
    rng = random.Random(1)
    for attempt in range(1, 20):
        step = min(15.0, 0.5 * 2 ** (attempt - 1))
        delays = {policy.delay_s(attempt, rng) for _ in range(50)}
        assert all(step / 2 <= d <= step for d in delays)
        assert len(delays) > 1  # jittered


class _States(Sensor):
    def __init__(self) -> None:
        self.states: list[tuple[str, int, str]] = []

    def on_partition_state(self, operator: str, partition: int, state: str) -> None:
        self.states.append((operator, partition, state))


def test_parking_backs_off_then_gives_up_naming_the_cause() -> None:
    sensor = _States()
    paused: list[TopicPartition] = []
    parking = Parking(RetryPolicy(retriable_attempts=3, other_attempts=1), sensor,
                      paused.append, lambda tp: ["counts"], random.Random(2))
    now = 100.0
    for _ in range(3):
        assert parking.back_off(TP, KafkaConnectionError("broker down"), now) is None
        assert TP in parking.backoff and parking.due(now) == []
        now += 20.0
        assert parking.due(now) == [TP] and TP not in parking.backoff
    fatal = parking.back_off(TP, KafkaConnectionError("broker down"), now)
    assert fatal is not None
    assert "clicks[3]" in str(fatal) and "KafkaConnectionError" in str(fatal)
    assert "after 3 retries" in str(fatal)
    assert sensor.states == [("counts", 3, "backoff")] * 3
    assert paused == [TP] * 3
    # A commit resets the budget; a persistent error gets the small one.
    parking.committed(TP)
    assert parking.back_off(TP, MessageSizeTooLargeError(), now) is None
    fatal = parking.back_off(TP, MessageSizeTooLargeError(), now)
    assert fatal is not None and "not transient" in str(fatal)
    parking.fence(TP)
    assert sensor.states[-1] == ("counts", 3, "fenced")
    parking.forget(TP)
    assert not parking.backoff and not parking.fenced
