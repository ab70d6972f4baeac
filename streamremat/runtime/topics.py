"""The topics a worker needs: its sources must exist; it creates the rest."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from streamremat.core.operator import App
from streamremat.core.topology import Topology
from streamremat.runtime.exceptions import WorkerError
from streamremat.runtime.kafka import (
    KafkaAdminError,
    TopicSpec,
    create_topics,
    retention_s,
    topic_config,
    topic_partitions,
)
from streamremat.runtime.settings import WorkerSettings
from streamremat.state.kafka import KafkaCheckpointConfig

log = logging.getLogger("streamremat.worker")


@dataclass(frozen=True)
class Topics:
    checkpoint_partitions: int
    #: per topic read, its time retention in seconds (None: unlimited or unknown)
    retention_s: dict[str, float | None]


async def ensure_topics(
    app: App, settings: WorkerSettings, topology: Topology,
    read: Iterable[str],
) -> Topics:
    """Check the App's input topics; create every topic its stages write.

    In topological order, so a stage's source (a repartition topic, or the sink
    of the operator it reads) exists before its own outputs are sized: sinks,
    dead-letter and late topics get their stage source's partition count, a
    repartition topic the operator's ``repartition_partitions`` or that same
    count, and a time retention covering the checkpoints a replay may need
    (``WorkerSettings.repartition_retention_ms``); the checkpoint topic the
    largest count. All go through ``create_topics``, which replicates them as
    ``settings.replication`` says. Returns the retention of every topic in ``read``."""
    client = settings.client
    where = client.bootstrap_servers
    for topic in topology.external_sources:
        try:
            parts = len(await topic_partitions(client, topic))
        except KafkaAdminError as exc:
            raise WorkerError(
                f"source topic {topic!r} is not readable on {where}: {exc}; create it "
                "first (the worker creates sinks, never sources)"
                + ("" if exc.code != KafkaAdminError.NOT_AUTHORIZED else
                   f", or grant {client.sasl_username or 'this user'} DESCRIBE and READ on it")
            ) from exc
        if parts == 0:
            raise WorkerError(f"source topic {topic!r} does not exist on {where}")
    internal = topology.internal
    retention_ms = settings.repartition_retention_ms
    replication = settings.replication
    specs: list[TopicSpec] = []
    max_parts = 1
    for stage in topology.stages:
        parts = len(await topic_partitions(client, stage.source))
        max_parts = max(max_parts, parts)
        mine = [TopicSpec(t, parts) for t in stage.outputs if t != stage.target]
        if stage.target is not None:
            mine.append(TopicSpec(stage.target, stage.partitions or parts,
                                  {"retention.ms": str(retention_ms),
                                   "cleanup.policy": "delete"}))
        # A topic read downstream must exist before the stage reading it is sized.
        await create_topics(client, [x for x in mine if x.name in internal],
                            replication=replication)
        specs.extend(x for x in mine if x.name not in internal)
    # Both stages of a re-keyed operator write its dead letters: one spec per topic.
    specs = list({x.name: x for x in reversed(specs)}.values())
    if settings.checkpoints.replicate:
        specs.append(TopicSpec(app.checkpoint_topic, max_parts,
                               KafkaCheckpointConfig(partitions=max_parts).topic_config()))
    await create_topics(client, specs, replication=replication)
    retention = {topic: retention_s(await topic_config(client, topic)) for topic in read}
    for topic in topology.repartition_topics:
        actual = retention[topic]
        if actual is not None and (retention_ms < 0 or actual * 1000 < retention_ms):
            log.warning(
                "repartition topic %s keeps %.0f s, less than the %s its checkpoints "
                "may need (it existed before); raise its retention.ms", topic, actual,
                "unlimited retention" if retention_ms < 0 else f"{retention_ms / 1000:.0f} s",
            )
    return Topics(max_parts, retention)
