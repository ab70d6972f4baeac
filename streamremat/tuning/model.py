"""The cost model of DESIGN section 8, as plain functions.

Symbols: ``C`` capacity-seconds lost per checkpoint, ``L`` seconds until a
checkpoint is durable, ``D`` downtime per failure, ``sigma = mu / r`` replay
speed-up over ingest, ``lam`` failures per second, ``T`` the interval.
"""

from __future__ import annotations

import math


def expected_waste(
    t_s: float, c_s: float, l_s: float, d_s: float, sigma: float, lam: float
) -> float:
    """Fraction of capacity lost: ``C/T + lam * (D + (T/2 + L) / sigma)``."""
    return c_s / t_s + lam * (d_s + (t_s / 2 + l_s) / sigma)


def optimal_interval(c_s: float, sigma: float, lam: float) -> float:
    """``T* = sqrt(2 * sigma * C / lam)``: Young's rule stretched by ``sqrt(sigma)``."""
    if lam <= 0 or math.isinf(sigma):
        return math.inf
    return math.sqrt(2.0 * sigma * max(c_s, 0.0) / lam)


def rto_interval(rto_s: float, d_s: float, l_s: float, sigma: float) -> float:
    """Largest ``T`` with ``(sigma*D + T + L) / (sigma - 1) <= RTO``.

    ``(sigma - 1) * RTO - sigma * D - L``; negative when even ``T = 0`` misses
    the RTO (and ``-inf`` when replay is not faster than ingest).
    """
    if math.isinf(rto_s) or math.isinf(sigma):
        return math.inf
    if sigma <= 1:
        return -math.inf
    return (sigma - 1.0) * rto_s - sigma * d_s - l_s


def recovery_time(d_s: float, age_s: float, sigma: float) -> float:
    """Seconds from a failure until lag is back to ~0: ``(sigma*D + age) / (sigma - 1)``.

    ``age_s`` is how far behind the restored checkpoint is at the failure.
    """
    if math.isinf(sigma):
        return d_s
    if sigma <= 1:
        return math.inf
    return (sigma * d_s + age_s) / (sigma - 1.0)


def recovery_from_backlog(d_s: float, backlog_records: float, r: float, mu: float) -> float:
    """Seconds from a failure until lag is back to ~0, from what replay will read.

    ``backlog_records`` is what separates the restored checkpoint from the
    source's end at the failure; ``r * D`` more arrive during the downtime, and
    replay gains on the source at ``mu - r``: ``D + (backlog + r*D) / (mu - r)``.
    With ``backlog = r * age`` this is ``recovery_time(D, age, mu / r)``.
    """
    backlog = max(backlog_records, 0.0) + max(r, 0.0) * d_s
    if backlog <= 0:
        return d_s
    if mu <= r:
        return math.inf
    return d_s + backlog / (mu - r)


def min_feasible_rto(d_s: float, l_s: float, sigma: float, t_min_s: float) -> float:
    """Smallest RTO that ``rto_interval`` meets with ``T = t_min_s``:
    ``(sigma*D + L + T_min) / (sigma - 1)`` (``inf`` when ``sigma <= 1``)."""
    if math.isinf(sigma):
        return d_s
    if sigma <= 1:
        return math.inf
    return (sigma * d_s + l_s + t_min_s) / (sigma - 1.0)
