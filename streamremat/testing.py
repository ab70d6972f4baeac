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

The App runs as the worker runs it (``streamremat.core.topology``): a re-keyed
operator forwards its records through its repartition topic, keyed by the new
key, and an operator reading another's sink gets that operator's results, each
record on the partition Kafka's default partitioner would pick.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from streamremat.core.operator import App, Operator
from streamremat.core.output import output_key, serialize_results
from streamremat.core.records import BatchOutput, Record, WindowResult
from streamremat.core.recovery import PartitionTasks, restore_task
from streamremat.core.repartition import Repartitioner
from streamremat.core.task import Task
from streamremat.core.topology import Stage, StageKind, compile_app
from streamremat.runtime.outputs import partition_for, to_records
from streamremat.tuning.remat import PlanInputs, Rematerialize, RematPlan, WindowCandidate, plan

#: A test's own plan: (operator, partition, the task's open groups) -> the groups
#: (close times) to write as recompute.
ChoosePlan = Callable[[str, int, list[WindowCandidate]], Iterable[int]]


def driver_plan_inputs(checkpoint_offset: int) -> PlanInputs:
    """What the driver's planner sees by default: nothing measured (no replay
    rate, no byte cost, no RTO, unlimited retention), so ``"auto"`` stores every
    group and ``"recompute"`` recomputes every group it can."""
    return PlanInputs(
        checkpoint_offset=checkpoint_offset, byte_cost_s=0.0, interval_s=1.0,
        failure_rate_per_s=0.0, replay_rate_eps=None, replay_rate_low_eps=None,
        ingest_rate_eps=0.0, downtime_p90_s=0.0, worst_backlog_records=0.0, rto_s=math.inf,
    )

#: Replay feeds records in batches of this size, unlike live sends (one at a time),
#: so every recovery also checks that batching never changes results.
REPLAY_BATCH = 7


@dataclass(frozen=True)
class Emission:
    """A window result as a user sees it: the key decoded with the operator's serde
    (``streamremat.core.output.output_key``), the aggregation's result, and
    ``output``: the sink record's value bytes (``output`` through the output serde)."""

    key: Any
    start_ms: int
    end_ms: int
    value: Any
    partition: int = 0
    operator: str = field(default="", compare=False)
    output: bytes = field(default=b"", compare=False)


@dataclass(frozen=True)
class DriverDeadLetter:
    """A record that went to the dead letters: its raw bytes and why. A window
    whose result failed (stage ``result`` or ``output``) has its key, the result's
    ``repr`` as value (if any), ``offset`` None and ``window`` (start, end)."""

    key: bytes | None
    value: bytes | None
    timestamp_ms: int | None
    partition: int
    offset: int | None
    stage: str
    reason: str
    operator: str = ""
    window: tuple[int, int] | None = None


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
    #: a snapshot failed since (its dirty set is gone): the next one is a full
    needs_full: bool = False


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
    """Drive an App or an Operator in-process; see the module docstring.

    Every topic has ``partitions`` partitions (a repartition topic: its operator's
    ``repartition_partitions`` if set), as the worker creates them.

    Each checkpoint runs the rematerialization planner per task, as the worker
    does, on ``plan_inputs(checkpoint offset)`` (default ``driver_plan_inputs``)
    and the operator's ``rematerialize``; the plans are in ``last_plans``.
    ``checkpoint(choose=...)`` imposes a test's own plan instead.
    """

    __test__ = False  # not a pytest test class

    def __init__(
        self, app_or_operator: App | Operator, partitions: int = 1, *,
        plan_inputs: Callable[[int], PlanInputs] = driver_plan_inputs,
    ) -> None:
        if partitions < 1:
            raise ValueError("partitions must be >= 1")
        self.topology = compile_app(app_or_operator)
        if not self.topology.stages:
            raise ValueError("TestDriver needs at least one operator")
        self.operators = [s.operator for s in self.topology.stages
                          if s.kind is StageKind.WINDOW]
        self.partitions = partitions
        counts = {t: partitions for t in self.topology.external_sources}
        for stage in self.topology.stages:
            n = counts[stage.source]
            for topic in stage.outputs:
                counts.setdefault(topic, n)
            if stage.target is not None:
                counts[stage.target] = stage.partitions or n
        self._counts = counts
        self._parts = {(t, p): _Partition() for t in self.topology.sources
                       for p in range(counts[t])}
        self._internal = self.topology.internal
        self._chains: dict[tuple[str, int], _Checkpoint] = {}
        self.plan_inputs = plan_inputs
        #: (operator, partition) -> the plan of its newest checkpoint
        self.last_plans: dict[tuple[str, int], RematPlan] = {}
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
        op = self.topology.on(topic)[0].operator
        raw_key = key if isinstance(key, bytes) or key is None else op.key_serde.dumps(key)
        raw_value = (
            value if isinstance(value, bytes) or value is None else op.value_serde.dumps(value)
        )
        part = self._parts[(topic, partition)]
        record = Record(raw_key, raw_value, timestamp_ms, len(part.log))
        part.log.append(record)
        if not self._crashed:
            self._run(topic, partition, [record])

    def _topic(self, topic: str | None) -> str:
        sources = sorted(self.topology.external_sources)
        if topic is None:
            if len(sources) > 1:
                raise ValueError(f"several source topics {sources}: pass topic=")
            return sources[0]
        if topic not in sources:
            raise ValueError(f"no operator reads topic {topic!r}; sources are {sources}")
        return topic

    def _run(self, topic: str, partition: int, batch: Sequence[Record]) -> None:
        """Process a batch, deliver what it writes to topics read inside the App
        (depth first), then commit its outputs and offset (one commit per batch; a
        replayed batch commits nothing, as in the worker)."""
        part = self._parts[(topic, partition)]
        tasks = part.tasks
        assert tasks is not None
        routed: dict[tuple[str, int], list[Record]] = {}
        for task, out in tasks.process(batch):
            target = task.target if isinstance(task, Repartitioner) else None
            # Serialized once, as the worker does: a result that fails goes to out.failed.
            serialized = serialize_results(task.operator, out.results, out.failed)
            sent = to_records(task.operator, partition, out, target, serialized)
            if target is None:
                self._collect(task.operator, partition, out, serialized)
            else:
                self._collect_dead(task.operator, partition, out)
            for rec in sent:
                if rec.topic not in self._internal:
                    continue
                p = partition_for(rec.key, self._counts[rec.topic])
                log = self._parts[(rec.topic, p)].log
                record = Record(rec.key, rec.value, rec.timestamp_ms, len(log),
                                tuple(rec.headers))
                log.append(record)
                routed.setdefault((rec.topic, p), []).append(record)
        for (downstream, p), records in routed.items():
            self._run(downstream, p, records)
        if not tasks.replaying:
            part.committed = tasks.position
            part.stream_times = tasks.stream_times()

    def _collect(
        self, op: Operator, partition: int, out: BatchOutput,
        serialized: list[tuple[WindowResult, bytes]],
    ) -> None:
        """What the worker sends: results through ``output`` and the output serde
        (``serialized``), and everything that failed to the dead letters."""
        self._emitted.extend(
            Emission(output_key(op, r.key), r.start_ms, r.end_ms, r.value, partition, op.name,
                     value)
            for r, value in serialized
        )
        self._collect_dead(op, partition, out)
        self._late.extend(
            DriverLateRecord(
                x.record.key, x.record.value, x.timestamp_ms, x.stream_time_ms,
                partition, op.name,
            )
            for x in out.late
        )

    def _collect_dead(self, op: Operator, partition: int, out: BatchOutput) -> None:
        self._dead.extend(
            DriverDeadLetter(
                d.record.key, d.record.value, d.record.timestamp, partition,
                d.record.offset, d.stage, d.reason, op.name,
            )
            for d in out.dead_letters
        )
        self._dead.extend(
            DriverDeadLetter(
                f.key, None if f.value is None else repr(f.value).encode(), f.end_ms, partition,
                None, f.stage, f.reason, op.name, (f.start_ms, f.end_ms),
            )
            for f in out.failed
        )

    # -- faults -----------------------------------------------------------------

    def checkpoint(self, partition: int | None = None, *, choose: ChoosePlan | None = None) -> None:
        """Checkpoint every windowed task of ``partition`` (all partitions when None).

        The first checkpoint of a task is a full snapshot, later ones are deltas
        on top of it, as in the worker. Repartition stages keep no state. A task
        whose aggregation's ``encode`` raises is not checkpointed (its previous
        checkpoint stays), as in the worker; the next one that succeeds is full.
        The groups written as recompute are the planner's, or ``choose``'s (a group
        whose first offset is unknown is stored whatever it says)."""
        if self._crashed:
            raise RuntimeError("cannot checkpoint while crashed; call recover() first")
        for (_, p), part in self._parts.items():
            if partition is not None and p != partition:
                continue
            assert part.tasks is not None
            for task in part.tasks.tasks:
                if not isinstance(task, Task):
                    continue
                chain = self._chains.get((task.operator.name, p))
                full = chain is None or chain.needs_full
                recompute = self._plan(task, p, part.tasks.position, choose)
                try:
                    payload = task.snapshot(full=full, recompute=recompute)
                except Exception:  # an encode raised: skipped, as the worker does
                    if chain is not None:
                        chain.needs_full = True
                    continue
                if chain is None:
                    chain = self._chains[(task.operator.name, p)] = _Checkpoint([], 0)
                if full:
                    chain.payloads.clear()
                chain.payloads.append(payload)
                chain.offset, chain.needs_full = part.tasks.position, False

    def _plan(self, task: Task, p: int, offset: int, choose: ChoosePlan | None) -> set[int]:
        groups = [WindowCandidate(*g) for g in task.groups()]
        if choose is not None:
            return set(choose(task.operator.name, p, groups))
        chosen = plan(self.plan_inputs(offset), groups, Rematerialize(task.operator.rematerialize))
        self.last_plans[(task.operator.name, p)] = chosen
        return set(chosen.recompute)

    def crash(self) -> None:
        """Lose all in-memory state; checkpoints and the records sent survive."""
        self._crashed = True
        for part in self._parts.values():
            part.tasks = None

    def recover(self) -> None:
        """Run the worker's recovery (``streamremat.core.recovery``) on every partition.

        1. Restore each windowed task from its newest checkpoint; a repartition
           stage starts at the committed offset (its forwards below it are in the
           repartition topic already).
        2. Replay every partition up to its committed offset with the committed
           replay horizon, emitting nothing, so every stage is live-ready.
        3. Process the rest live, topic by topic in topological order, so what a
           stage writes reaches the stages after it.
        """
        if not self._crashed:
            raise RuntimeError("recover() without crash(): nothing to recover")
        self._restore_all()
        for (topic, p), part in self._parts.items():
            assert part.tasks is not None
            replay = part.log[part.tasks.position : part.tasks.replay_until]
            for i in range(0, len(replay), REPLAY_BATCH):
                self._run(topic, p, replay[i : i + REPLAY_BATCH])
        for topic in self.topology.sources:
            for p in range(self._counts[topic]):
                part = self._parts[(topic, p)]
                assert part.tasks is not None
                while part.tasks.position < len(part.log):
                    at = part.tasks.position
                    self._run(topic, p, part.log[at : at + REPLAY_BATCH])

    def _restore_all(self) -> None:
        self._crashed = False
        for (topic, p), part in self._parts.items():
            tasks: list[Task | Repartitioner] = []
            for stage in self.topology.on(topic):
                tasks.append(self._restore(stage, p, part.committed))
            part.tasks = PartitionTasks(tasks, part.committed, part.stream_times)

    def _restore(self, stage: Stage, p: int, committed: int | None) -> Task | Repartitioner:
        if stage.target is not None:
            rep = Repartitioner(stage.operator, stage.target, p)
            rep.next_offset = committed or 0
            return rep
        chain = self._chains.get((stage.name, p))
        restored = restore_task(
            stage.operator, p, chain.payloads if chain else None,
            chain.offset if chain else None, committed, log_start=0,
        )
        if restored.error is not None:
            raise restored.error  # the driver's own checkpoints must restore
        return restored.task

    # -- output -----------------------------------------------------------------

    def emitted(self) -> list[Emission]:
        """Every window result so far, in emission order."""
        return list(self._emitted)

    def late(self) -> list[DriverLateRecord]:
        return list(self._late)

    def dead_letters(self) -> list[DriverDeadLetter]:
        return list(self._dead)

    def topic_log(self, topic: str, partition: int = 0) -> list[Record]:
        """The records of a source, repartition or chained topic partition so far."""
        return list(self._parts[(topic, partition)].log)

    def task(self, operator: str | None = None, partition: int = 0) -> Task:
        """The live windowed task of ``operator`` (for inspecting state in tests)."""
        if self._crashed:
            raise RuntimeError("crashed: no live tasks")
        name = operator or self.operators[0].name
        stage = next((s for s in self.topology.stages
                      if s.name == name and s.kind is StageKind.WINDOW), None)
        if stage is None:
            raise ValueError(f"no operator {name!r}")
        part = self._parts[(stage.source, partition)].tasks
        assert part is not None
        return next(t for t in part.tasks if isinstance(t, Task) and t.operator.name == name)
