"""What a partition's recovery reports (log line, metrics, the tuner), and the
output metrics of a processed batch."""

from __future__ import annotations

import time
from dataclasses import dataclass

from streamremat.core.records import BatchOutput
from streamremat.metrics.sensor import Sensor


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


def count_outputs(sensor: Sensor, name: str, partition: int, out: BatchOutput) -> None:
    """Results (with their end-to-end latency), dead letters (records and failed
    windows) and late records. Call it after ``to_records``, which adds the results
    that could not be serialized to ``out.failed``."""
    if out.results:
        unsent = sum(f.stage == "output" for f in out.failed) if out.failed else 0
        sensor.on_records_out(name, partition, len(out.results) - unsent)
        # End-to-end latency of a result: from its window's end (event time) to now.
        now_ms = time.time() * 1000
        sensor.on_e2e_latency(
            name, partition, [max(0.0, (now_ms - r.end_ms) / 1000) for r in out.results]
        )
    for dead in out.dead_letters:
        sensor.on_dead_letter(name, partition, dead.stage)
    for failed in out.failed:
        sensor.on_dead_letter(name, partition, failed.stage)
    if out.late:
        sensor.on_late(name, partition, len(out.late))
