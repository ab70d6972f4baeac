"""Checks of the fault tests: the sinks and dead-letter topics against the
brute-force reference (``tests/expect.py``), committed offsets, catching up.

The engine never computes its own expectation here, so an engine bug cannot
cancel out.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Mapping, Sequence

from streamremat.runtime.kafka import ConsumedRecord, admin_client, consume_all, end_offsets
from tests.expect import (
    Expected,
    RefOperator,
    Result,
    SourceRow,
    allowed_duplicates,
    diff_report,
    expected_output,
    results_of,
)
from tests.fault.apps import TUMBLING
from tests.fault.harness import FaultEnv, WorkerProc, recovery_summary
from tests.integration.group_offsets import committed_by_partition


async def read_source(env: FaultEnv) -> list[SourceRow]:
    records = await consume_all(
        env.bootstrap, env.source, isolation_level="read_uncommitted", timeout_s=120
    )
    return [SourceRow(r.partition, r.offset, r.key, r.value, r.timestamp_ms) for r in records]


async def expected_outputs(env: FaultEnv) -> dict[str, Expected]:
    """Per operator name, what the brute-force reference says it must output."""
    rows = await read_source(env)
    return {op.name: expected_output(op, rows) for op in env.operators}


def reference_results(rows: list[SourceRow]) -> Counter[Result]:
    """What the default (tumbling Count + Sum) fault App must emit for ``rows``."""
    return expected_output(TUMBLING.reference("source"), rows).results


async def read_results(env: FaultEnv, op: RefOperator | None = None) -> Counter[Result]:
    sink = (op or env.operators[0]).sink
    records = await consume_all(env.bootstrap, sink, isolation_level="read_committed",
                                timeout_s=120)
    return results_of((r.key, r.value) for r in records)


async def read_dead_letters(env: FaultEnv, op: RefOperator | None = None) -> list[ConsumedRecord]:
    topic = (op or env.operators[0]).dead_letter_topic
    return await consume_all(env.bootstrap, topic, isolation_level="read_committed",
                             timeout_s=60)


def assert_same_results(actual: Counter[Result], expected: Counter[Result], logs: str) -> None:
    report = diff_report(actual, expected)
    if report:
        dup = {k: n for k, n in actual.items() if n > 1}
        raise AssertionError(
            f"sink differs from the reference: {len(dup)} results written more than once\n"
            f"{report}\n{logs}"
        )


async def committed_offsets(env: FaultEnv) -> dict[int, int]:
    async with admin_client(env.bootstrap) as admin:
        for _ in range(20):
            offsets = await committed_by_partition(admin, env.group, env.source)
            if offsets is not None:
                return offsets
            await asyncio.sleep(0.5)  # the offsets topic is being made, or its leader moved
    raise AssertionError(f"{env.group}'s coordinator not ready after 10 s")


async def wait_caught_up(
    env: FaultEnv, alive: Sequence[WorkerProc], timeout_s: float = 120.0
) -> float:
    """Wait until the group committed the source's end offset on every partition;
    return how long that took. Fails early if a worker in ``alive`` exits."""
    started = time.monotonic()
    ends = await end_offsets(env.bootstrap, env.source)
    while True:
        committed = await committed_offsets(env)
        if all(committed.get(p, -1) >= end for p, end in ends.items()):
            return time.monotonic() - started
        for w in alive:
            if not w.running:
                raise AssertionError(f"worker {w.name} exited while catching up\n"
                                     + env.dump_logs())
        if time.monotonic() - started > timeout_s:
            raise AssertionError(
                f"not caught up after {timeout_s} s: committed {committed}, end {ends}\n"
                + env.dump_logs()
            )
        await asyncio.sleep(0.25)


async def check_output(env: FaultEnv) -> None:
    """Every operator's sink equals the reference's results, as a multiset."""
    expected = await expected_outputs(env)
    for op in env.operators:
        results = expected[op.name].results
        assert sum(results.values()) > 100, f"{op.name}: too few results to mean anything"
        assert_same_results(await read_results(env, op), results, env.dump_logs())


async def finish(env: FaultEnv, feeding: asyncio.Task[None], *workers: WorkerProc) -> None:
    """Wait for the input and for the workers to commit all of it; SIGTERM them
    (each must exit 0)."""
    await feeding
    await wait_caught_up(env, workers)
    for w in workers:
        code, _ = await w.stop()
        assert code == 0, f"worker {w.name} exited {code}\n" + env.dump_logs()
    print(recovery_summary(env.recoveries()))


async def replay_range(env: FaultEnv) -> dict[int, tuple[int, int]]:
    """Right after an unclean stop: per partition, [committed, end) of the source,
    the offsets whose results an at-least-once worker may write again."""
    committed = await committed_offsets(env)
    ends = await end_offsets(env.bootstrap, env.source)
    return {p: (committed.get(p, 0), end) for p, end in ends.items()}


async def check_at_least_once(
    env: FaultEnv, replay_ranges: Sequence[Mapping[int, tuple[int, int]]]
) -> dict[str, int]:
    """Every reference result is in the sink; nothing else is; a result is there
    more than once only if it was closed by a record that an unclean stop made
    the worker read again (each copy is then identical, being the same result).
    Returns the number of extra copies per operator."""
    expected = await expected_outputs(env)
    extra: dict[str, int] = {}
    for op in env.operators:
        want = expected[op.name]
        assert sum(want.results.values()) > 100, f"{op.name}: too few results to mean anything"
        got = await read_results(env, op)
        # Each expected result at least as often as expected (two partitions may emit
        # the same key, window and value), and nothing else.
        missing = want.results - got
        unexpected = sorted(r for r in got if r not in want.results)
        assert not missing and not unexpected, (
            f"{op.name}: {sum(missing.values())} results missing, e.g. "
            f"{sorted(missing)[:5]}; {len(unexpected)} unexpected, e.g. {unexpected[:5]}\n"
            + env.dump_logs()
        )
        allowed = allowed_duplicates(want, replay_ranges)
        beyond = {r: n for r, n in got.items() if n - want.results[r] > allowed[r]}
        assert not beyond, (
            f"{op.name}: {len(beyond)} results duplicated beyond what the unclean stops "
            f"allow (ranges {replay_ranges}), e.g. {sorted(beyond.items())[:5]}\n"
            + env.dump_logs()
        )
        extra[op.name] = sum(got.values()) - sum(want.results.values())
    return extra
