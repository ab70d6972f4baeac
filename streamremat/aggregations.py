"""Built-in aggregations and the base class for custom ones (see ``Aggregator``)."""

from streamremat.core.aggregators import (
    Aggregator,
    Collect,
    Count,
    DistinctCount,
    Max,
    Mean,
    Min,
    Sum,
    TopK,
)
from streamremat.core.quantiles import Median, Quantiles
from streamremat.core.sketches import ApproxDistinct, ApproxQuantiles

__all__ = [
    "Aggregator",
    "ApproxDistinct",
    "ApproxQuantiles",
    "Collect",
    "Count",
    "DistinctCount",
    "Max",
    "Mean",
    "Median",
    "Min",
    "Quantiles",
    "Sum",
    "TopK",
]
