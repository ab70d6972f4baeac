"""The cost-model formulas against hand-computed values."""

from __future__ import annotations

import math

import pytest

from streamremat.tuning.model import expected_waste, optimal_interval, recovery_time, rto_interval


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
