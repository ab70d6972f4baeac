"""Quix Streams side of bench/peers.py (runs in .venv-peers).

Tumbling 60 s window, count and sum of ``amount`` per message key, final results
only, closed by the partition's stream time (``closing_strategy="partition"``; the
default "key" closes a key's windows only when that key sees a newer record), RocksDB state
with changelog topics, exactly-once. Arguments: bootstrap input output group
state_dir commit_interval_s. With $PEERS_GROUP_BY (the re-keyed job): ``group_by``
that value field first (a repartition topic), grace $PEERS_GRACE_MS.
"""

from __future__ import annotations

import logging
import os
import sys

from quixstreams import Application
from quixstreams.dataframe.windows import Count, Sum


def main() -> None:
    bootstrap, source, sink, group, state_dir, commit_interval = sys.argv[1:7]
    app = Application(
        broker_address=bootstrap,
        consumer_group=group,
        auto_offset_reset="earliest",
        processing_guarantee="exactly-once",
        state_dir=state_dir,
        commit_interval=float(commit_interval),
        use_changelog_topics=True,
        loglevel=logging.WARNING,
        # the same failure detection as the streamremat worker's default
        consumer_extra_config={"session.timeout.ms": 10_000},
    )
    field = os.environ.get("PEERS_GROUP_BY") or None
    grace_ms = int(os.environ.get("PEERS_GRACE_MS") or 0)
    topic = app.topic(source, key_deserializer="bytes", value_deserializer="json")
    out = app.topic(sink, key_serializer="str" if field else "bytes", value_serializer="json")
    sdf = app.dataframe(topic)
    if field:
        sdf = sdf.group_by(field)
    sdf = sdf.tumbling_window(duration_ms=60_000, grace_ms=grace_ms).agg(
        count=Count(), sum=Sum("amount")
    ).final(closing_strategy="partition")
    sdf.to_topic(out)
    app.run()


if __name__ == "__main__":
    main()
