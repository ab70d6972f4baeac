"""Replication of the topics the worker creates: min(3, brokers), min.insync min(2, RF)."""

from __future__ import annotations

import pytest

from streamremat.runtime.kafka import Replication


@pytest.mark.parametrize(("brokers", "expected"), [(1, (1, 1)), (2, (2, 2)), (3, (3, 2)),
                                                   (7, (3, 2))])
def test_defaults_follow_the_cluster_size(brokers: int, expected: tuple[int, int]) -> None:
    assert Replication().resolve(brokers) == expected


def test_configured_values_and_a_spec_of_its_own_win() -> None:
    assert Replication(factor=5, min_insync=3).resolve(7) == (5, 3)
    assert Replication(min_insync=1).resolve(3) == (3, 1)
    assert Replication().resolve(3, asked=1) == (1, 1)


def test_impossible_settings_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="--min-insync-replicas 3 is above --replication-factor 2"):
        Replication(factor=2, min_insync=3)
    with pytest.raises(ValueError, match="--replication-factor must be >= 1"):
        Replication(factor=0)
