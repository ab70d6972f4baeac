"""What an operator must output for records read back from Kafka, computed with the
brute-force reference (``tests/unit/reference.py``), never with the engine.

A test describes its operator twice: once for the engine (``streamremat.Operator``)
and once here (``RefOperator``: a reference window, the value fields the
aggregation needs, and the window result as a plain function of the JSON values
added to the window). The input classification (which records are dead letters,
and at which stage) is written from the README's promise, independently of the
engine: a record without a key, with a value that is not JSON, or without a field
the aggregation reads is a dead letter.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tests.unit.reference import RefRecord, RefWindow, run_reference

#: A result as compared: (key bytes, start_ms, end_ms, canonical JSON of the value).
Result = tuple[bytes, int, int, str]


@dataclass(frozen=True)
class SourceRow:
    """One source record as read from Kafka."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int


def rows_as_produced(records: Iterable[Any]) -> list[SourceRow]:
    """``SourceRow``s of records (``ProducerRecord``s: partition, key, value,
    timestamp_ms) produced in this order to a fresh topic: offsets count from 0
    per partition, a record without a partition goes to partition 0."""
    offsets: Counter[int] = Counter()
    rows = []
    for r in records:
        p = r.partition or 0
        assert r.timestamp_ms is not None, "the reference needs each record's timestamp"
        rows.append(SourceRow(p, offsets[p], r.key, r.value, r.timestamp_ms))
        offsets[p] += 1
    return rows


@dataclass(frozen=True)
class RefOperator:
    """The reference's view of one operator (key = the record key, event time = the
    record timestamp, values JSON objects)."""

    name: str
    source: str
    sink: str
    window: RefWindow
    #: fields every accepted value must have (else: dead letter, stage "aggregate")
    fields: tuple[str, ...]
    #: the window's value from the decoded values added to it, in arrival order
    result: Callable[[list[dict[str, Any]]], Any]

    @property
    def dead_letter_topic(self) -> str:
        return f"{self.source}.{self.name}.dlq"


@dataclass
class Expected:
    """One operator's expected output over the whole source."""

    results: Counter[Result] = field(default_factory=Counter)
    #: "topic/partition/offset" -> dead-letter stage
    dead_letters: dict[str, str] = field(default_factory=dict)
    #: "topic/partition/offset" of records late for at least one of their windows
    late: set[str] = field(default_factory=set)
    #: per result, the (partition, offset) of the source record whose arrival closed
    #: it, once per occurrence: two partitions may emit the same (key, window, value)
    closed_by: dict[Result, list[tuple[int, int]]] = field(default_factory=dict)


def canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _classify(op: RefOperator, row: SourceRow) -> tuple[str | None, Any]:
    """(dead-letter stage or None, decoded value)."""
    try:
        value = json.loads(row.value) if row.value is not None else None
    except ValueError:
        return "value", None
    if row.key is None:
        return "key", None
    if op.fields and (not isinstance(value, dict) or any(f not in value for f in op.fields)):
        return "aggregate", None
    return None, value


def expected_output(op: RefOperator, rows: Iterable[SourceRow]) -> Expected:
    """Run the reference per source partition (one task each) over ``rows``."""
    by_partition: dict[int, list[SourceRow]] = {}
    for row in rows:
        by_partition.setdefault(row.partition, []).append(row)
    out = Expected()
    for p, part in sorted(by_partition.items()):
        part.sort(key=lambda r: r.offset)
        accepted: list[SourceRow] = []
        ref_in: list[RefRecord] = []
        for row in part:
            stage, value = _classify(op, row)
            if stage is not None:
                out.dead_letters[f"{op.source}/{p}/{row.offset}"] = stage
                continue
            assert row.key is not None
            accepted.append(row)
            ref_in.append((row.key, row.timestamp_ms, value))
        ref = run_reference(op.window, ref_in, op.result)
        for (key, start, end, value), i in zip(ref.emissions, ref.closed_by, strict=True):
            result = (key, start, end, canon(value))
            out.results[result] += 1
            out.closed_by.setdefault(result, []).append((p, accepted[i].offset))
        out.late.update(f"{op.source}/{p}/{accepted[i].offset}" for i in ref.late)
    return out


def results_of(values: Iterable[tuple[bytes | None, bytes | None]]) -> Counter[Result]:
    """Sink records (key, value) as comparable results."""
    got: Counter[Result] = Counter()
    for key, raw in values:
        v = json.loads(raw or b"null")
        got[(key or b"", v["start_ms"], v["end_ms"], canon(v["value"]))] += 1
    return got


def diff_report(actual: Counter[Result], expected: Counter[Result]) -> str:
    """A short description of how two multisets of results differ ('' if equal)."""
    if actual == expected:
        return ""
    missing, extra = expected - actual, actual - expected
    return "\n".join([
        f"results differ: expected {sum(expected.values())}, got {sum(actual.values())}; "
        f"missing {sum(missing.values())}, unexpected {sum(extra.values())}",
        "missing (first 10): " + repr(sorted(missing)[:10]),
        "unexpected (first 10): " + repr(sorted(extra)[:10]),
    ])


def allowed_duplicates(
    expected: Expected, replay_ranges: Sequence[Mapping[int, tuple[int, int]]]
) -> Counter[Result]:
    """At-least-once: how many extra copies of each result a run may write.

    Each unclean stop ``i`` may re-emit what the lost worker emitted but did not
    commit: results closed by a record at an offset in ``[committed, end)`` of
    its partition, where ``committed`` is the group's offset after the stop and
    ``end`` bounds what the lost worker had read (the source end right after it).
    """
    allowed: Counter[Result] = Counter()
    for result, closers in expected.closed_by.items():
        for p, offset in closers:
            for ranges in replay_ranges:
                lo, hi = ranges.get(p, (0, 0))
                if lo <= offset < hi:
                    allowed[result] += 1
    return allowed
