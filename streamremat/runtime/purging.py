"""Deleting the records of repartition topics that no checkpoint needs any more.

A repartition topic is internal: its only reader is the stage that consumes it,
and a replay never reads below that stage's oldest kept checkpoint. Records below
it are deleted (admin DeleteRecords) instead of waiting for the topic's retention.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import Any

from aiokafka import TopicPartition
from aiokafka.admin import RecordsToDelete

from streamremat.runtime.partition import PartitionRunner

log = logging.getLogger("streamremat.worker")


class RepartitionPurger:
    """Deletes below the purge floor of each repartition partition after a checkpoint."""

    def __init__(self, admin: Any, repartition_topics: Collection[str]) -> None:
        self._admin = admin
        self._topics = repartition_topics
        #: repartition topic partitions: the offset records were deleted below
        self._purged: dict[TopicPartition, int] = {}

    async def purge(self, runner: PartitionRunner) -> None:
        """Delete ``runner``'s records that no kept checkpoint can restore from. A
        failure only leaves the records for the next checkpoint (or retention)."""
        tp = runner.tp
        if tp.topic not in self._topics:
            return
        floor = runner.checkpointer.purge_floor()
        if floor is None or floor <= self._purged.get(tp, 0):
            return
        try:
            await self._admin.delete_records({tp: RecordsToDelete(floor)})
        except Exception as exc:
            log.warning("%s[%d]: deleting records below offset %d failed: %r",
                        tp.topic, tp.partition, floor, exc)
            return
        self._purged[tp] = floor
        log.info("%s[%d]: deleted records below offset %d (no kept checkpoint needs them)",
                 tp.topic, tp.partition, floor)
