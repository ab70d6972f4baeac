"""Window results as sink record values: the operator's ``output`` function, then
its output serde. The worker and the TestDriver both use this, so a result that
cannot be serialized fails the same way in both: into the dead letters."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from streamremat.core.aggregators import (
    Aggregator,
    Composite,
    Count,
    DistinctCount,
    Max,
    Mean,
    Min,
    Sum,
)
from streamremat.core.exceptions import reason_of
from streamremat.core.operator import Operator, default_output
from streamremat.core.records import FailedResult, WindowResult
from streamremat.core.serdes import JSON

__all__ = ["default_json_option", "output_key", "serialize_results"]


def output_key(operator: Operator, key: bytes) -> Any:
    """The key as ``output`` (and a TestDriver emission) sees it: decoded with the
    operator's key serde; a key the serde cannot decode (e.g. a plain-text record
    key such as ``b"user-0096"`` under the default JSON serde) as text: UTF-8,
    with undecodable bytes as backslash escapes."""
    try:
        return operator.key_serde.loads(key)
    except Exception:
        return key.decode("utf-8", "backslashreplace")


#: built-in aggregators whose result is a number, a string or None, never a container
_SCALAR_RESULT = (Count, Sum, Min, Max, Mean, DistinctCount)


def _default_json_option(agg: Aggregator) -> int | None:
    """The orjson option that encodes ``{"end_ms", "start_ms", "value"}`` (built in
    that order) to the same bytes as ``JSON.dumps`` of the default output, cheaper
    (sorting and non-str keys cost about 0.6 us a result); None: only JSON.dumps is."""
    if type(agg) in _SCALAR_RESULT:
        return 0
    if (type(agg) is Composite and all(type(n) is str for n in agg.names)
            and all(type(p) in _SCALAR_RESULT for p in agg.parts)):
        return 0 if list(agg.names) == sorted(agg.names) else orjson.OPT_SORT_KEYS
    return None


def default_json_option(operator: Operator) -> int | None:
    """The orjson option that gives this operator's sink values (the default
    output, built in key order, JSON) the bytes ``JSON.dumps`` does, cheaper;
    None when only its ``output`` and serde can."""
    if operator.output is default_output and operator.output_serde is JSON:
        return _default_json_option(operator.aggregator)
    return None


def serialize_results(
    operator: Operator, results: Sequence[WindowResult], failed: list[FailedResult]
) -> list[tuple[WindowResult, bytes]]:
    """Each result with its sink value. A result whose ``output`` function or output
    serde raises (e.g. orjson's "Integer exceeds 64-bit range" for a sum past
    2**63) goes to ``failed`` with stage ``output`` instead.

    The whole batch is tried at once; only a batch where one result raised is
    redone result by result, so the common path stays one comprehension."""
    dumps, fmt = operator.output_serde.dumps, operator.output
    if not results:
        return []
    option = default_json_option(operator)
    try:
        if option is not None:
            fast = orjson.dumps
            return [
                (r, fast({"end_ms": r.end_ms, "start_ms": r.start_ms, "value": r.value},
                         option=option))
                for r in results
            ]
        if fmt is default_output:  # ignores the key: don't decode it for nothing
            return [(r, dumps(fmt(None, r.start_ms, r.end_ms, r.value))) for r in results]
        return [
            (r, dumps(fmt(output_key(operator, r.key), r.start_ms, r.end_ms, r.value)))
            for r in results
        ]
    except Exception:
        pass
    out: list[tuple[WindowResult, bytes]] = []
    default = fmt is default_output
    for r in results:
        try:
            key = None if default else output_key(operator, r.key)
            out.append((r, dumps(fmt(key, r.start_ms, r.end_ms, r.value))))
        except Exception as exc:
            failed.append(FailedResult(r.key, r.start_ms, r.end_ms, "output", reason_of(exc),
                                       r.value))
    return out
