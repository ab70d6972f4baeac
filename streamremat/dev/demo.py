"""``streamremat demo``: a minimal end-to-end check against a real broker.

Placeholder until the full demo lands: produce a few records through the
package's Kafka helpers and read them back under read_committed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import uuid

from streamremat.dev.broker import DEFAULT_PORT, BrokerConfig, DevBroker
from streamremat.dev.exceptions import DevBrokerError
from streamremat.runtime.kafka import ProducerRecord, TopicSpec, consume_all, create_topics, produce


def add_demo_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = subparsers.add_parser(
        "demo",
        help="produce and read back a few records on a real broker",
        description="Uses $STREAMREMAT_BOOTSTRAP if set, else starts the dev broker.",
    )
    demo.add_argument("--port", type=int, default=DEFAULT_PORT, help="dev broker port")
    demo.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    bootstrap = os.environ.get("STREAMREMAT_BOOTSTRAP")
    if not bootstrap:
        try:
            status = DevBroker(BrokerConfig(port=args.port)).start()
        except DevBrokerError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        bootstrap = status.bootstrap
        print(f"dev broker at {bootstrap} (stop it with `streamremat broker stop`)")
    asyncio.run(_roundtrip(bootstrap))
    return 0


async def _roundtrip(bootstrap: str) -> None:
    topic = f"demo-{uuid.uuid4().hex[:8]}"
    await create_topics(bootstrap, [TopicSpec(topic, partitions=1)])
    records = [
        ProducerRecord(f"sensor-{i % 2}".encode(), f"{20 + i}".encode(), 1_700_000_000_000 + i)
        for i in range(5)
    ]
    await produce(bootstrap, topic, records)
    print(f"topic {topic}: produced {len(records)} records; read back (read_committed):")
    for rec in await consume_all(bootstrap, topic, isolation_level="read_committed"):
        key = (rec.key or b"").decode()
        value = (rec.value or b"").decode()
        print(f"  offset={rec.offset} ts={rec.timestamp_ms} key={key} value={value}")
