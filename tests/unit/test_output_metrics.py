"""The output metrics of a batch: results binned per window end give the same
end-to-end latency histogram as binning each result's latency on its own."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamremat.core.records import BatchOutput, WindowResult
from streamremat.metrics.sensor import LatencyBatch, Sensor
from streamremat.runtime.recovery_report import count_outputs, result_latencies

NOW_S = 1_700_000_000.0

ends = st.lists(
    # window ends around now: in the past (seconds to hours), exactly now, in the future
    st.integers(int(NOW_S * 1000) - 10_000_000, int(NOW_S * 1000) + 5_000), max_size=300)


def results_at(end_ms: list[int]) -> list[WindowResult]:
    return [WindowResult(b"k%d" % i, e - 60_000, e, i) for i, e in enumerate(end_ms)]


@given(ends, st.integers(1, 5))
def test_binned_per_window_end_equals_binned_one_by_one(end_ms: list[int], repeat: int) -> None:
    results = results_at(sorted(end_ms * repeat))
    one_by_one = LatencyBatch.of(max(0.0, (NOW_S * 1000 - r.end_ms) / 1000) for r in results)
    binned = result_latencies(results, NOW_S)
    assert binned.counts == one_by_one.counts
    assert binned.count == len(results)
    assert binned.sum_s == pytest.approx(one_by_one.sum_s, rel=1e-9, abs=1e-9)


class Recorder(Sensor):
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def on_records_out(self, operator: str, partition: int, n: int) -> None:
        self.calls.append(("out", n))

    def on_e2e_latency(self, operator: str, partition: int, latencies: Any) -> None:
        self.calls.append(("latency", latencies))


def test_count_outputs_reports_every_result_once() -> None:
    sensor = Recorder()
    out = BatchOutput()
    out.results = results_at([60_000] * 7 + [120_000] * 3)
    count_outputs(sensor, "op", 0, out)
    (kind, n), (kind2, latencies) = sensor.calls
    assert (kind, n, kind2) == ("out", 10, "latency")
    assert isinstance(latencies, LatencyBatch) and latencies.count == 10
