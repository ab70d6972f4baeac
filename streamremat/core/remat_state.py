"""What the engine tells the rematerialization planner about an aggregation."""

from __future__ import annotations

from streamremat.core.aggregators import Aggregator, Composite, Count, Max, Mean, Min, Sum
from streamremat.core.sketches import ApproxDistinct, ApproxQuantiles

#: Built-in aggregations whose accumulator has a bounded size.
_BOUNDED = (Count, Sum, Min, Max, Mean, ApproxDistinct, ApproxQuantiles)


def grows(agg: Aggregator) -> bool:
    """Whether an accumulator may grow with the data (``Collect``, ``Quantiles``,
    ``DistinctCount``, ``TopK``, any custom aggregation). The planner then counts
    every group's encoded bytes at each checkpoint; for bounded ones it encodes a
    few accumulators per group and scales (a checkpoint of counters stays cheap)."""
    parts = agg.parts if isinstance(agg, Composite) else (agg,)
    return not all(isinstance(p, _BOUNDED) for p in parts)
