"""streamremat: stateful stream processing on Kafka with compact checkpoints and replay.

The public API is what ``__all__`` lists; everything else is internal.
"""

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
from streamremat.core.exceptions import BadRecord, ConfigError, StreamrematError
from streamremat.core.operator import App, KafkaSettings, Operator
from streamremat.core.quantiles import Median, Quantiles
from streamremat.core.serdes import JSON, RAW, STRING, JsonSerde, RawSerde, Serde, StringSerde
from streamremat.core.sketches import ApproxDistinct, ApproxQuantiles
from streamremat.core.windows import Hopping, Session, Sliding, Tumbling

__version__ = "0.1.0"

__all__ = [
    "JSON",
    "RAW",
    "STRING",
    "Aggregator",
    "App",
    "ApproxDistinct",
    "ApproxQuantiles",
    "BadRecord",
    "Collect",
    "ConfigError",
    "Count",
    "DistinctCount",
    "Hopping",
    "JsonSerde",
    "KafkaSettings",
    "Max",
    "Mean",
    "Median",
    "Min",
    "Operator",
    "Quantiles",
    "RawSerde",
    "Serde",
    "Session",
    "Sliding",
    "StreamrematError",
    "StringSerde",
    "Sum",
    "TopK",
    "Tumbling",
    "__version__",
]
