"""What a partition's recovery reports (log line, metrics, the tuner), and the
output metrics of a processed batch."""

from __future__ import annotations

import logging
import time
from bisect import bisect_left
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from operator import attrgetter

from aiokafka import TopicPartition

from streamremat.core.closing import FixedSlice
from streamremat.core.records import BatchOutput, WindowResult
from streamremat.metrics.sensor import E2E_LATENCY_BUCKETS_S, LatencyBatch, Sensor

log = logging.getLogger("streamremat.worker")


@dataclass
class RecoveryReport:
    """What a recovery did, for the log line, the metrics and the tuner."""

    checkpoint_offset: int | None
    committed_offset: int
    start_offset: int
    source: str | None
    unclean: bool
    restore_s: float
    notes: tuple[str, ...] = ()
    replayed: int = 0
    replay_s: float = 0.0


def report_recovered(sensor: Sensor, names: Sequence[str], tp: TopicPartition,
                     report: RecoveryReport, committed_known: bool, downtime_s: float) -> None:
    """The metrics and the log line of a finished recovery (now live).
    ``committed_known``: the group had a committed offset for the partition."""
    for name in names:
        sensor.on_replay_progress(name, tp.partition, report.replayed, report.replayed)
        sensor.on_replay(name, tp.partition, report.replayed, report.replay_s)
    rate = report.replayed / report.replay_s if report.replay_s > 0 else 0.0
    # A group that never committed has no committed offset: say where it starts.
    committed = (
        f"committed offset {report.committed_offset}" if committed_known
        else f"committed offset none (new group, from offset {report.start_offset})"
        if report.checkpoint_offset is None
        else f"committed offset none (from checkpoint offset {report.start_offset})"
    )
    log.info(
        "%s[%d]: recovered: checkpoint offset %s, %s, replayed %d records "
        "in %.3f s (%.0f records/s), restore %.3f s from %s%s, downtime %.1f s",
        tp.topic, tp.partition, report.checkpoint_offset, committed,
        report.replayed, report.replay_s, rate, report.restore_s, report.source or "nothing",
        " after an unclean stop" if report.unclean else "", downtime_s,
        extra={
            "event": "recovery", "topic": tp.topic, "partition": tp.partition,
            "checkpoint_offset": report.checkpoint_offset,
            "committed_offset": report.committed_offset, "replayed": report.replayed,
            "replay_s": report.replay_s, "restore_s": report.restore_s,
            "source": report.source, "unclean": report.unclean, "downtime_s": downtime_s,
        },
    )


def report_replay_progress(sensor: Sensor, names: Sequence[str], tp: TopicPartition,
                           done: int, total: int, elapsed_s: float) -> None:
    """A replay's progress: ``done`` of ``total`` offsets in ``elapsed_s``."""
    rate = done / elapsed_s if elapsed_s > 0 else 0.0
    eta = (total - done) / rate if rate > 0 else float("inf")
    for name in names:
        sensor.on_replay_progress(name, tp.partition, done, total)
    log.info(
        "%s[%d]: replay %d/%d offsets, %.0f records/s, ETA %.1f s",
        tp.topic, tp.partition, done, total, rate, eta,
    )


def result_latencies(results: Iterable[WindowResult], now_s: float) -> LatencyBatch:
    """End-to-end latency of each result, from its window's end (event time) to
    ``now_s``, binned. A batch's results share a few window ends: they are counted
    per end in C and each end is binned once (100k results cost ~5 ms less)."""
    bounds = E2E_LATENCY_BUCKETS_S
    counts = [0] * (len(bounds) + 1)
    total = 0.0
    now_ms = now_s * 1000
    # a slice of one closed window, encoded natively: its results never built
    by_end = (results.end_counts() if type(results) is FixedSlice
              else Counter(map(_end_ms, results)))
    for end_ms, n in by_end.items():
        seconds = max(0.0, (now_ms - end_ms) / 1000)
        counts[bisect_left(bounds, seconds)] += n
        total += seconds * n
    return LatencyBatch(tuple(counts), total, bounds)


_end_ms = attrgetter("end_ms")


def count_outputs(sensor: Sensor, name: str, partition: int, out: BatchOutput) -> None:
    """Results (with their end-to-end latency), dead letters (records and failed
    windows) and late records. Call it after ``to_records``, which adds the results
    that could not be serialized to ``out.failed``."""
    if out.results:
        unsent = sum(f.stage == "output" for f in out.failed) if out.failed else 0
        sensor.on_records_out(name, partition, len(out.results) - unsent)
        sensor.on_e2e_latency(name, partition, result_latencies(out.results, time.time()))
    for dead in out.dead_letters:
        sensor.on_dead_letter(name, partition, dead.stage)
    for failed in out.failed:
        sensor.on_dead_letter(name, partition, failed.stage)
    if out.late:
        sensor.on_late(name, partition, len(out.late))
