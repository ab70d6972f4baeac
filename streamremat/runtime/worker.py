"""The stream worker: runs an App's operators on Kafka with checkpoints and replay.

One ``Worker`` per process. It joins the App's consumer group; each source
partition assigned to it becomes a ``PartitionRunner`` (restore, replay, live),
with its own transactional producer so a zombie is fenced per partition.
Here: the lifecycle, the live loop, the commits and the shutdown; assignment,
recovery, hand-over and a partition's failures are in ``runtime/assigning.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from typing import Any

from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from streamremat.core.operator import App
from streamremat.core.topology import Stage, compile_app
from streamremat.metrics.sensor import Sensor
from streamremat.runtime import gaps, gc_tuning
from streamremat.runtime.access import AUTHORIZATION_ERRORS, access_denied, check_connection
from streamremat.runtime.assigning import PartitionOwnership
from streamremat.runtime.checkpoint_runs import CheckpointRuns
from streamremat.runtime.exceptions import KafkaAccessError, WorkerError
from streamremat.runtime.fetching import fetch_round, group_consumer
from streamremat.runtime.lifecycle import Parking, Phase, session_alive, start_producer
from streamremat.runtime.partition import PartitionRunner
from streamremat.runtime.purging import RepartitionPurger
from streamremat.runtime.raw_replay import RawTurn
from streamremat.runtime.rebalance import RebalanceListener
from streamremat.runtime.settings import Guarantee, WorkerSettings
from streamremat.runtime.topics import ensure_topics
from streamremat.state.base import CheckpointStore
from streamremat.state.exceptions import CheckpointStoreUnavailable
from streamremat.state.kafka import KafkaCheckpointConfig, KafkaCheckpointStore
from streamremat.state.rocksdb import RocksDBCheckpointStore

log = logging.getLogger("streamremat.worker")


class Worker(PartitionOwnership):
    """Runs ``app`` until stopped; ``run()`` returns the process exit code."""

    def __init__(self, app: App, settings: WorkerSettings, sensor: Sensor | None = None) -> None:
        if not app.operators:
            raise WorkerError(
                f"app {app.name!r} has no operators to run: give it some, "
                f"App({app.name!r}, [Operator(...), ...]) or app.add(operator)"
            )
        self.app = app
        self.settings = settings
        self.sensor = sensor or Sensor()
        self.group_id = settings.group_id or app.group_id
        self.runners: dict[TopicPartition, PartitionRunner] = {}
        self.topology = compile_app(app)
        self._by_topic: dict[str, list[Stage]] = {t: self.topology.on(t)
                                                  for t in self.topology.sources}
        self._lock = asyncio.Lock()
        self._stopping = asyncio.Event()
        self._consumer: Any = None
        self._shared_producer: Any = None
        self._admin: Any = None
        self._purger: RepartitionPurger | None = None
        self._checkpoints = CheckpointRuns(settings.session_timeout_ms / 1000)
        self._local: CheckpointStore | None = None
        self._replica: CheckpointStore | None = None
        self._fatal: BaseException | None = None
        self._last_commit = time.monotonic()
        self._last_gauges = 0.0
        #: assigned, paused, waiting for the loop to restore them
        self._to_recover: set[TopicPartition] = set()
        self._retention_s: dict[str, float | None] = {}
        self._parking = Parking(
            settings.retry, self.sensor, self._pause,
            lambda tp: [stage.name for stage in self._by_topic.get(tp.topic, ())],
        )
        self._joined = False  # the group has assigned partitions (maybe none) to us
        self._raw = RawTurn(self.runners, self._lock, settings.on_retention_gap, self.sensor)

    # -- lifecycle --------------------------------------------------------------

    def stop(self) -> None:
        """Ask the worker to finish its batch, commit, checkpoint and exit."""
        self._stopping.set()

    async def run(self, handle_signals: bool = True) -> int:
        """Run until ``stop()`` (or SIGTERM/SIGINT when ``handle_signals``); 0 on a clean
        stop, 1 if shutdown overran its bound, 2 on a fatal error (logged), 3 on an
        unexpected internal error (logged with its traceback).

        After an error nothing of the failed batch is committed or checkpointed:
        every open transaction is aborted, so a restart recovers from the last
        consistent state (the committed offset and the checkpoints below it)."""
        if handle_signals:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    loop.add_signal_handler(sig, self.stop)
        tuned_gc = self.settings.tune_gc
        if tuned_gc:  # undone in the finally below, even when _start or _shutdown fails
            gc_tuning.start()
        try:
            await self._start()
            await self._loop()
        except Exception as exc:
            self._fail(exc)
        finally:
            try:
                clean = await self._shutdown()
            finally:
                if tuned_gc:
                    gc_tuning.stop()
        if self._fatal is not None:
            return 2 if isinstance(self._fatal, WorkerError) else 3
        return 0 if clean else 1

    def _fail(self, exc: Exception) -> None:
        """Stop on ``exc`` (called in its ``except``): ``run`` returns 2 for a
        ``WorkerError`` or a denied ACL, 3 for anything else, and the first error wins."""
        if isinstance(exc, WorkerError):
            log.error("%s", exc)
        elif isinstance(exc, AUTHORIZATION_ERRORS):  # e.g. the group, raised by the consumer
            exc = KafkaAccessError(access_denied(exc, self.settings.client,
                                                 "consuming the sources"))
            log.error("%s", exc)
        else:  # a bug, not bad input (that goes to the dead letters)
            log.exception("internal error: %r; stopping without committing or checkpointing "
                          "the failed batch", exc)
        if self._fatal is None:
            self._fatal = exc
        self._stopping.set()

    async def _start(self) -> None:
        s = self.settings
        client = s.client
        # The local store first: a state dir held by another worker fails fast.
        os.makedirs(s.state_dir, exist_ok=True)
        try:
            self._local = RocksDBCheckpointStore(
                os.path.join(s.state_dir, f"{self.app.name}.rocksdb")
            )
        except CheckpointStoreUnavailable as exc:
            raise WorkerError(str(exc)) from exc
        await check_connection(client)
        made = await ensure_topics(self.app, self.settings, self.topology, self._by_topic)
        self._checkpoint_partitions = made.checkpoint_partitions
        self._retention_s.update(made.retention_s)
        if s.checkpoints.replicate:
            replica = await KafkaCheckpointStore.open(
                client, self.app.checkpoint_topic,
                KafkaCheckpointConfig(partitions=self._checkpoint_partitions),
            )
            await replica.ensure_topic()
            self._replica = replica
        if s.guarantee is Guarantee.AT_LEAST_ONCE:
            self._shared_producer = await start_producer(client)
        self._consumer = group_consumer(s, self.group_id)
        self._admin = AIOKafkaAdminClient(**client.admin_kwargs())
        await self._admin.start()
        self._purger = RepartitionPurger(self._admin, self.topology.repartition_topics)
        self._consumer.subscribe(sorted(self._by_topic), listener=RebalanceListener(
            self._on_revoked, self._on_assigned, self._fail))
        await self._consumer.start()
        log.info(
            "worker %s started: app %s, group %s, topics %s, guarantee %s",
            s.worker_id, self.app.name, self.group_id, ", ".join(sorted(self._by_topic)),
            s.guarantee.value,
        )

    # -- the live loop ----------------------------------------------------------

    async def _loop(self) -> None:
        consumer = self._consumer
        s = self.settings
        while not self._stopping.is_set() and self._fatal is None:
            self.sensor.on_loop(session_alive(consumer), self._joined)
            if self._parking.backoff:
                self._to_recover.update(self._parking.due(time.monotonic()))
            if self._to_recover:
                async with self._lock:
                    await self._recover_assigned()
            try:
                fetched = await fetch_round(consumer, s.max_batch_records, raw=self._raw)
            except gaps.POSITION_ERRORS as exc:  # never reset: see runtime/gaps.py
                async with self._lock:
                    await gaps.position_error(self._consumer, self.runners, exc,
                                              s.on_retention_gap, self.sensor)
                continue
            async with self._lock:
                if self._fatal is not None:
                    break
                await self._process(fetched.batches, fetched.full)
                if isinstance(fetched.error, gaps.POSITION_ERRORS):
                    await gaps.position_error(self._consumer, self.runners, fetched.error,
                                              s.on_retention_gap, self.sensor)
                elif fetched.error is not None:
                    raise fetched.error
                # Commit every interval; exactly-once also when a round comes back empty
                # (caught up): its outputs are invisible until the commit, so they need
                # not wait out the interval. At-least-once outputs are visible at once.
                if (time.monotonic() - self._last_commit >= s.commit_interval_s
                        or (not fetched.batches and s.guarantee is Guarantee.EXACTLY_ONCE)):
                    await self._commit_all()
                if time.monotonic() - self._last_gauges >= 1.0:
                    self._report_gauges()
            # getmany returns buffered records without suspending; during a replay
            # nothing else awaits, so yield or the heartbeat task starves and the
            # group evicts this worker.
            await asyncio.sleep(0)

    async def _process(self, batches: dict[TopicPartition, list[Any]], backlogged: bool) -> None:
        started = time.monotonic()
        await self._reap(wait=False)  # so that a finished commit's partition flushes again
        await self._checkpoints.reap(self._consumer, self.runners)
        firsts = {tp: records[0].offset for tp, records in batches.items() if records}
        await gaps.check_jumps(self._consumer, self.runners, firsts,
                               self.settings.on_retention_gap, self.sensor)
        for tp, records in batches.items():
            runner = self.runners.get(tp)
            if runner is None or runner.phase not in (Phase.REPLAYING, Phase.LIVE):
                continue  # fetched before a revocation: the new owner replays it
            runner.process(records)
            for name in runner.names:
                self.sensor.on_records_in(name, tp.partition, len(records))
        for tp, runner in list(self.runners.items()):
            if runner.phase is Phase.REPLAYING and tp not in batches:
                position = await self._consumer.position(tp)
                if position >= runner.replay_until > runner.position:  # past markers only?
                    await gaps.check_jumps(self._consumer, self.runners, {tp: position},
                                           self.settings.on_retention_gap, self.sensor)
                runner.reached_replay_end(position)
            if runner.phase is Phase.LIVE:
                await self._guard(runner, runner.flush())
        if batches:
            busy = time.monotonic() - started
            total = sum(len(r) for r in batches.values())
            for tp, records in batches.items():
                runner = self.runners.get(tp)
                if runner is None:
                    continue
                share = busy * len(records) / total
                runner.batch_done(len(records), share, backlogged)
                for name in runner.names:
                    self.sensor.on_batch(name, tp.partition, len(records), share)

    def _report_gauges(self) -> None:
        self._last_gauges = time.monotonic()
        for tp, runner in self.runners.items():
            runner.observe_source(highwater := self._consumer.highwater(tp))
            runner.report_gauges(highwater)

    async def _commit_all(self) -> None:
        """Commit every live partition (outputs + offsets), then checkpoint the due ones.

        Only a partition that has just committed may checkpoint: its state is then
        exactly at its committed offset, and the commit proved this worker still owns
        it (a worker frozen past its session timeout is fenced by the commit instead
        of writing a checkpoint for a partition it lost). So a partition due for a
        checkpoint commits here, with the loop held, then checkpoints in the background,
        paused (``CheckpointRuns``); the others commit in the background."""
        self._last_commit = time.monotonic()
        await self._reap(wait=True)  # at most one commit in flight per partition
        # Also one idle since its last records committed while no checkpoint was due (the
        # rest of a partial round): it commits its offset again (proves ownership).
        runners = [r for r in self.runners.values() if r.tp not in self._checkpoints
                   and (r.has_uncommitted or r.checkpoint_lags())]
        due = [r for r in runners if r.checkpoint_due()]
        for runner in runners:
            if runner not in due:
                runner.start_commit(self._consumer)
        if not due:
            return
        started = time.monotonic()
        await asyncio.gather(*(self._guard(r, r.commit(self._consumer, prove_ownership=True))
                               for r in due))
        self.sensor.on_commit(time.monotonic() - started)
        for runner in due:
            if self.runners.get(runner.tp) is not runner or runner.has_uncommitted:
                continue  # failed, fenced or dropped during the commit
            self._parking.committed(runner.tp)
            if self._fatal is None and runner.phase is Phase.LIVE:
                self._checkpoints.start(runner, self._consumer, self._purger)

    async def _reap(self, wait: bool) -> None:
        """Finish the background commits done (all with ``wait``); a failed one like
        any commit (``_guard``)."""
        for runner in list(self.runners.values()):
            task = runner.committing
            if task is None or not (wait or task.done()):
                continue
            runner.committing = None
            await self._guard(runner, task)
            if self.runners.get(runner.tp) is runner:
                self._parking.committed(runner.tp)
                self.sensor.on_commit(runner.commit_s)

    # -- shutdown ---------------------------------------------------------------

    async def _shutdown(self) -> bool:
        """Commit and checkpoint every partition, then stop the clients, in bounded time."""
        timeout = self.settings.shutdown_timeout_s
        clean = True
        try:
            async with asyncio.timeout(timeout):
                async with self._lock:
                    if self._fatal is None:
                        await self._hand_over(list(self.runners))
                    await self._checkpoints.settle()  # the dropped partitions' too
                    for tp in list(self.runners):
                        # After a fatal error the runners' state may be ahead of what
                        # committed: drop their open transactions, commit nothing.
                        await self.runners[tp].abort()
                        await self._drop(tp)
        except TimeoutError:
            log.error("shutdown did not finish within %.0f s", timeout)
            clean = False
        for closer in (self._consumer, self._shared_producer, self._admin, self._replica,
                       self._local):
            if closer is None:
                continue
            try:
                async with asyncio.timeout(max(1.0, timeout / 4)):
                    await (closer.stop() if hasattr(closer, "stop") else closer.close())
            except Exception as exc:
                log.warning("closing %s failed: %s", type(closer).__name__, exc)
        log.info("worker %s stopped%s", self.settings.worker_id, "" if clean else " (unclean)")
        return clean
