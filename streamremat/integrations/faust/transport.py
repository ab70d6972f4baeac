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

from collections.abc import AsyncIterator
from typing import ClassVar

from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP, ConsumerT, Message

#: ``faust.App(broker=f"{SCHEME}://host:port")``
SCHEME = "streamremat"


class Consumer(faust_aiokafka.Consumer):
    async def getmany(self, timeout: float) -> AsyncIterator[tuple[TP, Message]]:
        """faust's fetch, with the attached source topics' records taken out as one
        batch for the bridge (``Bridge.feed``) instead of one message at a time
        through faust's conductor, channel queue and stream: that per-message path
        bounded the integration at faust's own rate (docs/faust.md, Measured).
        Other topics' records go on to faust as before."""
        bridge = getattr(self.app, "_streamremat_bridge", None)
        if bridge is None:
            async for item in super().getmany(timeout):
                yield item
            return
        mine = bridge.by_topic
        batch: list[Message] = []
        async for tp, message in super().getmany(timeout):
            if tp.topic in mine:
                batch.append(message)
            else:
                yield tp, message
        await bridge.feed(self, batch)


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
