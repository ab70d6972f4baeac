"""``TestDriver``: run operators in-process, without Kafka, with fault injection.

The driver keeps, per partition, the records sent (the source log), the tasks'
checkpoints, and how far outputs were emitted (the committed offset, with the
stream times committed beside it). ``crash`` drops every task's memory;
``recover`` runs the worker's own recovery code (``streamremat.core.recovery``)
on that: restore the newest checkpoint, replay up to the committed offset
without emitting (skipping what the replay horizon allows), then continue live.
So a test can check, as the fault tests do on a real broker, that failures never
change the output::

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
from streamremat.core.records import BatchOutput, Record
from streamremat.core.recovery import PartitionTasks, restore_task
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
class _Checkpoint:
    payloads: list[bytes]
    offset: int


@dataclass
class _Partition:
    """One source partition: its log, its tasks, and what was committed."""

    log: list[Record] = field(default_factory=list)
    #: None while crashed
    tasks: PartitionTasks | None = None
    #: outputs of records below this offset were emitted (the committed offset)
    committed: int | None = None
    #: each task's stream time, committed with the offset as the worker does: the
    #: horizon of the next replay
    stream_times: dict[str, int] = field(default_factory=dict)


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
        self._parts = {(t, p): _Partition() for t in topics for p in range(partitions)}
        self._chains: dict[tuple[str, int], _Checkpoint] = {}
        self._crashed = False
        self._emitted: list[Emission] = []
        self._dead: list[DriverDeadLetter] = []
        self._late: list[DriverLateRecord] = []
        self._restore_all()

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
        part = self._parts[(topic, partition)]
        record = Record(raw_key, raw_value, timestamp_ms, len(part.log))
        part.log.append(record)
        if not self._crashed:
            self._run(part, partition, [record])

    def _topic(self, topic: str | None) -> str:
        sources = sorted({op.source for op in self.operators})
        if topic is None:
            if len(sources) > 1:
                raise ValueError(f"several source topics {sources}: pass topic=")
            return sources[0]
        if topic not in sources:
            raise ValueError(f"no operator reads topic {topic!r}; sources are {sources}")
        return topic

    def _run(self, part: _Partition, partition: int, batch: Sequence[Record]) -> None:
        """Process a batch, then commit its outputs and offset (one commit per batch;
        a replayed batch commits nothing, as in the worker)."""
        tasks = part.tasks
        assert tasks is not None
        for task, out in tasks.process(batch):
            self._collect(task.operator, partition, out)
        if not tasks.replaying:
            part.committed = tasks.position
            part.stream_times = tasks.stream_times()

    def _collect(self, op: Operator, partition: int, out: BatchOutput) -> None:
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
        if self._crashed:
            raise RuntimeError("cannot checkpoint while crashed; call recover() first")
        for (_, p), part in self._parts.items():
            if partition is not None and p != partition:
                continue
            assert part.tasks is not None
            for task in part.tasks.tasks:
                chain = self._chains.get((task.operator.name, p))
                payload = task.snapshot(full=chain is None)
                if chain is None:
                    chain = self._chains[(task.operator.name, p)] = _Checkpoint([], 0)
                chain.payloads.append(payload)
                chain.offset = part.tasks.position

    def crash(self) -> None:
        """Lose all in-memory state; checkpoints and the records sent survive."""
        self._crashed = True
        for part in self._parts.values():
            part.tasks = None

    def recover(self) -> None:
        """Run the worker's recovery (``streamremat.core.recovery``) on every partition:
        restore each task from its newest checkpoint, replay the records after it
        up to the committed offset with the committed replay horizon (emitting
        nothing), then process the rest live."""
        if not self._crashed:
            raise RuntimeError("recover() without crash(): nothing to recover")
        self._restore_all()
        for (_, p), part in self._parts.items():
            assert part.tasks is not None
            records = part.log[part.tasks.start :]
            for i in range(0, len(records), REPLAY_BATCH):
                self._run(part, p, records[i : i + REPLAY_BATCH])

    def _restore_all(self) -> None:
        self._crashed = False
        for (topic, p), part in self._parts.items():
            tasks = []
            for op in self.operators:
                if op.source != topic:
                    continue
                chain = self._chains.get((op.name, p))
                restored = restore_task(
                    op, p, chain.payloads if chain else None, chain.offset if chain else None,
                    part.committed, log_start=0,
                )
                if restored.error is not None:
                    raise restored.error  # the driver's own checkpoints must restore
                tasks.append(restored.task)
            part.tasks = PartitionTasks(tasks, part.committed, part.stream_times)

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
        if self._crashed:
            raise RuntimeError("crashed: no live tasks")
        name = operator or self.operators[0].name
        op = next((o for o in self.operators if o.name == name), None)
        if op is None:
            raise ValueError(f"no operator {name!r}")
        part = self._parts[(op.source, partition)].tasks
        assert part is not None
        return next(t for t in part.tasks if t.operator.name == name)
