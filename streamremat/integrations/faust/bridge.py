"""Runs streamremat operators inside a faust app: the source topics' records come
in batches from faust's fetch (``transport.Consumer.getmany`` -> ``Bridge.feed``)
to the partitions' tasks; faust keeps the consumer, the group and the commits.

Per assigned source partition a ``FaustPartition`` (the worker's
``PartitionRunner``: same restore, replay, checkpoints and tuner) holds the
tasks. The guarantee is at-least-once with deterministic duplicates (see
``docs/faust.md``): outputs are acknowledged by Kafka before their input events
are acked, and faust commits only acked offsets.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import logging
import os
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from mode.utils.futures import notify

from streamremat.core.exceptions import ConfigError
from streamremat.core.operator import App, Operator
from streamremat.core.records import BatchOutput
from streamremat.core.repartition import Repartitioner
from streamremat.core.task import Task
from streamremat.core.topology import Stage, compile_app
from streamremat.integrations.faust.outputs import output_slices, result_records
from streamremat.metrics.sensor import Sensor
from streamremat.runtime.kafka import TopicSpec, create_topics, retention_s, topic_config
from streamremat.runtime.kafka import topic_partitions as partitions_of
from streamremat.runtime.lifecycle import Phase, session_alive
from streamremat.runtime.partition import PartitionRunner
from streamremat.runtime.recovery_report import count_outputs
from streamremat.runtime.scheduling import CheckpointScheduler
from streamremat.runtime.settings import WorkerSettings
from streamremat.state.base import CheckpointStore
from streamremat.state.kafka import KafkaCheckpointConfig, KafkaCheckpointStore
from streamremat.state.rocksdb import RocksDBCheckpointStore

log = logging.getLogger("streamremat.worker")

try:  # faust's lock around its ack bookkeeping (faust-streaming 0.15.3)
    from faust.types.tuples import ack_lock as _ack_lock
except ImportError:  # older 0.15.x: acks are not locked there either
    _ack_lock = threading.RLock()


class FaustPartition(PartitionRunner):
    """A ``PartitionRunner`` whose offsets faust commits: outputs are delivered
    (awaited) per batch, and a checkpoint follows a faust commit at its position."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: a batch's outputs, built and sent by ``deliver``
        self._outputs: collections.deque[tuple[Operator, BatchOutput]] = collections.deque()

    def emit(self, outputs: Sequence[tuple[Task | Repartitioner, BatchOutput]]) -> None:
        """The worker's delivery tail, with the idempotency header on each result
        (``result_records``); no repartition stage runs here (``Bridge`` refuses them).
        Nothing is built yet: ``deliver`` builds a closing's results a slice at a
        time, as the worker's emitter does (``runtime/emitting.py``)."""
        for task, out in outputs:
            if out.results or out.dead_letters or out.late or out.failed:
                self._outputs.append((task.operator, out))

    async def deliver(self) -> None:
        """Build and send the batch's outputs, the event loop turning after each
        slice of a closing over many keys, and wait until Kafka has them all: only
        then may faust ack (and so commit) the input events."""
        partition = self.tp.partition
        while self._outputs:
            op, out = self._outputs.popleft()
            for part in output_slices(out):
                records = result_records(op, partition, part)
                count_outputs(self.sensor, op.name, partition, part)
                await self.committer.send(records)
                await asyncio.sleep(0)
        await self.committer.acked()

    def committed_at(self, offset: int | None) -> None:
        """faust committed ``offset`` for this partition."""
        if offset is not None:
            self.committed = offset
            # Checkpoints may follow: a successor's epoch is above every seq it sees.
            self._epoch_committed = True


class _Positioner:
    """What ``PartitionRunner.recover`` needs of a consumer: the source's offsets
    (log start; end and time index, which seed the retention bound of the
    rematerialization plans as in the worker) from ``offsets``, the bridge's own
    client, and a seek that is only noted, then made through faust's own
    ``Consumer.seek``. Listing offsets through faust's consumer took ~1.5 s a
    partition (its consumer thread, mid-rebalance), one restore after the other."""

    def __init__(self, offsets: Any) -> None:
        self.offsets = offsets
        self.seeks: dict[TopicPartition, int] = {}

    async def beginning_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return dict(await self.offsets.beginning_offsets(tps))

    async def end_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return dict(await self.offsets.end_offsets(tps))

    async def offsets_for_times(self, timestamps: dict[TopicPartition, int]) -> Any:
        return await self.offsets.offsets_for_times(timestamps)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.seeks[tp] = offset


class Bridge:
    """The operators of one streamremat ``App`` attached to one faust app."""

    def __init__(self, faust_app: Any, app: App, settings: WorkerSettings,
                 sensor: Sensor) -> None:
        topology = compile_app(app)
        if topology.repartition_topics:
            rekeyed = sorted(op.name for op in app.operators.values() if op.key_by is not None)
            raise ConfigError(
                f"app {app.name!r}: operator(s) {', '.join(rekeyed)} re-key with key_by, "
                "which needs a repartition topic and its second stage; the faust "
                "integration does not run those. Either re-key in faust (an agent that "
                "sends each record to a topic with key=<the key_by value>) and attach "
                "the operator to that topic without key_by, or run the re-keying "
                "operators with `streamremat worker` (docs/faust.md, Limits)"
            )
        self.faust_app = faust_app
        self.app = app
        self.settings = settings
        self.sensor = sensor
        self.group_id = str(faust_app.conf.id)
        self.by_topic: dict[str, list[Stage]] = {
            topic: topology.on(topic) for topic in topology.sources
        }
        self.topology = topology
        self.runners: dict[TopicPartition, FaustPartition] = {}
        self.lock = asyncio.Lock()
        self._started = False
        self._producer: Any = None
        #: the bridge's own consumer outside any group, for offset lists (``_Positioner``)
        self._offsets: Any = None
        self._local: CheckpointStore | None = None
        self._replica: CheckpointStore | None = None
        self._retention_s: dict[str, float | None] = {}
        self._last_commit = time.monotonic()
        self._last_gauges = 0.0
        #: False from a revocation until ``rewind`` has sought the partitions back
        self.assigned = False
        #: per partition, the (position, offset) of the last gap sought back over
        self._gaps: dict[TopicPartition, tuple[int, int]] = {}

    # -- start ------------------------------------------------------------------

    async def _start(self) -> None:
        """Local store, topics, replica, producer and offsets client; at the first
        assignment, so a
        faust app that never gets a partition never touches them."""
        s, client = self.settings, self.settings.client
        os.makedirs(s.state_dir, exist_ok=True)
        self._local = RocksDBCheckpointStore(os.path.join(s.state_dir, f"{self.app.name}.rocksdb"))
        specs: list[TopicSpec] = []
        max_parts = 1
        for stage in self.topology.stages:
            parts = len(await partitions_of(client, stage.source))
            max_parts = max(max_parts, parts)
            specs.extend(TopicSpec(t, parts) for t in stage.outputs)
        if s.checkpoints.replicate:
            specs.append(TopicSpec(self.app.checkpoint_topic, max_parts,
                                   KafkaCheckpointConfig(partitions=max_parts).topic_config()))
        await create_topics(client, list({x.name: x for x in specs}.values()),
                            replication=s.replication)
        for topic in self.by_topic:
            self._retention_s[topic] = retention_s(await topic_config(client, topic))
        if s.checkpoints.replicate:
            replica = await KafkaCheckpointStore.open(
                client, self.app.checkpoint_topic, KafkaCheckpointConfig(partitions=max_parts)
            )
            await replica.ensure_topic()
            self._replica = replica
        self._producer = AIOKafkaProducer(
            acks="all", enable_idempotence=True,
            **client.producer_kwargs(linger_ms=5, max_batch_size=256 * 1024),
        )
        await self._producer.start()
        self._offsets = AIOKafkaConsumer(group_id=None, enable_auto_commit=False,
                                         **client.consumer_kwargs())
        await self._offsets.start()
        self._started = True

    # -- recovery ---------------------------------------------------------------

    async def rewind(self, consumer: Any) -> None:
        """Restore every assigned source partition and seek it back for the replay.

        Runs right after faust's ``perform_seek`` put every partition at its
        committed offset ``k`` (``transport.Consumer``):

        1. Drop the runners of the previous assignment: faust just moved their
           partitions back to ``k``, so their state (ahead of ``k``) is stale (one
           still replaying starts over from its checkpoint). Without a source
           partition now, stop here: the stores, topics and producer wait for one.
        2. Per assigned source partition: ``PartitionRunner.recover`` with ``k`` as
           faust read it (faust ignores acks below it, so the replay's events never
           move the commit): newest valid checkpoint from RocksDB or the replica,
           replay bounds ``[c, k)``.
        3. ``Consumer.seek(tp, c)``: faust's own seek, so its read offset allows the
           records below ``k`` again. ``feed`` replays them without output, then
           goes live at ``k``.
        """
        async with self.lock:
            assigned = sorted((tp for tp in consumer.assignment() if tp.topic in self.by_topic),
                              key=lambda tp: (tp.topic, tp.partition))
            if self.runners:
                log.info("revoked: %s", ", ".join(f"{tp.topic}[{tp.partition}]"
                                                  for tp in self.runners))
            for tp in list(self.runners):
                runner = self.runners.pop(tp)
                if runner.phase is Phase.REPLAYING:
                    log.info("%s[%d]: revoked while replaying, at offset %d of [%d, %d); "
                             "its next owner replays from its checkpoint", tp.topic,
                             tp.partition, runner.position, runner.report.start_offset
                             if runner.report else runner.position, runner.replay_until)
                await runner.close()
                for name in runner.names:  # it left: drop its gauges (counters stay)
                    runner.sensor.on_task_revoked(name, tp.partition)
            if not assigned:
                # No partition (e.g. the source topic does not exist yet: faust logs
                # "Ignoring missing topic" and waits, and so does the bridge).
                self.assigned = True
                return
            if not self._started:
                await self._start()
            log.info("assigned: %s", ", ".join(f"{tp.topic}[{tp.partition}]" for tp in assigned))
            positioner = _Positioner(self._offsets)
            for tp in assigned:
                runner = self._runner(TopicPartition(tp.topic, tp.partition))
                committed = consumer._committed_offset.get(tp)  # what faust seeked to

                async def fetch(_tp: TopicPartition, k: int | None = committed
                                ) -> tuple[int | None, str]:
                    return k, ""

                await runner.recover(positioner, fetch)
                await _seek(consumer, tp, positioner.seeks[runner.tp])
                self.runners[runner.tp] = runner
            self.assigned = True

    def revoking(self) -> None:
        """faust is about to revoke partitions (see ``feed``)."""
        self.assigned = False

    def _runner(self, tp: TopicPartition) -> FaustPartition:
        s = self.settings
        assert self._local is not None
        return FaustPartition(
            tp, self.by_topic[tp.topic], settings=s, group_id=self.group_id,
            producer=self._producer, local=self._local, replica=self._replica,
            scheduler=CheckpointScheduler(s.checkpoints, s.session_timeout_ms / 1000),
            sensor=self.sensor, retention_s=self._retention_s.get(tp.topic),
        )

    # -- the records --------------------------------------------------------------

    async def feed(self, consumer: Any, fetched: Mapping[Any, Sequence[Any]],
                   generation: int | None) -> None:
        """One fetch of the source topics' records, aiokafka's records per partition
        (offset order) from the transport's ``getmany`` (``transport.Consumer``), in
        place of faust's per-message path (a ``Message`` each, conductor, channel
        queue, stream, one ack each): processed in steps of at most
        ``max_batch_records`` (a fetch holds up to a fetch size per partition),
        shared among the fetched partitions; outputs delivered, the records acked in
        bulk; a commit and checkpoints when due after each step. ``generation`` is
        faust's consumer generation at the fetch. Also called without records, so
        idle partitions checkpoint too."""
        self.loop_went_round(consumer)
        step = self.settings.max_batch_records
        todo = {tp: recs for tp, recs in fetched.items() if recs}
        at = dict.fromkeys(todo, 0)
        while todo:
            share = -(-step // len(todo))
            batch = {tp: recs[at[tp]:at[tp] + share] for tp, recs in todo.items()}
            for tp, recs in list(todo.items()):
                at[tp] += share
                if at[tp] >= len(recs):
                    del todo[tp]
            async with self.lock:
                # From a revocation until ``rewind`` faust has forgotten its committed
                # offsets (it would count a replay's acks), and every partition is
                # sought back then: neither process nor ack; the records come again.
                if not self.assigned:
                    return
                done = await self._process(batch, generation)
                if not self.assigned:
                    # Revoked while the outputs were sent: they may repeat (identical).
                    return
                _ack(consumer, done)
            await self._when_due()
        await self._when_due()

    def loop_went_round(self, consumer: Any) -> None:
        """What the worker's loop reports each round (``Sensor.on_loop``): the group
        session's state and whether the partitions are assigned, for the dashboard's
        session and loop panel, ``/healthz`` and ``/ready`` on the metrics port.
        Called per fetch (``feed``), and once a second while faust's flow is stopped
        (a rebalance: faust fetches nothing then, by design; ``attach``)."""
        thread = getattr(consumer, "_thread", None)
        self.sensor.on_loop(session_alive(getattr(thread, "_consumer", None)), self.assigned)

    async def _when_due(self) -> None:
        now = time.monotonic()
        if now - self._last_commit >= self.settings.commit_interval_s:
            await self._commit_and_checkpoint()
        if now - self._last_gauges >= 1.0:
            self._report_gauges()

    async def _process(self, batch: Mapping[Any, Sequence[Any]], generation: int | None
                       ) -> list[tuple[Any, int, int]]:
        """Feed the records of the current assignment to their partitions; return,
        per partition, the offsets ``[start, end)`` whose outputs Kafka now has (those
        may be acked).
        Records fetched before the last rebalance or below a partition's position
        (fetched before a seek back) are neither processed nor acked: they come
        again, or came. aiokafka's records go to the engine as they are (they have
        what ``SourceRecord`` needs), as in the worker."""
        started = time.monotonic()
        done: list[tuple[Any, int, int]] = []
        taken: list[tuple[FaustPartition, int]] = []
        if generation != self.faust_app.consumer_generation_id:
            batch = {}
        for tp, msgs in batch.items():
            runner = self.runners.get(tp)
            if runner is None:
                continue
            position = runner.position
            if msgs[0].offset < position:  # offset order: skip what was processed
                msgs = msgs[bisect.bisect_left(msgs, position, key=_offset):]
                if not msgs:
                    continue
            first = msgs[0].offset
            if first > position and self._gaps.get(tp) != (position, first):
                # A seek raced a fetch in flight during the rebalance: read the records
                # below again. Seen twice, the gap is real (transaction markers) and
                # is taken.
                log.warning("%s[%d]: got offset %d at position %d; seeking back",
                            tp.topic, tp.partition, first, position)
                self._gaps[tp] = (position, first)
                await _seek(self.faust_app.consumer, tp, position)
                continue
            runner.process(msgs)
            for name in runner.names:
                self.sensor.on_records_in(name, tp.partition, len(msgs))
            done.append((tp, position, msgs[-1].offset + 1))
            taken.append((runner, len(msgs)))
        for runner in self.runners.values():
            await runner.deliver()
        busy = time.monotonic() - started
        total = sum(n for _, n in taken)
        backlogged = total >= self.settings.max_batch_records
        for runner, n in taken:
            share = busy * n / total
            runner.batch_done(n, share, backlogged)
            for name in runner.names:
                self.sensor.on_batch(name, runner.tp.partition, n, share)
        return done

    async def _commit_and_checkpoint(self) -> None:
        """Checkpoint the due partitions at an offset faust has committed.

        1. Ask faust to commit the acked offsets of the due partitions now.
        2. A partition whose committed offset (as faust recorded it) equals its
           position checkpoints (``PartitionRunner.checkpoint``): its state is then
           exactly at the committed offset, so the checkpoint is never beyond what
           a successor reads as committed. Others try again after the next batch.
        """
        self._last_commit = time.monotonic()
        due = [r for r in self.runners.values() if r.checkpoint_due()]
        if not due:
            return
        consumer = self.faust_app.consumer
        started = time.monotonic()
        await consumer.commit({r.tp for r in due})
        self.sensor.on_commit(time.monotonic() - started)
        async with self.lock:
            for runner in due:
                if self.runners.get(runner.tp) is not runner:
                    continue  # revoked meanwhile
                committed = consumer._committed_offset.get(runner.tp)
                if committed == runner.position:
                    runner.committed_at(committed)
                    await runner.checkpoint()

    async def close(self) -> None:
        """On shutdown, after faust's last commit: checkpoint every partition that is
        exactly at its committed offset (a clean checkpoint: the next owner
        restores without replay), then close the stores and the producer."""
        consumer = self.faust_app.consumer
        async with self.lock:
            for runner in list(self.runners.values()):
                committed = consumer._committed_offset.get(runner.tp)
                if runner.phase is Phase.LIVE and committed == runner.position:
                    runner.committed_at(committed)
                    try:
                        await runner.checkpoint(clean=True)
                        await runner.drain_replica(self.settings.shutdown_timeout_s / 2)
                    except Exception as exc:  # the next owner replays from an older one
                        log.warning("%s[%d]: shutdown checkpoint failed: %r",
                                    runner.tp.topic, runner.tp.partition, exc)
                await runner.close()
            self.runners.clear()
            for closer in (self._producer, self._offsets, self._replica, self._local):
                if closer is None:
                    continue
                try:
                    await (closer.stop() if hasattr(closer, "stop") else closer.close())
                except Exception as exc:
                    log.warning("closing %s failed: %r", type(closer).__name__, exc)
            self._started = False

    def _report_gauges(self) -> None:
        self._last_gauges = time.monotonic()
        consumer = self.faust_app.consumer
        for tp, runner in self.runners.items():
            try:
                highwater = consumer.highwater(tp)
            except Exception:  # not fetched yet
                highwater = None
            runner.observe_source(highwater)
            runner.report_gauges(highwater)


async def _seek(consumer: Any, tp: Any, offset: int) -> None:
    """faust's seek, made on faust's consumer thread. ``Consumer.seek`` calls
    aiokafka's ``seek`` from the calling thread, which deletes the partition's
    fetch buffer while the consumer thread may be iterating those buffers in
    ``Fetcher.fetched_records`` (a ``KeyError`` there ended the worker, seen in
    the two-worker fault test). ``seek_wait`` runs the seek via ``call_thread``
    and sets faust's read offset as ``seek`` does."""
    await consumer.seek_wait({tp: offset})


def _offset(m: Any) -> int:
    return int(m.offset)


def _ack(consumer: Any, done: Sequence[tuple[Any, int, int]]) -> None:
    """faust's ``Consumer.ack`` for whole batches, each ``(tp, start, end)``: the
    partition's offsets ``[start, end)`` are processed (``start`` its position
    before the batch) and become committable at once. Every offset of the range
    is acked, also those without a record (transaction markers, records removed
    by compaction): faust commits the first run of consecutive acked offsets, and
    a hole of two or more offsets would stop its commits for good. The records
    never entered faust's stream, so nothing tracks them as unacked; offsets below
    the committed one (a replay) are ignored, as ``ack`` does."""
    with _ack_lock:
        for tp, start, end in done:
            committed = consumer._committed_offset[tp]
            offsets = range(start if committed is None else max(start, committed), end)
            index = consumer._acked_index[tp]
            fresh: Sequence[int] = (offsets if index.isdisjoint(offsets)
                                    else [o for o in offsets if o not in index])
            index.update(fresh)
            consumer._acked[tp].extend(fresh)
            consumer._n_acked += len(fresh)
        notify(consumer._waiting_for_ack)
