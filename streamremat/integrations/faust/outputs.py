"""Output records of the faust integration: the worker's, plus an idempotency
header on every window result so that a sink can drop the duplicates an
at-least-once restart may write (each duplicate is byte-identical)."""

from __future__ import annotations

from streamremat.core.operator import Operator
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
    first there, in order (no forwards: the integration runs no repartition stage)."""
    records = to_records(op, partition, out)
    name = op.name
    for i, r in enumerate(out.results):
        rec = records[i]
        rec.headers.append((H_IDEMPOTENCY, idempotency_key(name, partition, r.start_ms,
                                                            r.end_ms, r.key)))
    return records
