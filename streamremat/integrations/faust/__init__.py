"""streamremat operators inside a faust app (``pip install streamremat[faust]``).

::

    import faust
    from streamremat import App, Count, Operator, Sum, Tumbling
    from streamremat.integrations.faust import attach

    app = faust.App("clicks", broker="streamremat://localhost:9092")
    attach(app, App("clicks", [Operator(name="per_minute", source="clicks",
                                         sink="clicks-per-minute", window=Tumbling(60_000),
                                         aggregate={"n": Count(), "total": Sum("x")})]),
           state_dir="/var/lib/clicks", metrics_port=9108)

The operator's source becomes a topic of the faust app (an agent subscribes
faust to it); its records reach streamremat tasks in batches from faust's fetch
(``transport.Consumer.getmany``), not one by one through faust's stream; its
state lives in those tasks with streamremat checkpoints (RocksDB + the compacted
replica topic), not in faust tables. The ``streamremat://`` broker scheme is
faust's aiokafka transport with two changes: that batch fetch, and after faust
seeks to the committed offsets, the attached partitions are sought back to their
checkpoints for the replay (``transport.Consumer``).
Guarantee: at-least-once, duplicates byte-identical with an idempotency header
(``H_IDEMPOTENCY``); see ``docs/faust.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from streamremat.core.exceptions import ConfigError
from streamremat.core.operator import App, Operator
from streamremat.integrations.faust.bridge import Bridge, FaustPartition
from streamremat.integrations.faust.outputs import H_IDEMPOTENCY, idempotency_key
from streamremat.integrations.faust.transport import SCHEME, register
from streamremat.metrics.sensor import Sensor
from streamremat.runtime.client import KafkaClientConfig
from streamremat.runtime.settings import CheckpointSettings, Guarantee, WorkerSettings

__all__ = [
    "H_IDEMPOTENCY",
    "SCHEME",
    "Bridge",
    "FaustPartition",
    "attach",
    "idempotency_key",
]

register()


def attach(
    faust_app: Any,
    app: App | Operator | Sequence[Operator],
    *,
    state_dir: str = ".streamremat/state",
    checkpoints: CheckpointSettings | None = None,
    kafka: KafkaClientConfig | None = None,
    metrics_port: int | None = None,
    max_batch_records: int = 5000,
    commit_interval_s: float = 0.5,
) -> Bridge:
    """Run ``app``'s operators inside ``faust_app`` (a ``faust.App`` whose broker
    uses the ``streamremat://`` scheme); returns the bridge (its ``runners`` are
    the partitions' tasks).

    ``kafka`` is how streamremat's own clients (outputs, replica, admin) connect;
    by default plaintext to the faust app's first broker. ``metrics_port`` serves
    streamremat's Prometheus metrics from the faust worker. ``commit_interval_s``
    is how often due checkpoints ask faust to commit first.
    """
    urls = list(faust_app.conf.broker_consumer)
    if not urls or urls[0].scheme != SCHEME:
        given = ", ".join(str(u) for u in urls) or "none"
        raise ConfigError(
            f"faust app {faust_app.conf.id!r} uses broker {given}: attaching streamremat "
            f"operators needs the {SCHEME}:// scheme, which rewinds source partitions to "
            f"their checkpoints, e.g. faust.App(..., broker='{SCHEME}://localhost:9092')"
        )
    if isinstance(app, Operator):
        app = App(str(faust_app.conf.id), [app])
    elif not isinstance(app, App):
        app = App(str(faust_app.conf.id), list(app))
    if not app.operators:
        raise ConfigError(f"app {app.name!r} has no operators to attach")
    if kafka is None:
        kafka = KafkaClientConfig(",".join(f"{u.host}:{u.port or 9092}" for u in urls))
    settings = WorkerSettings(
        group_id=str(faust_app.conf.id), state_dir=state_dir,
        commit_interval_s=commit_interval_s, guarantee=Guarantee.AT_LEAST_ONCE,
        metrics_port=metrics_port, max_batch_records=max_batch_records,
        session_timeout_ms=int(faust_app.conf.broker_session_timeout * 1000),
        checkpoints=checkpoints or CheckpointSettings(), kafka=kafka,
    )
    sensor: Sensor
    if metrics_port is not None:
        from streamremat.metrics.prometheus import PrometheusSensor

        sensor = PrometheusSensor(app.name)
    else:
        sensor = Sensor()
    bridge = Bridge(faust_app, app, settings, sensor)
    faust_app._streamremat_bridge = bridge
    channel = faust_app.topic(
        *bridge.by_topic, key_type=bytes, value_type=bytes,
        key_serializer="raw", value_serializer="raw",
    )
    faust_app.agent(channel, name=f"streamremat.{app.name}")(_agent_of(bridge))

    async def close(sender: Any, **_: Any) -> None:
        await bridge.close()

    faust_app.on_before_shutdown.connect(close)

    async def report_loop_while_rebalancing() -> None:
        consumer = faust_app.consumer
        if not consumer.flow_active:  # faust fetches nothing: ``feed`` is not called
            bridge.loop_went_round(consumer)

    faust_app.timer(1.0)(report_loop_while_rebalancing)

    if metrics_port is not None:
        async def serve_metrics() -> None:
            sensor.serve(metrics_port)  # type: ignore[attr-defined]

        faust_app.task(serve_metrics)
    return bridge


def _agent_of(bridge: Bridge) -> Any:
    async def streamremat_operators(stream: Any) -> None:
        # It subscribes faust to the source topics; their records reach the bridge
        # in batches from the transport's getmany (``Bridge.feed``), never this stream.
        async for _ in stream.noack():
            raise RuntimeError("a record of an attached source reached the faust agent")

    return streamremat_operators
