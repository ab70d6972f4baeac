"""The faust transport that lets streamremat rewind a source partition.

faust seeks every partition to its committed offset in ``Consumer.perform_seek``,
after all public rebalance hooks have run, and drops records below its own read
offset unless the seek went through ``Consumer.seek``. So the one place to start
a replay from an older checkpoint offset is right after ``perform_seek``: this
consumer calls the original, then lets the attached operators restore their
checkpoints and seek their partitions back (``Bridge.rewind``).

Registered as the ``streamremat://`` broker scheme: ``faust.App(broker=
"streamremat://host:9092")``; everything else is faust's aiokafka transport.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any, ClassVar

from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP, ConsumerT, Message

#: ``faust.App(broker=f"{SCHEME}://host:port")``
SCHEME = "streamremat"


class Consumer(faust_aiokafka.Consumer):
    #: the attached source topics' records of the fetch in progress: the generation
    #: they were fetched in, and aiokafka's records per partition (``getmany``)
    _streamremat_fetch: tuple[int, dict[TP, list[Any]]] | None = None

    async def _wait_next_records(
        self, timeout: float
    ) -> tuple[Mapping[TP, list[Any]] | None, set[TP] | None]:
        """faust's fetch, with the attached source topics' records taken out: faust's
        ``getmany`` iterates only the other topics' records (``getmany`` below)."""
        records, active = await super()._wait_next_records(timeout)
        bridge = getattr(self.app, "_streamremat_bridge", None)
        if bridge is None or not records:
            return records, active
        mine = bridge.by_topic
        if not any(tp.topic in mine for tp in records):
            return records, active
        buffered = self._buffered_partitions
        # As faust's getmany: records of partitions it does not consume now are not
        # delivered (paused during a rebalance; fetched before it).
        taken = {tp: recs for tp, recs in records.items() if tp.topic in mine
                 and (active is None or tp in active or tp in buffered)}
        self._streamremat_fetch = (self.app.consumer_generation_id, taken)
        return {tp: recs for tp, recs in records.items() if tp.topic not in mine}, active

    async def getmany(self, timeout: float) -> AsyncIterator[tuple[TP, Message]]:
        """faust's fetch, with the attached source topics' records given to the
        bridge (``Bridge.feed``) as aiokafka fetched them, per partition, instead of
        one faust ``Message`` at a time through faust's conductor, channel queue and
        stream: that per-message path bounded the integration at faust's own rate,
        and building a ``Message`` per record took a fifth of the batch path's time
        (docs/faust.md, Measured). Other topics' records go on to faust as before."""
        bridge = getattr(self.app, "_streamremat_bridge", None)
        if bridge is None:
            async for item in super().getmany(timeout):
                yield item
            return
        self._streamremat_fetch = None
        async for item in super().getmany(timeout):
            yield item
        fetched, self._streamremat_fetch = self._streamremat_fetch, None
        if fetched is None or not self.flow_active or self.should_stop:
            # faust's getmany delivers nothing then (with flow stopped, it seeks every
            # partition back to its committed offset): neither do we.
            await bridge.feed(self, {}, None)
            return
        generation, records = fetched
        monitor = self.app.monitor
        for tp in records:  # faust's lag gauge, once per partition, not per record
            monitor.track_tp_end_offset(tp, self.highwater(tp))
        await bridge.feed(self, records, generation)

    async def on_partitions_revoked(self, revoked: set[TP]) -> None:
        # Before faust forgets its committed offsets (it would count acks below them).
        bridge = getattr(self.app, "_streamremat_bridge", None)
        if bridge is not None:
            bridge.revoking()
        await super().on_partitions_revoked(revoked)

    async def perform_seek(self) -> None:
        await super().perform_seek()
        bridge = getattr(self.app, "_streamremat_bridge", None)
        if bridge is not None:
            await bridge.rewind(self)


class Transport(faust_aiokafka.Transport):
    Consumer: ClassVar[type[ConsumerT]] = Consumer
    driver_version = faust_aiokafka.Transport.driver_version + "+streamremat"


def register() -> None:
    """Make ``streamremat://`` a faust broker scheme (also declared as a
    ``faust.transports`` entry point; this covers source checkouts)."""
    from faust.transport.drivers import TRANSPORTS

    TRANSPORTS.aliases.setdefault(SCHEME, f"{__name__}:Transport")
