"""The stateless stage of a re-keyed operator: from its source to the repartition topic.

It runs the operator's per-record front half (decode, filter/map steps, ``key_by``,
timestamp) and forwards each record keyed by the new key, with the event time as
its timestamp, so that the windowed stage reading the repartition topic sees one
partition per key. It keeps no state: its position is the committed offset, so it
never replays (its outputs below that offset are committed already).
"""

from __future__ import annotations

from collections.abc import Sequence

from streamremat.core.operator import Operator
from streamremat.core.records import BatchOutput, DeadLetter, Forward, SourceRecord
from streamremat.core.serdes import JSON, Serde
from streamremat.core.task import extract


def _identity(value: object) -> object:
    return value


class Repartitioner:
    """One source partition of a repartition stage; the same ``process`` shape as a Task."""

    def __init__(self, operator: Operator, target: str, partition: int = 0) -> None:
        self.operator = operator
        self.target = target
        self.partition = partition
        self.name = f"{operator.name}.repartition"
        #: the next source offset to read (set by the runtime from the committed offset)
        self.next_offset: int | None = None
        # Without a map step the value is unchanged: forward the source bytes as they are.
        self._reencode = any(step.kind == "map" for step in operator.steps)
        self._dumps = repartition_value_serde(operator).dumps

    @property
    def stream_time_ms(self) -> int | None:
        return None  # stateless: nothing to resume, no replay horizon

    def process(
        self, records: Sequence[SourceRecord], emit: bool = True, horizon_ms: int | None = None
    ) -> BatchOutput:
        """Forward a batch keyed by the new key; with ``emit=False`` (offsets whose
        forwards were committed before) only the position moves."""
        out = BatchOutput()
        if not records:
            return out
        self.next_offset = records[-1].offset + 1
        if not emit:
            return out
        dead = out.dead_letters
        srcs, keys, times, values = extract(self.operator, records, dead, True, _identity)
        forwards = out.forwards
        if not self._reencode:
            for src, key, t in zip(srcs, keys, times, strict=True):
                forwards.append(Forward(src, key, src.value or b"", t))
            return out
        dumps = self._dumps
        for src, key, t, value in zip(srcs, keys, times, values, strict=True):
            try:
                encoded = dumps(value)
            except Exception as exc:
                reason = f"mapped value not encodable: {type(exc).__name__}: {exc}"
                dead.append(DeadLetter(src, "repartition", reason))
                continue
            forwards.append(Forward(src, key, encoded, t))
        return out


def repartition_value_serde(operator: Operator) -> Serde:
    """How values travel through the repartition topic: as the source bytes when no
    step maps them, else as JSON of the mapped value."""
    if any(step.kind == "map" for step in operator.steps):
        return JSON
    return operator.value_serde
