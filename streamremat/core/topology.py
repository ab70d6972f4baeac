"""An App compiled into stages: the list the worker and the TestDriver both run.

* An operator keyed by the record key (the default), or declared
  ``co_partitioned``, is one **window** stage over its source.
* A re-keyed operator (``key_by``) is two stages: a stateless **repartition**
  stage over its source, writing to ``streamremat-<app>-<operator>-repartition``
  keyed by the new key with the event time as timestamp, then the window stage
  over that topic (DESIGN §4: one task owns each new key).
* An operator whose source is another operator's sink is **chained**: its stages
  read that sink topic like any source.

Stages come in topological order (a stage's source is written only by stages
before it), so running them in order delivers every record downstream.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable
from dataclasses import dataclass

from streamremat.core.exceptions import ConfigError
from streamremat.core.operator import App, Operator
from streamremat.core.repartition import repartition_value_serde


class StageKind(enum.Enum):
    WINDOW = "window"
    REPARTITION = "repartition"


@dataclass(frozen=True)
class Stage:
    """One stage: ``name`` is unique in the App (the operator's name for the window
    stage, ``<operator>.repartition`` for its repartition stage). ``operator`` is what
    the stage runs: the user's operator, or for the window stage of a re-keyed one,
    the operator as it reads the repartition topic (key and time from the record,
    no steps, dead letters to the user operator's dead-letter topic)."""

    name: str
    kind: StageKind
    source: str
    operator: Operator
    #: repartition stage: the internal topic it writes
    target: str | None = None
    #: repartition stage: its topic's partition count (None: the source's)
    partitions: int | None = None

    @property
    def outputs(self) -> tuple[str, ...]:
        """Every topic the stage writes."""
        op = self.operator
        topics = [self.target] if self.target else [op.sink]
        topics.append(op.dead_letter_topic)
        if self.kind is StageKind.WINDOW and op.late_topic:
            topics.append(op.late_topic)
        return tuple(t for t in topics if t)


def repartition_topic(app_name: str, operator: str) -> str:
    return f"streamremat-{app_name}-{operator}-repartition"


@dataclass(frozen=True)
class Topology:
    app_name: str
    stages: tuple[Stage, ...]

    def on(self, topic: str) -> list[Stage]:
        """The stages reading ``topic``, in topological order."""
        return [s for s in self.stages if s.source == topic]

    def stage(self, name: str) -> Stage:
        return next(s for s in self.stages if s.name == name)

    @property
    def sources(self) -> list[str]:
        """Every topic some stage reads, in topological order of their first reader."""
        return list(dict.fromkeys(s.source for s in self.stages))

    @property
    def internal(self) -> set[str]:
        """Topics both written and read inside the App (repartition and chained sinks)."""
        written = {t for s in self.stages for t in s.outputs}
        return written & set(self.sources)

    @property
    def external_sources(self) -> list[str]:
        """Sources no stage writes: the App's inputs (they must exist)."""
        internal = self.internal
        return [t for t in self.sources if t not in internal]

    @property
    def repartition_topics(self) -> set[str]:
        return {s.target for s in self.stages if s.target}


def compile_app(app: App | Operator) -> Topology:
    """The stages of ``app`` (an Operator alone runs as an App of its name)."""
    if isinstance(app, Operator):
        app = App(app.name, [app])
    stages: list[Stage] = []
    for op in _ordered(app.operators.values()):
        if not op.repartitions:
            stages.append(Stage(op.name, StageKind.WINDOW, op.source, op))
            continue
        topic = repartition_topic(app.name, op.name)
        stages.append(Stage(f"{op.name}.repartition", StageKind.REPARTITION, op.source, op,
                            target=topic, partitions=op.repartition_partitions))
        windowed = dataclasses.replace(
            op, source=topic, key_by=None, timestamp_by=None, steps=(),
            value_serde=repartition_value_serde(op), co_partitioned=True,
            dead_letter=op.dead_letter_topic, repartition_partitions=None,
        )
        stages.append(Stage(op.name, StageKind.WINDOW, topic, windowed))
    return Topology(app.name, tuple(stages))


def _ordered(operators: Iterable[Operator]) -> list[Operator]:
    """Operators in dependency order (an upstream before the operators reading its
    sink); a cycle is a configuration error."""
    ops = list(operators)
    by_sink: dict[str, Operator] = {}
    for op in ops:
        other = by_sink.get(op.sink)
        if other is not None:
            raise ConfigError(
                f"operators {other.name!r} and {op.name!r} both write sink {op.sink!r}; "
                "give each its own sink"
            )
        by_sink[op.sink] = op
    done: dict[str, Operator] = {}
    visiting: list[str] = []

    def visit(op: Operator) -> None:
        if op.name in done:
            return
        if op.name in visiting:
            cycle = " -> ".join([*visiting[visiting.index(op.name):], op.name])
            raise ConfigError(f"operators feed each other in a cycle: {cycle}")
        visiting.append(op.name)
        upstream = by_sink.get(op.source)
        if upstream is not None:
            visit(upstream)
        visiting.pop()
        done[op.name] = op

    for op in ops:
        visit(op)
    return list(done.values())
