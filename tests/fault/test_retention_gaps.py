"""A live partition's next records are deleted while its worker is frozen (real broker).

The worker (a real subprocess) has committed everything; it is frozen with
SIGSTOP for a second or more, well inside its session timeout so it keeps the
partition; meanwhile more records arrive and admin DeleteRecords moves the log
start past its position. When it resumes, its next fetch is below the log start.

* ``--on-retention-gap=fail`` (the default): exit 2, an error naming the topic,
  partition, the offset it needed and the log start; nothing committed past the
  gap, and the sink holds exactly the reference's results up to the committed offset.
* ``reset``: a log line naming the skipped range, the Prometheus counter of skipped
  offsets, and a sink equal to the reference over the records without that range.
"""

from __future__ import annotations

import asyncio
import re
import signal
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from streamremat.dev.ports import free_port_run
from streamremat.runtime.kafka import produce
from tests.fault.harness import FaultEnv, WorkerProc
from tests.integration.gaps_support import (
    committed,
    delete_records,
    make_records,
    read_sink,
    reference_emissions,
)

pytestmark = [pytest.mark.fault, pytest.mark.timeout(180)]

#: before the freeze / while frozen, two steps / the log start DeleteRecords sets
FIRST, DURING_A, DURING_B, DELETE_BEFORE = 2_000, 500, 1_500, 3_000
TOTAL = FIRST + DURING_A + DURING_B
#: The worker's session timeout: the freeze (two produces and a DeleteRecords, each
#: with a client of its own) took 1 s at low load, more on a loaded 2-core machine,
#: and must stay inside it, or the frozen worker loses its partition.
SESSION_TIMEOUT_S = 12


async def _wait_committed(env: FaultEnv, w: WorkerProc, target: int, timeout_s: float = 60
                          ) -> None:
    deadline = time.monotonic() + timeout_s
    while (await committed(env.bootstrap, env.group, env.source) or 0) < target:
        assert w.running, f"worker exited ({w.proc and w.proc.returncode})\n" + env.dump_logs()
        assert time.monotonic() < deadline, f"committed < {target}\n" + env.dump_logs()
        await asyncio.sleep(0.2)


async def _wait_exit(w: WorkerProc, timeout_s: float) -> int:
    assert w.proc is not None
    deadline = time.monotonic() + timeout_s
    while w.proc.poll() is None:
        assert time.monotonic() < deadline, (
            f"worker still runs {timeout_s} s after the gap\n" + w.env.dump_logs())
        await asyncio.sleep(0.1)
    return w.proc.returncode


def _scrape(port: int, name: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if line.startswith(name + "{")]
    assert values, f"{name} not exported"
    return sum(values)


@pytest.mark.parametrize("policy", ["fail", "reset"])
async def test_records_deleted_below_a_frozen_live_worker(
    kafka_bootstrap: str, new_topic: Callable[..., str], tmp_path: Path, policy: str
) -> None:
    source = new_topic(partitions=1, config={"retention.ms": "-1"})
    env = FaultEnv(kafka_bootstrap, source, 1, f"gap-{uuid.uuid4().hex[:10]}", tmp_path)
    records = make_records(TOTAL, int(time.time() * 1000) - 10 * 60_000, seed=11)
    port = free_port_run(1)
    w = env.worker("a", "--on-retention-gap", policy, "--metrics-port", str(port),
                   "--session-timeout-ms", str(SESSION_TIMEOUT_S * 1000))
    try:
        await produce(kafka_bootstrap, source, records[:FIRST])
        w.start()
        await _wait_committed(env, w, FIRST)

        frozen_at = time.monotonic()
        w.signal(signal.SIGSTOP)
        # A fetch it had in flight can still bring it the first step, never the second.
        await produce(kafka_bootstrap, source, records[FIRST:FIRST + DURING_A])
        await asyncio.sleep(0.3)
        await produce(kafka_bootstrap, source, records[FIRST + DURING_A:])
        await delete_records(kafka_bootstrap, source, DELETE_BEFORE)
        frozen_s = time.monotonic() - frozen_at
        w.signal(signal.SIGCONT)
        assert frozen_s < SESSION_TIMEOUT_S - 3, (
            f"frozen {frozen_s:.1f} s: too close to the session timeout")

        if policy == "fail":
            assert await _wait_exit(w, 30) == 2, env.dump_logs()
            m = re.search(rf"{re.escape(source)}\[0\]: the next offset to read \(live\) (\d+) "
                          rf"is below the log start offset {DELETE_BEFORE}", w.log_text())
            assert m, env.dump_logs()
            needed = int(m[1])
            assert FIRST <= needed <= FIRST + DURING_A
            done = await committed(kafka_bootstrap, env.group, source)
            assert done is not None and FIRST <= done <= needed  # nothing past the gap
            expected = Counter(reference_emissions(records[:done]))
        else:
            await _wait_committed(env, w, TOTAL)
            m = re.search(rf"{re.escape(source)}\[0\]: retention gap: skipping offsets "
                          rf"\[(\d+), {DELETE_BEFORE}\) \((\d+) records\)", w.log_text())
            assert m, env.dump_logs()
            needed = int(m[1])
            assert FIRST <= needed <= FIRST + DURING_A
            assert int(m[2]) == DELETE_BEFORE - needed
            skipped = _scrape(port, "streamremat_retention_gap_offsets_total")
            assert skipped == DELETE_BEFORE - needed
            code, _ = await w.stop()
            assert code == 0, env.dump_logs()
            expected = Counter(reference_emissions(records[:needed] + records[DELETE_BEFORE:]))
        got = await read_sink(kafka_bootstrap, env.sink)
        assert sum(expected.values()) > 50
        assert got == expected, env.dump_logs()
    finally:
        await env.cleanup()
        print(env.dump_logs())
