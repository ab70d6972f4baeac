"""Built-in aggregations and the base class for custom ones (see ``Aggregator``)."""

from streamremat.core.aggregators import (
    Aggregator,
    ApproxDistinct,
    Collect,
    Count,
    DistinctCount,
    Max,
    Mean,
    Min,
    Sum,
    TopK,
)

__all__ = [
    "Aggregator",
    "ApproxDistinct",
    "Collect",
    "Count",
    "DistinctCount",
    "Max",
    "Mean",
    "Min",
    "Sum",
    "TopK",
]
