"""The cost-model formulas against hand-computed values."""

from __future__ import annotations

import math

import pytest

from streamremat.tuning.model import (
    expected_waste,
    min_feasible_rto,
    optimal_interval,
    recovery_from_backlog,
    recovery_time,
    rto_interval,
)


def test_optimal_interval_is_youngs_rule_stretched_by_sqrt_sigma() -> None:
    # sqrt(2 * 5 * 0.3 / (1/14400)) = sqrt(43200)
    assert optimal_interval(0.3, 5.0, 1 / 14400) == pytest.approx(207.846, abs=1e-3)
    assert optimal_interval(0.5, 1.0, 1 / 3600) == pytest.approx(60.0)
    assert optimal_interval(0.5, 1.0, 0.0) == math.inf


def test_optimal_interval_minimises_expected_waste() -> None:
    c, lat, d, sigma, lam = 0.8, 3.0, 15.0, 5.0, 1 / 1800
    t_star = optimal_interval(c, sigma, lam)
    w_star = expected_waste(t_star, c, lat, d, sigma, lam)
    for k in (0.5, 0.8, 0.95, 1.05, 1.25, 2.0):
        assert expected_waste(k * t_star, c, lat, d, sigma, lam) > w_star


def test_expected_waste_by_hand() -> None:
    # 0.5/100 + (1/3600) * (10 + (50 + 2) / 4) = 0.005 + 23/3600
    assert expected_waste(100, 0.5, 2, 10, 4, 1 / 3600) == pytest.approx(0.005 + 23 / 3600)


def test_rto_interval_by_hand() -> None:
    # (5 - 1) * 120 - 5 * 10 - 2 = 428
    assert rto_interval(120, 10, 2, 5) == pytest.approx(428.0)
    # (3 - 1) * 90 - 3 * 12 - 2 = 142
    assert rto_interval(90, 12, 2, 3) == pytest.approx(142.0)
    assert rto_interval(math.inf, 10, 2, 5) == math.inf
    assert rto_interval(120, 10, 2, 1.0) == -math.inf


def test_rto_interval_is_where_worst_case_recovery_meets_the_rto() -> None:
    rto, d, lat, sigma = 120.0, 10.0, 2.0, 5.0
    t = rto_interval(rto, d, lat, sigma)
    assert recovery_time(d, t + lat, sigma) == pytest.approx(rto)


def test_recovery_time_by_hand() -> None:
    # (5 * 10 + 100) / 4
    assert recovery_time(10, 100, 5) == pytest.approx(37.5)
    assert recovery_time(10, 100, 1.0) == math.inf
    assert recovery_time(10, 100, math.inf) == 10


def test_recovery_from_backlog_by_hand() -> None:
    # D 10 s, 60k records behind, r 1k/s: 60k + 10k to replay at 5k - 1k net: 10 + 17.5
    assert recovery_from_backlog(10, 60_000, 1_000, 5_000) == pytest.approx(27.5)
    # A stopped, idle source: nothing to replay, the downtime is all.
    assert recovery_from_backlog(10, 0, 0, 5_000) == 10
    assert recovery_from_backlog(10, 5_000, 0, 5_000) == pytest.approx(11.0)
    assert recovery_from_backlog(10, 1, 1_000, 1_000) == math.inf
    # With backlog = r * age it is the DESIGN section 8 formula.
    assert recovery_from_backlog(10, 1_000 * 100, 1_000, 5_000) == pytest.approx(
        recovery_time(10, 100, 5)
    )


def test_min_feasible_rto_meets_rto_interval_at_t_min() -> None:
    d, lat, sigma, t_min = 12.0, 2.0, 3.0, 5.0
    need = min_feasible_rto(d, lat, sigma, t_min)
    assert need == pytest.approx((3 * 12 + 2 + 5) / 2)
    assert rto_interval(need, d, lat, sigma) == pytest.approx(t_min)
    assert min_feasible_rto(d, lat, 1.0, t_min) == math.inf
