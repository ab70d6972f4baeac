"""WorkerSettings refuses bad repartition retention values when it is built."""

from __future__ import annotations

import pytest

from streamremat.core.exceptions import ConfigError
from streamremat.runtime.settings import WorkerSettings


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"repartition_retention_margin": 0.5}, "--repartition-retention-margin must be >= 1"),
    ({"repartition_retention_s": 0.2}, "--repartition-retention must be >= 1 s"),
])
def test_bad_repartition_retention_is_refused(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        WorkerSettings(**kwargs)  # type: ignore[arg-type]


def test_unlimited_and_default_repartition_retention_are_accepted() -> None:
    assert WorkerSettings(repartition_retention_s=-1).repartition_retention_ms == -1
    assert WorkerSettings().repartition_retention_ms > 0
