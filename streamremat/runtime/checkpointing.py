"""Writing one partition's checkpoints: locally first, then to the replica topic."""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from streamremat.core.task import Task
from streamremat.metrics.sensor import Sensor
from streamremat.runtime.scheduling import CheckpointScheduler, with_plan
from streamremat.runtime.settings import CheckpointSettings
from streamremat.state.base import CheckpointStore
from streamremat.state.frame import CheckpointFrame, FrameKind, TaskId
from streamremat.tuning.plan_summary import PlanSummary
from streamremat.tuning.remat import RematPlan

log = logging.getLogger("streamremat.worker")

#: A checkpoint seq is (owner epoch << EPOCH_BITS) | count within the epoch.
EPOCH_BITS = 32


def seq_epoch(seq: int) -> int:
    """The owner epoch a checkpoint seq belongs to."""
    return seq >> EPOCH_BITS


def owner_epoch(visible_next_seq: int, committed_epoch: int | None) -> int:
    """The seq epoch of a task's new owner: above every epoch it can rule out.

    ``committed_epoch`` is the epoch in the group's committed offset metadata.
    Every owner commits its epoch before it writes its first checkpoint, and an
    owner that lost the partition can no longer commit (fenced producer, or old
    group generation), so the committed epoch read after taking over is the
    highest epoch any earlier owner may still write frames in, even frames that
    are not visible yet (a frozen zombie's queued write) or not reachable (the
    replica timed out at restore). ``visible_next_seq`` (one past the newest seq
    found in the stores) covers chains written before epochs were committed.
    """
    visible = (visible_next_seq + (1 << EPOCH_BITS) - 1) >> EPOCH_BITS
    committed = -1 if committed_epoch is None else committed_epoch
    return max(visible, committed + 1)


def _encode(task: Task, full: bool, recompute: Collection[int]) -> tuple[bytes, int, int]:
    """The snapshot (``recompute``: the plan's groups) and its gauges (counting the
    keys of millions of entries is not free either), in the checkpoint's worker thread."""
    return task.snapshot(full, recompute), task.open_windows(), task.open_keys()


@dataclass
class _Chain:
    """Where a task's checkpoint chain stands: the next seq, and when to write a full."""

    task_id: TaskId
    next_seq: int
    base_seq: int | None = None  # None: the next checkpoint must be full
    full_bytes: int = 0
    delta_bytes: int = 0
    written: int = 0

    def next_is_full(self, delta_ratio: float) -> bool:
        # A full once the deltas since the last one outweigh it: restore cost then
        # stays within ~2x of one full read, and bytes written stay ~ keys touched.
        return self.base_seq is None or self.delta_bytes > delta_ratio * max(self.full_bytes, 1)


class Checkpointer:
    """The checkpoint chains of one partition's tasks and the stores they go to."""

    def __init__(
        self,
        partition: int,
        settings: CheckpointSettings,
        local: CheckpointStore,
        replica: CheckpointStore | None,
        scheduler: CheckpointScheduler,
        sensor: Sensor,
    ) -> None:
        self.partition = partition
        self.settings = settings
        self.local = local
        self.replica = replica
        self.scheduler = scheduler
        self.sensor = sensor
        self.chains: list[_Chain] = []
        self._replica_tail: asyncio.Task[None] | None = None
        #: offsets of the newest checkpoints of every task, each stored in every store
        self._durable: collections.deque[int] = collections.deque(maxlen=settings.keep)
        #: a ``write`` is under way: the tasks' state must not move (step 1 of ``write``)
        self.writing = False

    def add_task(self, task_id: TaskId, next_seq: int) -> None:
        """A restored (or new) task; its first checkpoint will be a full one."""
        self.chains.append(_Chain(task_id, next_seq))

    async def write(
        self, tasks: Sequence[Task], position: int, clean: bool,
        planner: Callable[[], dict[TaskId, RematPlan]] | None = None,
        owned: Callable[[], bool] | None = None,
    ) -> dict[TaskId, RematPlan]:
        """Write one checkpoint of every task (DESIGN §5, §7, §9); return the plans.

        1. The caller guarantees the state's outputs are committed (offset <= committed)
           and folds nothing into the tasks until this returns (the worker pauses
           the partition in its consumer, ``runtime/checkpoint_runs.py``, and goes
           on with the others; the faust bridge holds its lock; ``writing`` is set
           meanwhile, and ``PartitionRunner.process`` refuses to run), so each
           checkpoint is of the state at its offset.
        2. ``planner`` gives each task's rematerialization plan (in a worker thread:
           it sizes every open group); without one everything is stored.
        3. Per task, encode a delta (dirty accumulators) or, when the chain needs
           one, a full snapshot, with offset, stream time, the clean flag, the
           tuner's state and the plan's summary; the plan's recompute groups are
           written as their first offset only. The encode runs in a worker
           thread: a full snapshot of millions of entries takes seconds, and the
           event loop (heartbeats, replica writes, the metrics endpoint) keeps
           running meanwhile, as the thread hands the GIL back every switch
           interval (``core.codec.sorted_in_runs`` keeps the one long C call of
           an encode, the key sort, short).
        4. Append it to the local RocksDB store: one WriteBatch, synced (unless
           ``owned`` says the ownership proven by the commit may be lost by now:
           then it is not written, and the chain's next checkpoint is full; lost
           during the write, it stays local only). Only then does the next commit,
           whose replay depends on it, come (the caller awaits this).
        5. Replicate it to the compacted checkpoint topic in the background, in
           order per partition; a failed write makes the next checkpoint full.
        6. Prune both stores to the last N restorable checkpoints. The purge floor
           of a checkpoint with recompute groups is ``o_min``, not its offset.
        """
        self.writing = True
        try:
            plans = await asyncio.to_thread(planner) if planner is not None else {}
            await self._write(tasks, position, clean, plans, owned)
        finally:
            self.writing = False
        return plans

    async def _write(
        self, tasks: Sequence[Task], position: int, clean: bool,
        plans: dict[TaskId, RematPlan], owned: Callable[[], bool] | None = None,
    ) -> None:
        started = time.monotonic()
        meta = self.scheduler.meta(int(time.time() * 1000))
        frames: list[CheckpointFrame] = []
        floors: list[int] = []
        for task, chain in zip(tasks, self.chains, strict=True):
            full = chain.next_is_full(self.settings.full_after_delta_ratio)
            plan = plans.get(chain.task_id)
            groups = plan.recompute if plan is not None else frozenset()
            try:
                payload, open_windows, open_keys = await asyncio.to_thread(
                    _encode, task, full, groups)
            except Exception as exc:  # an aggregation's encode raised: skip, never crash
                chain.base_seq = None  # the dirty set is gone: the next one must be full
                self.sensor.on_checkpoint_failed(task.operator.name, self.partition, "encode")
                log.error(
                    "%s: checkpoint skipped: the aggregation's encode raised %s: %s; recovery "
                    "replays from the previous checkpoint until one succeeds (fix encode for "
                    "every accumulator the aggregation can reach)",
                    chain.task_id, type(exc).__name__, exc,
                )
                continue
            seq = chain.next_seq
            frame = CheckpointFrame(
                task=chain.task_id,
                seq=seq,
                kind=FrameKind.FULL if full else FrameKind.DELTA,
                base_seq=seq if full else (chain.base_seq if chain.base_seq is not None else seq),
                offset=task.next_offset if task.next_offset is not None else position,
                stream_time_ms=task.stream_time_ms if task.stream_time_ms is not None else -1,
                clean=clean,
                meta=meta if plan is None else with_plan(meta, PlanSummary.of(plan)),
                payload=payload,
            )
            op = task.operator.name
            if owned is not None and not owned():
                chain.base_seq = None  # its dirty set is gone: the next one must be full
                log.warning("%s: checkpoint at offset %d not written: the event loop stood "
                            "still past the session timeout since the commit that proved "
                            "this worker owns the partition", chain.task_id, frame.offset)
                continue
            chain.next_seq = seq + 1
            try:
                await self.local.append(frame)
                await self.local.prune(chain.task_id, self.settings.keep)
            except Exception as exc:
                chain.base_seq = None  # the chain has a hole now: restart it with a full
                self.sensor.on_checkpoint_failed(op, self.partition, type(exc).__name__)
                log.error("%s: checkpoint seq %d failed: %s", chain.task_id, seq, exc)
                continue
            if owned is not None and not owned():
                # The process stood still during the write itself (seen: a SIGSTOP while
                # it fsynced). The frame is on this machine's disk, a state at an offset
                # this worker committed (harmless to restore from), but the partition
                # may be another worker's now: it is not replicated, and the chain's
                # next checkpoint is full.
                chain.base_seq = None
                log.warning("%s: checkpoint seq %d at offset %d kept locally only: the event "
                            "loop stood still past the session timeout while it was written",
                            chain.task_id, seq, frame.offset)
                continue
            chain.written += 1
            if full:
                chain.base_seq, chain.full_bytes, chain.delta_bytes = seq, len(payload), 0
            else:
                chain.delta_bytes += len(payload)
            frames.append(frame)
            # A restore of this frame replays from o_min when it recomputes groups.
            floors.append(min(frame.offset, task.replay_from or frame.offset))
            elapsed = time.monotonic() - started
            kind = "full" if full else "delta"
            self.sensor.on_checkpoint(op, self.partition, elapsed, len(payload),
                                      "full" if full else "incremental")
            self.sensor.on_open_windows(op, self.partition, open_windows, open_keys)
            log.info(
                "%s: checkpoint seq %d %s at offset %d: %d bytes in %.1f ms",
                chain.task_id, seq, kind, frame.offset, len(payload), elapsed * 1000,
                extra={"event": "checkpoint", "task": str(chain.task_id), "seq": seq,
                       "kind": kind, "offset": frame.offset, "bytes": len(payload),
                       "duration_s": elapsed, "clean": clean},
            )
        cost_s = time.monotonic() - started
        if frames and self.replica is not None:
            self._replica_tail = asyncio.create_task(
                self._replicate(self._replica_tail, frames, floors, started, cost_s)
            )
        elif frames:
            size = sum(len(f.payload) for f in frames)
            self.scheduler.checkpointed(time.time(), cost_s, cost_s, size)
            self._stored(frames, floors)

    async def _replicate(
        self, previous: asyncio.Task[None] | None, frames: list[CheckpointFrame],
        floors: list[int], started: float, cost_s: float,
    ) -> None:
        if previous is not None:
            await asyncio.gather(previous, return_exceptions=True)
        assert self.replica is not None
        ok = True
        for frame in frames:
            chain = next(c for c in self.chains if c.task_id == frame.task)
            try:
                await self.replica.append(frame)
                if chain.written % 10 == 0:  # a replica prune scans the partition: not every time
                    await self.replica.prune(frame.task, self.settings.keep)
            except Exception as exc:
                # Restore prefers whichever copy is newer; a stale replica only matters
                # if this machine is lost too. Restart the chain so the replica heals.
                ok = False
                chain.base_seq = None
                self.sensor.on_checkpoint_failed(frame.task.operator, self.partition,
                                                 f"replica:{type(exc).__name__}")
                log.warning("%s: replicating checkpoint seq %d failed: %s",
                            frame.task, frame.seq, exc)
        if ok:
            # L: from fixing the checkpoint's offset until the replica has it.
            self.scheduler.checkpointed(time.time(), cost_s, time.monotonic() - started,
                                        sum(len(f.payload) for f in frames))
            self._stored(frames, floors)

    def _stored(self, frames: list[CheckpointFrame], floors: list[int]) -> None:
        if len(frames) == len(self.chains):  # every task's checkpoint made it
            self._durable.append(min(floors))

    def purge_floor(self) -> int | None:
        """The source offset below which no kept checkpoint of this partition can
        restore from, or None while that is not known. A checkpoint with recompute
        groups restores from ``o_min`` (their earliest first offset), not its offset.

        Only checkpoints this owner wrote count, once ``keep`` of them are in every
        store: the stores prune to the ``keep`` newest, so the oldest of those is
        the oldest a restore (or its fallback to an older checkpoint) may use."""
        if len(self._durable) < self.settings.keep:
            return None
        return self._durable[0]

    async def drain(self, timeout_s: float) -> None:
        """Wait for background replica writes (on revocation and shutdown)."""
        if self._replica_tail is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._replica_tail), timeout_s)
            except TimeoutError:
                log.warning("partition %d: replica writes still pending after %.0f s",
                            self.partition, timeout_s)
