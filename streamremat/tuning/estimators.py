"""Online estimators. Each has a small ``summary()`` tuple to persist and restore it."""

from __future__ import annotations

import math
from dataclasses import dataclass

_LN2 = math.log(2.0)


@dataclass
class EwmaStat:
    """Exponentially weighted mean and variance of samples (C, L, D, mu).

    The first samples are averaged plainly (weight ``1/n``) so that a few
    samples already give a sound mean; later ones get at least ``weight``.
    The conservative quantiles assume roughly normal samples.
    """

    weight: float
    mean: float = 0.0
    var: float = 0.0
    count: float = 0.0

    def update(self, x: float) -> None:
        self.count += 1.0
        a = max(1.0 / self.count, self.weight)
        d = x - self.mean
        self.mean += a * d
        self.var = (1.0 - a) * (self.var + a * d * d)

    @property
    def known(self) -> bool:
        return self.count > 0

    @property
    def std(self) -> float:
        return math.sqrt(max(self.var, 0.0))

    def upper(self, z: float) -> float:
        """``mean + z * std``, e.g. ``z = 1.28`` for a p90."""
        return self.mean + z * self.std

    def lower(self, z: float) -> float:
        """``mean - z * std``, floored at half the mean so it stays positive."""
        return max(self.mean - z * self.std, 0.5 * self.mean)

    def summary(self) -> list[float]:
        return [self.mean, self.var, self.count]

    def restore(self, summary: list[float]) -> None:
        self.mean, self.var, self.count = (float(v) for v in summary)


@dataclass
class RateEwma:
    """Events per second, smoothed with a time-based half-life.

    ``observe(now_s, events)`` gets the events since the previous call; the
    first call after construction only sets the time origin.
    """

    half_life_s: float
    rate: float = 0.0
    known: bool = False
    _last_s: float | None = None
    _pending: float = 0.0

    def observe(self, now_s: float, events: float) -> None:
        if self._last_s is None:
            self._last_s = now_s
            return
        self._pending += events
        dt = now_s - self._last_s
        if dt <= 0:
            return
        sample = self._pending / dt
        if self.known:
            a = 1.0 - 2.0 ** (-dt / self.half_life_s)
            self.rate += a * (sample - self.rate)
        else:
            self.rate, self.known = sample, True
        self._last_s, self._pending = now_s, 0.0

    def summary(self) -> list[float]:
        return [self.rate, 1.0 if self.known else 0.0]

    def restore(self, summary: list[float]) -> None:
        self.rate, self.known = float(summary[0]), bool(summary[1])
        self._last_s, self._pending = None, 0.0


@dataclass
class _Discounted:
    """Failures ``n`` and exposure seconds ``t``, both decaying with ``half_life_s``."""

    half_life_s: float
    n: float = 0.0
    t: float = 0.0

    def at(self, dt: float) -> tuple[float, float]:
        if dt <= 0:
            return self.n, self.t
        decay = 2.0 ** (-dt / self.half_life_s)
        return self.n * decay, self.t * decay + (1.0 - decay) * self.half_life_s / _LN2


@dataclass
class FailureRate:
    """Gamma-Poisson posterior mean of the failure rate, with discounting.

    ``lam = (a0 + n) / (b0 + t)``: the prior is ``a0`` pseudo-failures over
    ``b0 = a0 * prior_mtbf_s`` seconds; ``n`` (failures) and ``t`` (exposure
    seconds) decay with ``half_life_s`` so a changed rate is followed, while
    the fixed prior keeps ``lam`` away from 0 after long quiet spells.
    A second posterior with ``fast_half_life_s`` sees a rise in the failure
    rate sooner; the larger of the two is used, because checkpointing too
    rarely while failures cluster costs more than checkpointing a little
    too often for an hour.
    """

    prior_failures: float
    prior_mtbf_s: float
    half_life_s: float
    fast_half_life_s: float
    last_s: float | None = None

    def __post_init__(self) -> None:
        self._slow = _Discounted(self.half_life_s)
        self._fast = _Discounted(self.fast_half_life_s)

    @property
    def n(self) -> float:
        """Discounted failure count of the slow posterior."""
        return self._slow.n

    def advance(self, now_s: float) -> None:
        """Count exposure up to ``now_s`` (clock steps backwards are ignored)."""
        if self.last_s is None:
            self.last_s = now_s
            return
        dt = now_s - self.last_s
        if dt <= 0:
            return
        for post in (self._slow, self._fast):
            post.n, post.t = post.at(dt)
        self.last_s = now_s

    def observe_failure(self, now_s: float) -> None:
        self.advance(now_s)
        self._slow.n += 1.0
        self._fast.n += 1.0

    @property
    def rate_per_s(self) -> float:
        return self.rate_at(self.last_s)

    def rate_at(self, now_s: float | None) -> float:
        """The rate as it would be at ``now_s``, without changing state."""
        dt = 0.0 if now_s is None or self.last_s is None else now_s - self.last_s
        a0, b0 = self.prior_failures, self.prior_failures * self.prior_mtbf_s
        return max((a0 + n) / (b0 + t) for n, t in (self._slow.at(dt), self._fast.at(dt)))

    def summary(self) -> list[float | None]:
        return [self._slow.n, self._slow.t, self._fast.n, self._fast.t, self.last_s]

    def restore(self, summary: list[float | None]) -> None:
        n, t, nf, tf, last = summary
        self._slow.n, self._slow.t = float(n or 0.0), float(t or 0.0)
        self._fast.n, self._fast.t = float(nf or 0.0), float(tf or 0.0)
        self.last_s = None if last is None else float(last)
