"""Recovery of one source partition's tasks: the part that is pure (DESIGN §6).

The worker (``runtime/partition.py``) and the ``TestDriver`` run this same code,
so what a user tests in-process is what runs on Kafka. The caller does the I/O
(load checkpoints, read the committed offset and its metadata, fetch records);
this module decides which state each task starts from, where the replay starts
and ends, and feeds fetched records through the replay (state only, with the
replay horizon) into live processing.
"""

from __future__ import annotations

import bisect
import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from streamremat.core.operator import Operator
from streamremat.core.records import BatchOutput, SourceRecord
from streamremat.core.repartition import Repartitioner
from streamremat.core.serdes import Serde
from streamremat.core.task import Task

__all__ = [
    "PartitionTasks",
    "Restore",
    "TaskRestore",
    "replay_start",
    "restore_task",
]


class Restore(enum.Enum):
    """How a task's starting state was chosen."""

    RESTORED = "restored"
    #: no checkpoint: the task starts empty at the log start
    NO_CHECKPOINT = "no_checkpoint"
    #: the checkpoint's offset is beyond the committed offset: its outputs never
    #: committed, so it is discarded and state is rebuilt from the log start
    BEYOND_COMMITTED = "beyond_committed"
    #: the engine refused the checkpoint (format, or a changed operator definition)
    REFUSED = "refused"


@dataclass(frozen=True)
class TaskRestore:
    task: Task
    outcome: Restore
    #: why the engine refused the checkpoint (``Restore.REFUSED``)
    error: Exception | None = None


def restore_task(
    operator: Operator,
    partition: int,
    payloads: Sequence[bytes] | None,
    offset: int | None,
    committed: int | None,
    log_start: int,
) -> TaskRestore:
    """The state a task starts from: its checkpoint chain (``payloads``: one full
    snapshot, then deltas) at source ``offset``, or an empty task at ``log_start``
    when there is none, when its offset is beyond the ``committed`` offset, or
    when the engine refuses it."""
    outcome = Restore.NO_CHECKPOINT
    error: Exception | None = None
    if payloads and offset is not None:
        if committed is not None and offset > committed:
            outcome = Restore.BEYOND_COMMITTED
        else:
            try:
                task = Task.restore(operator, partition, payloads)
            except Exception as exc:  # a payload the engine refuses: rebuild, loudly
                outcome, error = Restore.REFUSED, exc
            else:
                task.next_offset = offset
                return TaskRestore(task, Restore.RESTORED)
    task = Task(operator, partition)
    task.next_offset = log_start
    return TaskRestore(task, outcome, error)


def replay_start(task: Task | Repartitioner) -> int:
    """Where a task's replay starts: its checkpoint offset ``c``, or ``o_min`` (the
    earliest first offset of the groups its checkpoint wrote as recompute)."""
    nxt = task.next_offset or 0
    start = task.refold_from if isinstance(task, Task) else None
    return nxt if start is None else min(start, nxt)


class PartitionTasks:
    """The tasks of one source partition, from recovery on (DESIGN §6, §9).

    The recovery protocol, per task restored from a checkpoint at ``c``
    (``process`` runs it as records arrive):

    1. The replay starts at the smallest ``replay_start`` of the tasks: ``c``, or
       ``o_min`` when the checkpoint wrote groups as *recompute* (their first
       offset instead of their accumulators; every other window is restored).
    2. Records in ``[o_min, c)`` feed only the recompute groups (``Task.refold``):
       for sessions with the stream time the failure-free run had there, leaving
       out the records whose fold raised then; nothing else of the state moves.
    3. When the replay reaches ``c`` the rebuilt groups are installed
       (``Task.finish_refold``, which checks they start where the checkpoint says
       and that stream time came out the same): the state is byte-identical to
       the failure-free run's at ``c``.
    4. ``[c, replay_until)``: replay as without a plan: state advances and
       nothing is emitted; ``replay_until`` is the committed offset, whose
       outputs were committed before. A record all of whose windows close by the
       stream time at the committed offset (the horizon) is skipped undecoded.
    5. From ``replay_until`` on the tasks are live.

    Tasks of one partition may restore to different offsets; each skips the
    records it has already seen. A repartition stage (stateless) starts at the
    committed offset: it forwarded everything below it, so the replay passes it by.
    """

    def __init__(
        self,
        tasks: Sequence[Task | Repartitioner],
        committed: int | None,
        horizons: Mapping[str, int],
    ) -> None:
        self.tasks = list(tasks)
        #: per operator, the stream time at the committed offset
        self.horizons = dict(horizons)
        self.start = min((replay_start(t) for t in self.tasks), default=0)
        #: records of a recompute range were skipped (a retention gap under ``reset``)
        self._lossy = False
        #: the next offset to process: what a commit now would store
        self.position = self.start
        self.replay_until = self.start if committed is None else max(committed, self.start)
        #: tasks that decode the live records once between them, per value serde
        groups: dict[int, tuple[Serde, list[Task]]] = {}
        for t in self.tasks:
            if isinstance(t, Task) and t.shares_decoded:
                serde = t.operator.value_serde
                groups.setdefault(id(serde), (serde, []))[1].append(t)
        self._share_groups = [g for g in groups.values() if len(g[1]) > 1]

    @property
    def replaying(self) -> bool:
        return self.position < self.replay_until

    def process(
        self, records: Sequence[SourceRecord]
    ) -> list[tuple[Task | Repartitioner, BatchOutput]]:
        """Feed one fetched batch (offset order) to every task; return each task's
        output for the records at or after ``replay_until`` (none for the others)."""
        if records and records[0].offset < self.position:
            # Fetched before recovery's seek: the same offsets come again; skip them.
            records = [r for r in records if r.offset >= self.position]
        if not records:
            return []
        if self.position < self.replay_until:
            k = self.replay_until
            split = bisect.bisect_left(records, k, key=_offset)
            if split:
                replay = records[:split]
                for task in self.tasks:
                    if isinstance(task, Task) and task.refold_from is not None:
                        self._refold(task, replay)
                    task.process(_unseen(task, replay), emit=False,
                                 horizon_ms=self.horizons.get(task.operator.name))
                self.position = replay[-1].offset + 1
                self._finish_refolds()
            records = records[split:]
            if not records:
                return []
            self.position = k
            self._finish_refolds()
        decoded = self._decode_shared(records)
        outputs: list[tuple[Task | Repartitioner, BatchOutput]] = [
            (task, task.process(_unseen(task, records), decoded=decoded.get(id(task))))
            if isinstance(task, Task) else (task, task.process(_unseen(task, records)))
            for task in self.tasks
        ]
        self.position = records[-1].offset + 1
        return outputs

    @property
    def raw_replayable(self) -> bool:
        """Whether the replay can take parsed record sets (``replay_raw``): every
        task is one with a native fold and nothing to recompute."""
        return self.replaying and bool(self.tasks) and all(
            isinstance(t, Task) and t.fast is not None and t.fast.native is not None
            and t.refold_from is None for t in self.tasks)

    def replay_raw(self, raw: Any) -> bool:
        """Step 4 for the records of ``raw`` (a native ``RawRecords`` of offsets
        below ``replay_until``, see ``runtime/raw_replay.py``): True when every task
        folded them; False when one declined (the caller then feeds them to
        ``process`` as records: each task skips what it folded already)."""
        last = raw.last_offset(self.position)
        for task in self.tasks:
            assert isinstance(task, Task)
            if not task.replay_raw(raw, self.position, self.horizons.get(task.operator.name)):
                return False
        if last is not None:
            self.position = last + 1
        return True

    def _refold(self, task: Task, records: Sequence[SourceRecord]) -> None:
        """Step 2: the records below the task's checkpoint offset go to its recompute
        groups; step 3 once the records reach the checkpoint offset."""
        c = task.next_offset or 0
        cut = bisect.bisect_left(records, c, key=_offset)
        if cut:
            task.refold(records[:cut])
        if cut < len(records):
            task.finish_refold(exact=not self._lossy)

    def _finish_refolds(self) -> None:
        """Step 3 for tasks whose checkpoint offset the position has reached."""
        for task in self.tasks:
            if (isinstance(task, Task) and task.refold_from is not None
                    and self.position >= (task.next_offset or 0)):
                task.finish_refold(exact=not self._lossy)

    def _decode_shared(self, records: Sequence[SourceRecord]) -> dict[int, dict[int, Any]]:
        """Per task (by id), the values of ``records`` decoded once for every task
        that shares them with another of the same value serde; a record that does not
        decode is left out (each task then gives the dead letter its reason)."""
        if not self._share_groups:
            return {}
        by_task: dict[int, dict[int, Any]] = {}
        for serde, tasks in self._share_groups:
            loads = serde.loads
            values: dict[int, Any] = {}
            for r in records:
                raw = r.value
                if raw is not None:
                    try:
                        values[r.offset] = loads(raw)
                    except Exception:
                        continue
            for task in tasks:
                by_task[id(task)] = values
        return by_task

    def skip_to(self, offset: int) -> None:
        """Go on at ``offset``: the source no longer has the offsets below it (a
        retention gap the worker's policy skips). A replay that ends below it is over."""
        if offset > self.position:
            self._lossy = self._lossy or any(
                isinstance(t, Task) and t.refold_from is not None for t in self.tasks)
        self.position = max(self.position, offset)
        for task in self.tasks:
            task.next_offset = max(task.next_offset or 0, offset)
        self._finish_refolds()

    def reached(self, position: int) -> None:
        """The source has nothing more below ``position`` (e.g. only transaction
        markers were left below the committed offset): a replay there is over."""
        if self.position < self.replay_until <= position:
            self.position = self.replay_until
            self._finish_refolds()

    def stream_times(self) -> dict[str, int]:
        """Each task's stream time: committed with the offset, it is the horizon of
        a replay up to that offset."""
        return {t.operator.name: st for t in self.tasks if (st := t.stream_time_ms) is not None}


def _offset(record: SourceRecord) -> int:
    return record.offset


def _unseen(task: Task | Repartitioner, records: Sequence[SourceRecord]) -> Sequence[SourceRecord]:
    nxt = task.next_offset
    if nxt is None or not records or records[0].offset >= nxt:
        return records
    return [r for r in records if r.offset >= nxt]
