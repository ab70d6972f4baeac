"""What a consumer group has committed: summed over a topic's partitions, or per
partition through an admin client, with the coordinator's transient errors of a
fresh broker (or of a moving offsets-topic leader) taken as "not yet"."""

from __future__ import annotations

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import (
    CoordinatorLoadInProgressError,
    GroupCoordinatorNotAvailableError,
    NotCoordinatorError,
)

#: A group's coordinator answers these while the offsets topic is being created or
#: its leader moves: retriable, never a test failure by themselves.
COORDINATOR_NOT_READY = (GroupCoordinatorNotAvailableError, CoordinatorLoadInProgressError,
                         NotCoordinatorError)


async def committed_total(bootstrap: str, group: str, topic: str, partitions: int) -> int:
    """The sum of ``group``'s committed offsets on ``topic`` (0 for a partition without)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                                enable_auto_commit=False)
    await consumer.start()
    try:
        return sum([await consumer.committed(TopicPartition(topic, p)) or 0
                    for p in range(partitions)])
    finally:
        await consumer.stop()


async def committed_by_partition(admin: AIOKafkaAdminClient, group: str,
                                 topic: str) -> dict[int, int] | None:
    """``group``'s committed offset per partition of ``topic`` (partitions without a
    commit left out), or None while the group's coordinator is not ready."""
    try:
        found = await admin.list_consumer_group_offsets(group)
    except COORDINATOR_NOT_READY:
        return None
    return {tp.partition: om.offset for tp, om in found.items()
            if tp.topic == topic and om.offset >= 0}
