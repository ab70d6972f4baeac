"""A live batch's outputs on their way into the partition's transaction, with
the results of a large closing sent in bounded slices.

A window over a million keys closes in one batch. Building, serializing,
partitioning and sending its results in one go held the event loop for tens
of seconds, past the group's session timeout, right after a large recovery
(``bench/recovery_machine_loss.py`` at 1M keys). Here they go out
``core.closing.RESULT_SLICE`` at a time, and the loop turns between slices.

Exactly-once is untouched: the slices all go into the partition's open
transaction, and a commit sends everything emitted up to its offset
(``capture``, then ``send``) before the offset joins that transaction. Slices
are sent early, never committed apart: a result committed in a later
transaction than the offset of the batch that closed its window would be lost
by a crash in between (a replay up to the committed offset emits nothing). An
abort drops whatever is queued with the transaction.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import cast

from streamremat.core.closing import RESULT_SLICE, ClosedWindows
from streamremat.core.operator import Operator
from streamremat.core.records import BatchOutput
from streamremat.core.repartition import Repartitioner
from streamremat.core.task import Task
from streamremat.metrics.sensor import Sensor
from streamremat.runtime.committing import PartitionCommitter
from streamremat.runtime.outputs import Sendable, to_records, to_sendables
from streamremat.runtime.recovery_report import count_outputs

#: What waits behind a large closing: records ready to send, or a task's output
#: whose results are still to be built.
_Queued = list[Sendable] | tuple[Operator, BatchOutput]


def is_large(out: BatchOutput) -> bool:
    """Whether ``out`` holds more unbuilt results than one slice."""
    results = out.results
    return isinstance(results, ClosedWindows) and results.pending > RESULT_SLICE


@dataclass
class Outgoing:
    """What one transaction sends: the records ready (``records``), then what
    waited behind a large closing (``queued``), in the order they were emitted."""

    records: list[Sendable] = field(default_factory=list)
    queued: collections.deque[_Queued] = field(default_factory=collections.deque)


class Emitter:
    """Turns a partition's live outputs into records for its committer."""

    def __init__(self, partition: int, committer: PartitionCommitter, sensor: Sensor) -> None:
        self.partition = partition
        self.committer = committer
        self.sensor = sensor
        #: outputs behind a large closing, in batch order (after ``committer.pending``)
        self._queue: collections.deque[_Queued] = collections.deque()

    def __bool__(self) -> bool:
        return bool(self._queue)

    def emit(self, outputs: Sequence[tuple[Task | Repartitioner, BatchOutput]]) -> None:
        """Queue a batch's outputs for the commit (``committer.pending``) and count
        them. A large closing, and what follows it (to keep the order), waits in
        a queue: ``send`` builds its results a slice at a time."""
        partition = self.partition
        records: list[Sendable]
        for task, out in outputs:
            if not (out.results or out.dead_letters or out.late or out.forwards or out.failed):
                continue
            if isinstance(task, Repartitioner):
                records = cast(list[Sendable], to_records(task.operator, partition, out,
                                                          task.target))
                count_outputs(self.sensor, task.name, partition, out)
            elif self._queue or is_large(out):
                self._queue.append((task.operator, out))
                continue
            else:
                records = to_sendables(task.operator, partition, out)
                count_outputs(self.sensor, task.operator.name, partition, out)
            if self._queue:
                self._queue.append(records)
            else:
                self.committer.pending.extend(records)

    def capture(self) -> Outgoing:
        """Everything emitted until now, for one transaction; what is emitted from
        now on goes to the next."""
        outgoing = Outgoing(self.committer.pending, self._queue)
        self.committer.pending, self._queue = [], collections.deque()
        return outgoing

    async def send(self, outgoing: Outgoing) -> None:
        """Hand ``outgoing`` to the producer (inside the open transaction); a large
        closing's results a slice at a time, the event loop turning after each."""
        await self.committer.send(outgoing.records)
        queue = outgoing.queued
        while queue:
            item = queue[0]
            if isinstance(item, list):
                await self.committer.send(item)
            else:
                await self._send_sliced(*item)
            queue.popleft()

    async def _send_sliced(self, op: Operator, out: BatchOutput) -> None:
        partition, name = self.partition, op.name
        closed = out.results
        assert isinstance(closed, ClosedWindows)
        while (piece := closed.next_slice()) is not None:
            if piece:
                part = BatchOutput(results=piece)  # its serialization failures: part.failed
                records = to_sendables(op, partition, part)
                count_outputs(self.sensor, name, partition, part)
                await self.committer.send(records)
            await asyncio.sleep(0)
        # Last: the windows whose ``result`` raised joined ``out.failed`` as their
        # slice was built.
        rest = BatchOutput(dead_letters=out.dead_letters, late=out.late, failed=out.failed)
        last = to_records(op, partition, rest)
        count_outputs(self.sensor, name, partition, rest)
        await self.committer.send(last)

    def clear(self) -> None:
        """Drop what is queued (the transaction is aborted)."""
        self._queue.clear()
