"""Fixtures of the fault tests: a fresh 4-partition source and names per test."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from tests.fault.harness import FaultEnv, recovery_summary

PARTITIONS = 4

MakeFaultEnv = Callable[..., FaultEnv]


@pytest.fixture
async def make_fault_env(
    kafka_bootstrap: str, new_topic: Callable[..., str], tmp_path: Path
) -> AsyncIterator[MakeFaultEnv]:
    """Factory: ``make_fault_env(scenario="tumbling") -> FaultEnv``, each with its own
    source, app, group and directory, so one test can run several at once."""
    envs: list[FaultEnv] = []

    def make(scenario: str = "tumbling") -> FaultEnv:
        source = new_topic(partitions=PARTITIONS, config={"retention.ms": "-1"})
        env = FaultEnv(
            bootstrap=kafka_bootstrap,
            source=source,
            partitions=PARTITIONS,
            app_name=f"fault-{uuid.uuid4().hex[:10]}",
            workdir=tmp_path / f"env{len(envs)}-{scenario}",
            scenario=scenario,
        )
        env.workdir.mkdir()
        envs.append(env)
        return env

    try:
        yield make
    finally:
        for env in envs:
            await env.cleanup()
            # Shown by pytest only when the test failed.
            print(f"== {env.scenario} ({env.source}): {recovery_summary(env.recoveries())}")
            print(env.dump_logs())


@pytest.fixture
async def fault_env(make_fault_env: MakeFaultEnv) -> FaultEnv:
    return make_fault_env()
