"""``TestDriver``: run operators in-process, without Kafka, with fault injection.

The driver keeps, per partition, the records sent (the source log), the task's
checkpoints, and how far outputs were emitted (the committed offset). ``crash``
drops every task's memory; ``recover`` runs the worker's recovery protocol on
that: restore the newest checkpoint, replay up to the committed offset without
emitting, then continue live. So a test can check, as the fault tests do on a
real broker, that failures never change the output::

    driver = TestDriver(op)
    driver.send("alice", {"amount": 3}, timestamp_ms=1_000)
    driver.checkpoint(); driver.crash(); driver.recover()
    assert driver.emitted() == [...]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from streamremat.core.operator import App, Operator
from streamremat.core.records import Record
from streamremat.core.task import Task

#: Replay feeds records in batches of this size, unlike live sends (one at a time),
#: so every recovery also checks that batching never changes results.
REPLAY_BATCH = 7


@dataclass(frozen=True)
class Emission:
    """A window result as a user sees it: the key decoded with the operator's serde."""

    key: Any
    start_ms: int
    end_ms: int
    value: Any
    partition: int = 0
    operator: str = field(default="", compare=False)


@dataclass(frozen=True)
class DriverDeadLetter:
    """A record that went to the dead letters: its raw bytes and why."""

    key: bytes | None
    value: bytes | None
    timestamp_ms: int | None
    partition: int
    offset: int
    stage: str
    reason: str
    operator: str = ""


@dataclass(frozen=True)
class DriverLateRecord:
    key: bytes | None
    value: bytes | None
    timestamp_ms: int
    stream_time_ms: int
    partition: int
    operator: str = ""


@dataclass
class _Partition:
    log: list[Record] = field(default_factory=list)
    #: outputs of records below this offset were emitted (the committed offset).
    emitted_through: int = 0
    chain: list[bytes] = field(default_factory=list)


class TestDriver:
    """Drive an App or an Operator in-process; see the module docstring."""

    __test__ = False  # not a pytest test class

    def __init__(self, app_or_operator: App | Operator, partitions: int = 1) -> None:
        if isinstance(app_or_operator, Operator):
            self.operators = [app_or_operator]
        else:
            self.operators = list(app_or_operator.operators.values())
        if not self.operators:
            raise ValueError("TestDriver needs at least one operator")
        if partitions < 1:
            raise ValueError("partitions must be >= 1")
        self.partitions = partitions
        topics = {op.source for op in self.operators}
        self._logs = {(t, p): _Partition() for t in topics for p in range(partitions)}
        self._chains: dict[tuple[str, int], list[bytes]] = {}
        self._tasks: dict[tuple[str, int], Task] | None = self._fresh_tasks()
        self._emitted: list[Emission] = []
        self._dead: list[DriverDeadLetter] = []
        self._late: list[DriverLateRecord] = []

    def _fresh_tasks(self) -> dict[tuple[str, int], Task]:
        return {(op.name, p): Task(op, p) for op in self.operators for p in range(self.partitions)}

    # -- input ------------------------------------------------------------------

    def send(
        self,
        key: Any,
        value: Any,
        timestamp_ms: int | None,
        partition: int = 0,
        *,
        topic: str | None = None,
    ) -> None:
        """Append a record to a source partition and process it (unless crashed).

        Keys and values are encoded with the first matching operator's serdes;
        ``bytes`` are sent as they are (to test malformed input).
        """
        topic = self._topic(topic)
        if not 0 <= partition < self.partitions:
            raise ValueError(f"partition {partition} is outside 0..{self.partitions - 1}")
        op = next(o for o in self.operators if o.source == topic)
        raw_key = key if isinstance(key, bytes) or key is None else op.key_serde.dumps(key)
        raw_value = (
            value if isinstance(value, bytes) or value is None else op.value_serde.dumps(value)
        )
        part = self._logs[(topic, partition)]
        record = Record(raw_key, raw_value, timestamp_ms, len(part.log))
        part.log.append(record)
        if self._tasks is not None:
            self._run(topic, partition, [record], emit=True)
            part.emitted_through = record.offset + 1

    def _topic(self, topic: str | None) -> str:
        sources = sorted({op.source for op in self.operators})
        if topic is None:
            if len(sources) > 1:
                raise ValueError(f"several source topics {sources}: pass topic=")
            return sources[0]
        if topic not in sources:
            raise ValueError(f"no operator reads topic {topic!r}; sources are {sources}")
        return topic

    def _run(self, topic: str, partition: int, batch: Sequence[Record], emit: bool) -> None:
        for op in self.operators:
            if op.source == topic:
                self._run_op(op, partition, batch, emit)

    def _run_op(self, op: Operator, partition: int, batch: Sequence[Record], emit: bool) -> None:
        assert self._tasks is not None
        out = self._tasks[(op.name, partition)].process(batch, emit=emit)
        loads = op.key_serde.loads
        self._emitted.extend(
            Emission(loads(r.key), r.start_ms, r.end_ms, r.value, partition, op.name)
            for r in out.results
        )
        self._dead.extend(
            DriverDeadLetter(
                d.record.key, d.record.value, d.record.timestamp, partition,
                d.record.offset, d.stage, d.reason, op.name,
            )
            for d in out.dead_letters
        )
        self._late.extend(
            DriverLateRecord(
                x.record.key, x.record.value, x.timestamp_ms, x.stream_time_ms,
                partition, op.name,
            )
            for x in out.late
        )

    # -- faults -----------------------------------------------------------------

    def checkpoint(self, partition: int | None = None) -> None:
        """Checkpoint every task of ``partition`` (all partitions when None).

        The first checkpoint of a task is a full snapshot, later ones are deltas
        on top of it, as in the worker."""
        if self._tasks is None:
            raise RuntimeError("cannot checkpoint while crashed; call recover() first")
        for (name, p), task in self._tasks.items():
            if partition is not None and p != partition:
                continue
            chain = self._chains.setdefault((name, p), [])
            chain.append(task.snapshot(full=not chain))

    def crash(self) -> None:
        """Lose all in-memory state; checkpoints and the records sent survive."""
        self._tasks = None

    def recover(self) -> None:
        """Restore each task from its newest checkpoint, replay the records after it
        up to what was already emitted (emitting nothing), then process the rest."""
        if self._tasks is not None:
            raise RuntimeError("recover() without crash(): nothing to recover")
        tasks: dict[tuple[str, int], Task] = {}
        for op in self.operators:
            for p in range(self.partitions):
                chain = self._chains.get((op.name, p))
                tasks[(op.name, p)] = Task.restore(op, p, chain) if chain else Task(op, p)
        self._tasks = tasks
        for (topic, p), part in self._logs.items():
            for op in self.operators:
                if op.source != topic:
                    continue
                start = tasks[(op.name, p)].next_offset or 0
                # Outputs of [start, emitted_through) were emitted before the crash.
                replay = part.log[start : part.emitted_through]
                live = part.log[max(start, part.emitted_through) :]
                for emit, records in ((False, replay), (True, live)):
                    for i in range(0, len(records), REPLAY_BATCH):
                        self._run_op(op, p, records[i : i + REPLAY_BATCH], emit)
            part.emitted_through = len(part.log)

    # -- output -----------------------------------------------------------------

    def emitted(self) -> list[Emission]:
        """Every window result so far, in emission order."""
        return list(self._emitted)

    def late(self) -> list[DriverLateRecord]:
        return list(self._late)

    def dead_letters(self) -> list[DriverDeadLetter]:
        return list(self._dead)

    def task(self, operator: str | None = None, partition: int = 0) -> Task:
        """The live task (for inspecting state in tests)."""
        if self._tasks is None:
            raise RuntimeError("crashed: no live tasks")
        name = operator or self.operators[0].name
        return self._tasks[(name, partition)]
