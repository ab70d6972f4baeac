"""Output records of the faust integration: the worker's, plus an idempotency
header on every window result so that a sink can drop the duplicates an
at-least-once restart may write (each duplicate is byte-identical)."""

from __future__ import annotations

from collections.abc import Iterator

from streamremat.core.closing import ClosedWindows
from streamremat.core.operator import Operator
from streamremat.core.output import serialize_results
from streamremat.core.records import BatchOutput
from streamremat.runtime.outputs import OutRecord, to_records

#: ``operator/source partition/window start ms/window end ms/key as hex``
H_IDEMPOTENCY = "streamremat.idempotency"


def idempotency_key(operator: str, partition: int, start_ms: int, end_ms: int,
                    key: bytes) -> bytes:
    """The same (operator, partition, window, key) always gives the same bytes."""
    return b"%s/%d/%d/%d/%s" % (operator.encode(), partition, start_ms, end_ms,
                                key.hex().encode())


def result_records(op: Operator, partition: int, out: BatchOutput) -> list[OutRecord]:
    """``to_records`` with the idempotency header on each result; results come
    first there, in order (no forwards: the integration runs no repartition stage).
    A result that can't be serialized is not among them (it joins ``out.failed``):
    each header is paired with the result its record was serialized from."""
    serialized = serialize_results(op, out.results, out.failed) if out.results else []
    records = to_records(op, partition, out, serialized=serialized)
    name = op.name
    for (r, _), rec in zip(serialized, records, strict=False):
        rec.headers.append((H_IDEMPOTENCY, idempotency_key(name, partition, r.start_ms,
                                                            r.end_ms, r.key)))
    return records


def output_slices(out: BatchOutput) -> Iterator[BatchOutput]:
    """``out`` in pieces to build and send one after the other: a closing's results
    a slice at a time (``ClosedWindows.next_slice``: at most ``RESULT_SLICE`` built
    per step; a step that only sorted keys gives none), then its dead letters, late
    records and failed windows (those whose ``result`` raised joined ``out.failed``
    as their slice was built). Results built already come in one piece."""
    closed = out.results
    if not isinstance(closed, ClosedWindows):
        yield out
        return
    while (piece := closed.next_slice()) is not None:
        yield BatchOutput(results=piece)
    yield BatchOutput(dead_letters=out.dead_letters, late=out.late, failed=out.failed)
