"""What a consumer group has committed, summed over a topic's partitions."""

from __future__ import annotations

from aiokafka import AIOKafkaConsumer, TopicPartition


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
