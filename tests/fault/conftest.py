"""Fixtures of the fault tests: a fresh 4-partition source and names per test."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from tests.fault.harness import FaultEnv, recovery_summary

PARTITIONS = 4


@pytest.fixture
async def fault_env(
    kafka_bootstrap: str, new_topic: Callable[..., str], tmp_path: Path
) -> AsyncIterator[FaultEnv]:
    source = new_topic(partitions=PARTITIONS, config={"retention.ms": "-1"})
    env = FaultEnv(
        bootstrap=kafka_bootstrap,
        source=source,
        partitions=PARTITIONS,
        app_name=f"fault-{uuid.uuid4().hex[:10]}",
        workdir=tmp_path,
    )
    try:
        yield env
    finally:
        await env.cleanup()
        # Shown by pytest only when the test failed.
        print(recovery_summary(env.recoveries()))
        print(env.dump_logs())
