"""Operators (keyed, windowed aggregations from a source to a sink topic) and the App."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from streamremat.core.aggregators import Aggregator, as_aggregator
from streamremat.core.exceptions import ConfigError
from streamremat.core.serdes import JSON, Serde
from streamremat.core.windows import Window

_TOPIC = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,100}$")

#: The values of ``Operator.rematerialize`` (``tuning.remat.Rematerialize``).
REMATERIALIZE = ("auto", "store", "recompute")


@dataclass(frozen=True, slots=True)
class Step:
    """A stateless step before the window: ``filter`` keeps values where fn is true,
    ``map`` replaces the value with fn(value)."""

    kind: str
    fn: Callable[[Any], Any]


def default_output(key: Any, start_ms: int, end_ms: int, value: Any) -> Any:
    """The sink record value unless an operator says otherwise."""
    return {"start_ms": start_ms, "end_ms": end_ms, "value": value}


@dataclass(frozen=True)
class Operator:
    """A keyed, windowed aggregation from ``source`` to ``sink``.

    * ``key_by``: picks the key from the (mapped) value; default: the record's key
      bytes, used as they are (no decoding).
    * ``timestamp_by``: a field name or callable giving event time in ms from the
      value; default: the Kafka record timestamp.
    * ``aggregate``: an aggregator, a dict of them, or an object with the protocol.
    * ``value_fields``: optionally, the fields every value has; aggregation field
      names are then checked against it at definition time.
    * ``late_topic``: where late records go (none by default: they are counted).
    * ``dead_letter``: the dead-letter topic (default ``<source>.<name>.dlq``).
    * ``output``: ``(key, start_ms, end_ms, value) -> sink value`` (then
      ``output_serde``); the key is decoded with ``key_serde``, or is text when it
      can't be (``streamremat.core.output.output_key``). A result it or the serde
      fails on goes to the dead letters (stage ``output``).

    Re-keying: with ``key_by`` the operator runs in two stages (see
    ``core/topology.py``): a stateless one writes each record, keyed by the new key,
    to the internal topic ``streamremat-<app>-<name>-repartition``
    (``repartition_partitions`` partitions, default: the source's count), and the
    windowed one reads that topic, so one task owns each new key.
    ``co_partitioned=True`` declares that the source is already partitioned by the
    ``key_by`` key and skips that topic; if it is not, a key's records are folded on
    several partitions and each emits its own partial result per window.

    Chaining: an operator whose ``source`` is another operator's ``sink`` in the
    same App reads that operator's results (``source=upstream.sink``).

    ``rematerialize``: what a checkpoint does with each group of open windows
    (DESIGN §9, ``docs/rematerialization.md``): ``"auto"`` (default) lets the
    planner choose per group, at each checkpoint, between storing its
    accumulators and recomputing it by replay after a failure; ``"store"``
    always stores (the behaviour before plans); ``"recompute"`` recomputes every
    group it safely can (a group whose first offset is unknown or outside
    retention is still stored).
    """

    name: str
    source: str
    sink: str
    window: Window
    aggregate: Any
    key_by: Callable[[Any], Any] | None = None
    timestamp_by: str | Callable[[Any], Any] | None = None
    steps: tuple[Step, ...] = ()
    key_serde: Serde = JSON
    value_serde: Serde = JSON
    output_serde: Serde = JSON
    output: Callable[[Any, int, int, Any], Any] = default_output
    late_topic: str | None = None
    value_fields: Sequence[str] | None = None
    co_partitioned: bool = False
    repartition_partitions: int | None = None
    dead_letter: str | None = None
    rematerialize: str = "auto"
    aggregator: Aggregator = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ConfigError(
                f"operator name {self.name!r} must be 1-100 letters, digits, '_' or '-'"
            )
        for what, topic in (("source", self.source), ("sink", self.sink)):
            if not isinstance(topic, str) or not _TOPIC.match(topic):
                raise ConfigError(f"operator {self.name!r}: {what} topic {topic!r} is not valid")
        for what, optional in (("late_topic", self.late_topic),
                               ("dead_letter", self.dead_letter)):
            if optional is not None and not _TOPIC.match(optional):
                raise ConfigError(f"operator {self.name!r}: {what} {optional!r} is not valid")
        if self.repartition_partitions is not None and self.repartition_partitions < 1:
            raise ConfigError(
                f"operator {self.name!r}: repartition_partitions must be >= 1 "
                f"(or None: the source's count), got {self.repartition_partitions!r}"
            )
        if self.source == self.sink:
            raise ConfigError(f"operator {self.name!r}: source and sink must differ")
        if not isinstance(self.window, Window):
            raise ConfigError(
                f"operator {self.name!r}: window must be Tumbling, Hopping, Sliding or Session, "
                f"got {self.window!r}"
            )
        if self.rematerialize not in REMATERIALIZE:
            raise ConfigError(
                f"operator {self.name!r}: rematerialize={self.rematerialize!r} is not one of "
                f"{', '.join(map(repr, REMATERIALIZE))}"
            )
        agg = as_aggregator(self.aggregate)
        if self.value_fields is not None:
            _check_fields(self.name, agg, self.timestamp_by, set(self.value_fields))
        if isinstance(self.timestamp_by, str) and not self.timestamp_by:
            raise ConfigError(f"operator {self.name!r}: timestamp_by field must not be empty")
        object.__setattr__(self, "aggregator", agg)

    def filter(self, fn: Callable[[Any], Any]) -> Operator:
        """A copy that keeps only the values for which ``fn`` is true."""
        return dataclasses.replace(self, steps=(*self.steps, Step("filter", fn)))

    def map(self, fn: Callable[[Any], Any]) -> Operator:
        """A copy whose values are replaced by ``fn(value)`` before windowing."""
        return dataclasses.replace(self, steps=(*self.steps, Step("map", fn)))

    @property
    def dead_letter_topic(self) -> str:
        return self.dead_letter or f"{self.source}.{self.name}.dlq"

    @property
    def repartitions(self) -> bool:
        """True if the operator re-keys records (``key_by``) onto a source that is not
        declared ``co_partitioned``: then it needs a repartition topic."""
        return self.key_by is not None and not self.co_partitioned


def _check_fields(name: str, agg: Aggregator, timestamp_by: Any, fields: set[str]) -> None:
    used = list(agg.field_names)
    if isinstance(timestamp_by, str):
        used.append(timestamp_by)
    unknown = [f for f in used if f not in fields]
    if unknown:
        raise ConfigError(
            f"operator {name!r} uses unknown value field(s) {', '.join(map(repr, unknown))}; "
            f"the values have {sorted(fields)}"
        )


@dataclass(frozen=True)
class KafkaSettings:
    """Where the App's topics live. Runtime knobs (commit interval, checkpoint policy)
    are worker settings, not App settings."""

    bootstrap_servers: str = "127.0.0.1:9092"
    group_id: str | None = None
    checkpoint_topic: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)


class App:
    """A named set of operators plus Kafka settings: what ``streamremat worker`` runs."""

    def __init__(
        self,
        name: str,
        operators: Iterable[Operator] = (),
        *,
        kafka: KafkaSettings | None = None,
    ) -> None:
        if not isinstance(name, str) or not _NAME.match(name):
            raise ConfigError(f"app name {name!r} must be 1-100 letters, digits, '_' or '-'")
        self.name = name
        self.kafka = kafka or KafkaSettings()
        self.operators: dict[str, Operator] = {}
        for op in operators:
            self.add(op)

    def add(self, operator: Operator) -> Operator:
        if operator.name in self.operators:
            raise ConfigError(f"app {self.name!r} already has an operator {operator.name!r}")
        self.operators[operator.name] = operator
        return operator

    @property
    def group_id(self) -> str:
        return self.kafka.group_id or f"streamremat-{self.name}"

    @property
    def checkpoint_topic(self) -> str:
        return self.kafka.checkpoint_topic or f"streamremat-{self.name}-checkpoints"

    def source_topics(self) -> list[str]:
        return sorted({op.source for op in self.operators.values()})
