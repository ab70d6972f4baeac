"""Checkpoint-interval policies used by the runtime's checkpoint scheduler."""

from __future__ import annotations

import math
from typing import Protocol, runtime_checkable

from streamremat.tuning.exceptions import TunerConfigError
from streamremat.tuning.tuner import Tuner


@runtime_checkable
class IntervalPolicy(Protocol):
    """Asked by the scheduler, after each batch, whether to checkpoint now; told
    when a checkpoint starts a new interval."""

    def should_checkpoint(
        self, now_s: float, records_since_last: int, seconds_since_last: float
    ) -> bool:
        """Whether a checkpoint is due now. A query: asking twice changes nothing."""
        ...

    def start_interval(self, now_s: float) -> None:
        """A checkpoint is taken now: the next interval starts (the only state change)."""
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

    def start_interval(self, now_s: float) -> None:
        """Nothing to decide: every interval is the same."""

    def interval_s(self, now_s: float) -> float:
        return math.inf if self.seconds is None else self.seconds


class AdaptiveInterval:
    """The interval chosen by a ``Tuner``; one tuner decision step per checkpoint
    (``start_interval``), none when asked whether one is due.

    ``tuner`` is public: after a restore, the runtime replaces it with
    ``Tuner.from_bytes(...)`` from the restored checkpoint.
    """

    name = "adaptive"

    def __init__(self, tuner: Tuner) -> None:
        self.tuner = tuner

    def should_checkpoint(
        self, now_s: float, records_since_last: int, seconds_since_last: float
    ) -> bool:
        return seconds_since_last >= self.interval_s(now_s)

    def start_interval(self, now_s: float) -> None:
        """One tuner decision step: it chooses the interval that starts now."""
        self.tuner.next_interval(now_s)

    def interval_s(self, now_s: float) -> float:
        """The interval in force; before the first step, what the first would choose."""
        current = self.tuner.current_interval_s
        return self.tuner.decision(now_s).interval_s if current is None else current
