"""The replay's record reader: a replaying partition's fetched record sets folded
natively, without aiokafka's per-record ``ConsumerRecord`` (issue 15: replay of a
backlog >= 2x live).

A replay reads every record through aiokafka like live, so it ran at most at raw
consumption speed, which live already nears: building a ``ConsumerRecord`` is
most of what a record costs there. aiokafka's fetcher keeps fetching (its
prefetch, leaders, retries and errors are untouched); this reader takes what it
buffered for a replaying partition before ``getmany`` unpacks it, and hands the
bytes to ``streamremat_native.RawRecords``, which walks the batches as aiokafka's
``PartitionRecords`` does (aborted transactions, control batches, the fetch
position) and which ``Folder.fold_raw`` folds (``PartitionTasks.replay_raw``).

aiokafka's C ``MemoryRecords`` does not expose its bytes, so the fetcher's client
is wrapped (``_Capture``) to keep the record set of the latest fetch response per
partition; a buffered fetch is taken only when that record set is provably its
own (same fetch offset, same size, not consumed from).

One round (``RawReplay.take``), per partition whose replay can take record sets
(``PartitionTasks.raw_replayable``: every task has a native fold, nothing to
recompute) and whose buffered fetch is fresh:

1. Parse the record set up to the replay's end (the committed offset).
2. Fold it into every task. A task's decline (a record the native fold can't
   prove clean: the general path must find it and say why) leaves the fetch to
   ``getmany`` untouched: its records then go through ``process`` as today.
3. If the parser took every batch, move the consumer's position past them as
   aiokafka would and drop the fetch; else (the replay's end, a compressed batch,
   an older magic, anything aiokafka would raise on) leave aiokafka the rest,
   from the batch where the parser stopped, with the aborted transactions still
   to apply there: ``getmany`` then gives exactly the records (or the error) it
   would have given for them, and ``process`` takes them (live from the end on).

``STREAMREMAT_NATIVE=0``, no native build, or an aiokafka whose internals differ:
no reader, the replay reads records as before.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any, NamedTuple

from aiokafka import TopicPartition

from streamremat.core import fastpath
from streamremat.runtime import gaps
from streamremat.runtime.settings import GapPolicy

log = logging.getLogger("streamremat.replay")

try:  # aiokafka's internals this reader relies on (checked again in ``install``)
    from aiokafka.consumer.fetcher import FetchResult, PartitionRecords
    from aiokafka.record.memory_records import MemoryRecords
except ImportError:  # pragma: no cover - another aiokafka layout
    FetchResult = PartitionRecords = MemoryRecords = None

_FETCH_API_KEY = 1
_READ_COMMITTED = 1

#: False: no reader for workers started from now on (the benchmarks' A/B switch)
enabled = True


class _Capture:
    """The fetcher's client, keeping per partition (fetch offset, record set) of the
    latest fetch response without an error: the very bytes aiokafka's records hold
    while buffered; ``RawReplay.owned`` drops those of partitions it does not take,
    each round, so none is held long past its consumption."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.record_sets: dict[TopicPartition, tuple[int, bytes]] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    async def send(self, node_id: int, request: Any, **kwargs: Any) -> Any:
        response = await self._client.send(node_id, request, **kwargs)
        if getattr(request, "API_KEY", None) == _FETCH_API_KEY and response is not None:
            offsets = {(t, p): o for t, parts in request.topics for p, o, *_ in parts}
            for topic, parts in response.topics:
                for partition, error_code, _highwater, *data in parts:
                    tp = TopicPartition(topic, partition)
                    if error_code == 0 and (topic, partition) in offsets and data:
                        self.record_sets[tp] = (offsets[(topic, partition)], data[-1])
                    else:
                        self.record_sets.pop(tp, None)
        return response


class Parsed(NamedTuple):
    tp: TopicPartition
    fetch: Any
    data: bytes
    raw: Any


class RawReplay:
    """The native record reader of one worker's consumer (see the module doc)."""

    def __init__(self, fetcher: Any, capture: _Capture, raw_records: Any) -> None:
        self._fetcher = fetcher
        self._capture = capture
        self._parse = raw_records.parse
        #: partitions whose current fetch was left to aiokafka (until it is consumed)
        self._left: dict[TopicPartition, Any] = {}

    @staticmethod
    def available() -> bool:
        """Whether the native build has the reader and it is not turned off."""
        native = fastpath.native_module
        return (getattr(native, "RawRecords", None) is not None and enabled
                and fastpath.native_enabled and FetchResult is not None)

    @classmethod
    def install(cls, consumer: Any) -> RawReplay | None:
        """The reader for a started consumer, or None where it can't run (no native
        build, ``STREAMREMAT_NATIVE=0``, aiokafka internals not as expected)."""
        if not cls.available():
            return None
        raw_records = fastpath.native_module.RawRecords  # type: ignore[union-attr]
        fetcher = getattr(consumer, "_fetcher", None)
        needed = ("_records", "_client", "_notify", "_wait_consume_future",
                  "_create_fetch_waiter")
        if fetcher is None or not all(hasattr(fetcher, n) for n in needed):
            log.info("the native replay reader is off: aiokafka's fetcher is not as expected")
            return None
        capture = _Capture(fetcher._client)
        fetcher._client = capture
        return cls(fetcher, capture, raw_records)

    def owned(self, runners: Mapping[TopicPartition, Any]) -> set[TopicPartition]:
        """The partitions whose fetches this reader takes: ``getmany`` must leave them."""
        records = self._fetcher._records
        for tp in [tp for tp, fetch in self._left.items() if records.get(tp) is not fetch]:
            del self._left[tp]
        owned = set()
        for tp, runner in runners.items():
            if tp in self._left or not runner.raw_replayable:
                continue
            fetch = records.get(tp)
            if fetch is not None and type(fetch) is not FetchResult:
                self._left[tp] = fetch  # an error (e.g. out of range): getmany raises it
                continue
            owned.add(tp)
        for tp in [tp for tp in self._capture.record_sets if tp not in owned]:
            del self._capture.record_sets[tp]
        return owned

    def parse(self, runners: Mapping[TopicPartition, Any]) -> list[Parsed]:
        """Step 1 for every owned partition with a fresh fetch."""
        out: list[Parsed] = []
        records = self._fetcher._records
        for tp in self.owned(runners):
            fetch = records.get(tp)
            if fetch is None:
                continue
            parts = fetch._partition_records
            got = self._capture.record_sets.get(tp)
            if (parts is None or got is None or not fetch.check_assignment(tp)
                    or got[0] != parts.next_fetch_offset
                    or len(got[1]) != parts._records.size_in_bytes()):
                self._left[tp] = fetch  # not provably this fetch's bytes: aiokafka reads it
                continue
            offset, data = got
            raw = self._parse(data, offset, runners[tp].replay_until,
                              list(parts._aborted_transactions),
                              parts._isolation_level == _READ_COMMITTED, bool(parts._check_crcs))
            out.append(Parsed(tp, fetch, data, raw))
        return out

    def fold(self, parsed: list[Parsed], runners: Mapping[TopicPartition, Any]
             ) -> dict[TopicPartition, int]:
        """Steps 2-3; return how many records each partition folded."""
        done: dict[TopicPartition, int] = {}
        for p in parsed:
            runner = runners.get(p.tp)
            if (runner is None or self._fetcher._records.get(p.tp) is not p.fetch
                    or not p.fetch.check_assignment(p.tp) or not runner.replay_raw(p.raw)):
                self._left[p.tp] = p.fetch
                continue
            del self._capture.record_sets[p.tp]
            done[p.tp] = len(p.raw)
            self._consume(p)
        return done

    def _consume(self, p: Parsed) -> None:
        """Step 3: the consumer's position past what was folded; the rest to aiokafka."""
        tp, fetch, raw = p.tp, p.fetch, p.raw
        parts = fetch._partition_records
        state = fetch._assignment.state_value(tp)
        if raw.handover is None:
            state.consumed_to(raw.next_offset)
            del self._fetcher._records[tp]
            self._fetcher._notify(self._fetcher._wait_consume_future)
            return
        at, position, aborted = raw.handover
        fetch._partition_records = PartitionRecords(
            tp, MemoryRecords(p.data[at:]), aborted, position, parts._key_deserializer,
            parts._value_deserializer, parts._check_crcs, parts._isolation_level)
        state.consumed_to(position)
        self._left[tp] = fetch

    async def wait(self, timeout_s: float) -> None:
        """Until the fetcher buffers something new (or ``timeout_s``)."""
        waiter = self._fetcher._create_fetch_waiter()
        await asyncio.wait([waiter], timeout=timeout_s)
        if not waiter.done():
            waiter.cancel()


async def replay_round(reader: RawReplay, consumer: Any, runners: Mapping[TopicPartition, Any],
                       policy: GapPolicy, sensor: Any) -> bool:
    """One round of the reader (the caller holds the worker's lock): parse, check
    the first record of each against the partition's position as a batch of
    records is checked (``gaps.check_jumps``), fold; True if it folded records."""
    started = time.monotonic()
    parsed = reader.parse(runners)
    if not parsed:
        return False
    firsts = {p.tp: first for p in parsed if (first := p.raw.first_offset()) is not None}
    await gaps.check_jumps(consumer, runners, firsts, policy, sensor)
    done = reader.fold(parsed, runners)
    total = sum(done.values())
    busy = time.monotonic() - started
    for tp, n in done.items():
        runner = runners[tp]
        share = busy * n / total if total else 0.0
        runner.batch_done(n, share, True)
        for name in runner.names:
            sensor.on_records_in(name, tp.partition, n)
            sensor.on_batch(name, tp.partition, n, share)
    return bool(done)


class RawTurn:
    """The reader's part of the worker's fetch round (``fetching.fetch_round``): the
    worker's partitions and lock; the reader is installed on the consumer at the
    first turn (the consumer is started by then)."""

    def __init__(self, runners: Mapping[TopicPartition, Any], lock: asyncio.Lock,
                 policy: GapPolicy, sensor: Any) -> None:
        self._runners = runners
        self._lock = lock
        self._policy = policy
        self._sensor = sensor
        self._reader: RawReplay | None = None
        self._installed = False

    async def turn(self, consumer: Any) -> tuple[bool, set[TopicPartition]]:
        """One round (under the lock): whether it folded records, and the partitions
        ``getmany`` must leave to the reader."""
        if not self._installed:
            self._installed = True
            self._reader = RawReplay.install(consumer)
        reader = self._reader
        if reader is None or not reader.owned(self._runners):
            return False, set()
        async with self._lock:
            took = await replay_round(reader, consumer, self._runners, self._policy,
                                      self._sensor)
            return took, reader.owned(self._runners)

    async def wait(self, timeout_s: float) -> None:
        if self._reader is not None:
            await self._reader.wait(timeout_s)
