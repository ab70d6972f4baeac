"""faust-streaming side of bench/peers.py (runs in .venv-peers).

A tumbling 60 s windowed Table keyed by the message key, value ``[count, sum]``,
windows taken relative to the event's timestamp, RocksDB store (rocksdict) with a
changelog topic, exactly-once. Arguments: bootstrap input output group state_dir
commit_interval_s.

faust has no "emit when the window closes by event time": windows expire by wall
clock (``expires``) in a periodic cleanup. So windows are kept (expires = 1 day)
and the final values are read from the changelog's last value per window key.
With $PEERS_GROUP_BY (the re-keyed job) the stream is ``group_by`` that value field
first (a repartition topic).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from datetime import timedelta

import faust

bootstrap, source, sink, group, state_dir, commit_interval = sys.argv[1:7]

app = faust.App(
    group,
    broker=f"kafka://{bootstrap}",
    store="rocksdb://",
    datadir=state_dir,
    processing_guarantee="exactly_once",
    broker_commit_interval=float(commit_interval),
    topic_partitions=4,
    topic_replication_factor=1,
    consumer_auto_offset_reset="earliest",
    web_enabled=False,
    table_cleanup_interval=3600.0,
    broker_session_timeout=10.0,  # the streamremat worker's default
)
topic = app.topic(source, key_type=bytes, value_type=bytes, key_serializer="raw",
                  value_serializer="raw", partitions=4)
table = app.Table("win", default=lambda: [0, 0], partitions=4).tumbling(
    60.0, expires=timedelta(days=1)
).relative_to_stream()


FIELD = os.environ.get("PEERS_GROUP_BY") or None


def _new_key(value: bytes) -> bytes:
    return str(json.loads(value)[FIELD]).encode()


@app.agent(topic)
async def aggregate(stream: faust.StreamT) -> None:
    if FIELD:
        stream = stream.group_by(_new_key, name=FIELD)
    async for event in stream.events():
        amount = json.loads(event.value)["amount"]
        window = table[event.key]
        count, total = window.value()
        table[event.key] = [count + 1, total + amount]


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    sys.argv = [sys.argv[0], "worker", "--loglevel", "warn", "--without-web"]
    app.main()
