"""Checkpoint-interval policies used by the runtime's checkpoint scheduler."""

from __future__ import annotations

import math
from typing import Protocol, runtime_checkable

from streamremat.tuning.exceptions import TunerConfigError
from streamremat.tuning.tuner import Tuner


@runtime_checkable
class IntervalPolicy(Protocol):
    """Asked by the scheduler, after each batch, whether to checkpoint now."""

    def should_checkpoint(
        self, now_s: float, records_since_last: int, seconds_since_last: float
    ) -> bool:
        """``True`` means: take a checkpoint now (the policy starts a new interval)."""
        ...

    def interval_s(self, now_s: float) -> float:
        """The current time interval (``math.inf`` when only a record count applies)."""
        ...


class FixedInterval:
    """Checkpoint every ``seconds`` and/or every ``records``, whichever comes first."""

    def __init__(self, seconds: float | None = None, records: int | None = None) -> None:
        if seconds is None and records is None:
            raise TunerConfigError("FixedInterval needs seconds and/or records")
        if (seconds is not None and seconds <= 0) or (records is not None and records <= 0):
            raise TunerConfigError(f"FixedInterval needs positive values ({seconds}, {records})")
        self.seconds = seconds
        self.records = records

    @property
    def name(self) -> str:
        parts = []
        if self.seconds is not None:
            parts.append(f"{self.seconds:g}s")
        if self.records is not None:
            parts.append(f"{self.records}rec")
        return "fixed-" + "-".join(parts)

    def should_checkpoint(
        self, now_s: float, records_since_last: int, seconds_since_last: float
    ) -> bool:
        return (self.seconds is not None and seconds_since_last >= self.seconds) or (
            self.records is not None and records_since_last >= self.records
        )

    def interval_s(self, now_s: float) -> float:
        return math.inf if self.seconds is None else self.seconds


class AdaptiveInterval:
    """The interval chosen by a ``Tuner``; one tuner decision step per checkpoint.

    ``tuner`` is public: after a restore, the runtime replaces it with
    ``Tuner.from_bytes(...)`` from the restored checkpoint.
    """

    name = "adaptive"

    def __init__(self, tuner: Tuner) -> None:
        self.tuner = tuner

    def should_checkpoint(
        self, now_s: float, records_since_last: int, seconds_since_last: float
    ) -> bool:
        if seconds_since_last < self.interval_s(now_s):
            return False
        self.tuner.next_interval(now_s)
        return True

    def interval_s(self, now_s: float) -> float:
        current = self.tuner.current_interval_s
        return self.tuner.next_interval(now_s) if current is None else current
