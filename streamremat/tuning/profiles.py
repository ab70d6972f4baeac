"""Time profiles for simulated quantities: ``at(t_s) -> value``. Pure and printable."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol


class Profile(Protocol):
    def at(self, t_s: float) -> float: ...


@dataclass(frozen=True)
class Constant:
    value: float

    def at(self, t_s: float) -> float:
        return self.value


@dataclass(frozen=True)
class Diurnal:
    """``mean * (1 + amplitude * cos(2 pi (t - peak_s) / period_s))``: peaks at ``peak_s``."""

    mean: float
    amplitude: float
    peak_s: float = 12 * 3600.0
    period_s: float = 24 * 3600.0

    def at(self, t_s: float) -> float:
        phase = 2.0 * math.pi * (t_s - self.peak_s) / self.period_s
        return self.mean * (1.0 + self.amplitude * math.cos(phase))


@dataclass(frozen=True)
class Ramp:
    """Linear from ``start`` at ``t = 0`` to ``end`` at ``t = duration_s``, then flat."""

    start: float
    end: float
    duration_s: float

    def at(self, t_s: float) -> float:
        f = min(max(t_s / self.duration_s, 0.0), 1.0)
        return self.start + (self.end - self.start) * f


@dataclass(frozen=True)
class Steps:
    """Piecewise constant: ``((t0, v0), (t1, v1), ...)`` with ``t0 = 0``, ``v_i`` from ``t_i``."""

    steps: tuple[tuple[float, float], ...]

    def at(self, t_s: float) -> float:
        value = self.steps[0][1]
        for start, v in self.steps:
            if t_s < start:
                break
            value = v
        return value

    @property
    def peak(self) -> float:
        return max(v for _, v in self.steps)
