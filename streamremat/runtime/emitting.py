"""A live batch's outputs on their way into the partition's transaction, with
the results of a large closing sent in bounded slices.

A window over a million keys closes in one batch. Building, serializing,
partitioning and sending its results in one go held the event loop for tens
of seconds, past the group's session timeout, right after a large recovery
(``bench/recovery_machine_loss.py`` at 1M keys). Here they go out
``core.closing.RESULT_SLICE`` at a time, and the loop turns between slices.

Exactly-once: a closing's results go into the transaction of the batch that
closed it, in as many transactions as their sending takes: one that has been
open for a quarter of the transaction timeout commits what it sent, with the
offset of the batch that closed the windows and how far their results got
(``runtime/closing_progress.py``), so none is committed apart from its place
(a replay up to the committed offset emits nothing) and none twice (the next
owner closes them again and skips what was out). ``Emitter._send_closing``
has the protocol. An abort drops whatever is queued with the transaction.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from streamremat.core.closing import RESULT_SLICE, ClosedWindows, FixedSlice
from streamremat.core.operator import Operator
from streamremat.core.records import BatchOutput, FailedResult, WindowResult
from streamremat.core.repartition import Repartitioner
from streamremat.core.task import Task
from streamremat.metrics.sensor import Sensor
from streamremat.runtime.closing_progress import ClosingProgress, Hold
from streamremat.runtime.committing import PartitionCommitter
from streamremat.runtime.outputs import Sendable, to_records, to_sendables
from streamremat.runtime.recovery_report import count_outputs


@dataclass
class Closing:
    """A task's closing whose results are still to be built (a large one, or one
    of an operator whose closing a previous owner committed in part)."""

    op: Operator
    results: ClosedWindows
    #: the task's list the windows whose ``result`` raises join as they are built
    failed: list[FailedResult]
    hold: Hold


#: What waits behind a large closing: records ready to send, or a closing.
_Queued = list[Sendable] | Closing
#: Commits what was sent, with the offset and stream times of a ``Hold``.
CommitProgress = Callable[[Hold], Awaitable[None]]


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
        #: how far the closings got, per operator (committed with the offsets)
        self.progress = ClosingProgress()
        #: where the batch being emitted starts (set by the runner before ``emit``)
        self.hold = Hold(0, {})
        #: commits a closing's transaction before all of it is out (exactly-once)
        self.commit_progress: CommitProgress | None = None

    def __bool__(self) -> bool:
        return bool(self._queue)

    def emit(self, outputs: Sequence[tuple[Task | Repartitioner, BatchOutput]]) -> None:
        """Queue a batch's outputs for the commit (``committer.pending``) and count
        them. A large closing waits in a queue (``send`` builds its results a
        slice at a time), and what follows it, to keep the order. The batch's
        other records go after its closings: a closing's transactions before
        the last commit the offset of this batch, so they may hold nothing else
        of it (the next owner would emit that again)."""
        partition = self.partition
        closings: list[Closing] = []
        records: list[Sendable] = []
        for task, out in outputs:
            if not (out.results or out.dead_letters or out.late or out.forwards or out.failed):
                continue
            if isinstance(task, Repartitioner):
                records.extend(to_records(task.operator, partition, out, task.target))
                count_outputs(self.sensor, task.name, partition, out)
                continue
            op = task.operator
            closed = out.results
            if is_large(out) or (isinstance(closed, ClosedWindows) and closed
                                 and op.name in self.progress):
                assert isinstance(closed, ClosedWindows)
                closings.append(Closing(op, closed, out.failed, self.hold))
                rest = BatchOutput(dead_letters=out.dead_letters, late=out.late,
                                   failed=out.failed[:])
                del out.failed[:]  # what fails from now on goes with its slice
                records.extend(to_records(op, partition, rest))
                count_outputs(self.sensor, op.name, partition, rest)
            else:
                records.extend(to_sendables(op, partition, out))
                count_outputs(self.sensor, op.name, partition, out)
        if closings or self._queue:
            self._queue.extend(closings)
            if records:
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
                await self._send_closing(item)
            queue.popleft()

    async def _send_closing(self, closing: Closing) -> None:
        """Send a closing's results a slice at a time, in as many transactions as
        that takes (exactly-once).

        1. Take the next slice (at most ``RESULT_SLICE`` windows, in the closing's
           order); none left: done (the caller's commit, with the offset past the
           batch, commits the last of them with everything after).
        2. Drop the windows of it that a previous owner committed (the markers it
           committed, ``ClosingProgress``; only after a recovery).
        3. Send its results, and the dead letters of its windows that failed, into
           the open transaction; note the last window as this operator's marker.
        4. If the transaction has been open for ``txn_span_s`` (a quarter of the
           producer's transaction timeout): wait for every output sent to be
           acknowledged, then commit the transaction with the offset of the
           closing's batch (``hold``: everything before that batch is sent,
           nothing of it but closings) and every operator's marker. A crash from
           here on replays to that offset, closes these windows again and
           resumes after the marker: nothing lost, nothing twice. The offset
           never passes the closing's batch until all of it is out.
        5. Let the event loop turn; go to 1.
        """
        op, partition, name = closing.op, self.partition, closing.op.name
        closed, failed, progress = closing.results, closing.failed, self.progress
        committer = self.committer
        while True:
            mark = len(failed)
            piece = closed.next_slice()
            if piece is None:
                return
            if type(piece) is FixedSlice:
                piece = progress.fixed(name, piece)  # its failures join ``failed`` when built
                results: Sequence[WindowResult] = piece if piece is not None else []
            else:
                results, failed[mark:] = progress.listed(name, piece, failed[mark:])
            part = BatchOutput(results=results)  # its serialization failures: part.failed
            records = to_sendables(op, partition, part) if results else []
            count_outputs(self.sensor, name, partition, part)
            if len(failed) > mark:  # its windows whose ``result`` raised
                broken = BatchOutput(failed=failed[mark:])
                del failed[mark:]
                records.extend(to_records(op, partition, broken))
                count_outputs(self.sensor, name, partition, broken)
            await committer.send(records)
            if (self.commit_progress is not None
                    and committer.txn_age_s() >= committer.txn_span_s):
                await self.commit_progress(closing.hold)
            await asyncio.sleep(0)

    def clear(self) -> None:
        """Drop what is queued (the transaction is aborted)."""
        self._queue.clear()
