"""The worker's rebalance listener: aiokafka's callbacks, with errors kept.

aiokafka calls the listener inside its group coordinator and only logs what the
listener raises, then goes on: a bug while handing partitions over would leave
the worker running as if nothing had happened. This listener hands every error to
the worker's ``fail`` instead, which stops it as an error in its own loop does.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka import ConsumerRebalanceListener, TopicPartition

Handler = Callable[[list[TopicPartition]], Awaitable[None]]


class RebalanceListener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, revoked: Handler, assigned: Handler,
                 fail: Callable[[Exception], None]) -> None:
        self._revoked = revoked
        self._assigned = assigned
        self._fail = fail

    async def on_partitions_revoked(self, revoked: Any) -> None:
        try:
            await self._revoked(list(revoked))
        except Exception as exc:
            self._fail(exc)

    async def on_partitions_assigned(self, assigned: Any) -> None:
        try:
            await self._assigned(list(assigned))
        except Exception as exc:
            self._fail(exc)
