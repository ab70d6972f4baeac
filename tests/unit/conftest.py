"""Fixtures shared by the unit tests."""

from __future__ import annotations

import os
import shutil

import pytest


@pytest.fixture(scope="session")
def promtool() -> str:
    """Prometheus's checker (Debian's `prometheus` package; .ci/run installs it).
    Missing in CI is a failure, never a skip."""
    path = shutil.which("promtool")
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail(
                "promtool is missing: apt-get install -y --no-install-recommends prometheus"
            )
        pytest.skip("promtool is not installed (apt-get install prometheus)")
    return path
