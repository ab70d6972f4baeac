"""faust app with a streamremat operator: the faust+streamremat side of bench/peers.py.

The job of ``faust_job.py`` (a tumbling 60 s count and sum of ``amount`` per
message key), but as a streamremat ``Operator`` attached to the faust app
(``streamremat.integrations.faust.attach``): state in streamremat tasks with
checkpoints (RocksDB + the compacted replica topic), final results on the sink.
Runs in the main venv (it needs streamremat). Arguments: bootstrap input output
group state_dir commit_interval_s checkpoint_interval_s.
"""

from __future__ import annotations

import logging
import os
import sys

import faust

from streamremat import App, Count, Operator, Sum, Tumbling
from streamremat.integrations.faust import attach
from streamremat.runtime.settings import CheckpointSettings

bootstrap, source, sink, group, state_dir, commit_interval, checkpoint_interval = sys.argv[1:8]

app = faust.App(
    group,
    broker=f"streamremat://{bootstrap}",
    datadir=os.path.join(state_dir, "faust"),
    broker_commit_interval=float(commit_interval),
    topic_partitions=4,
    topic_replication_factor=1,
    consumer_auto_offset_reset="earliest",
    web_enabled=False,
    broker_session_timeout=10.0,  # the streamremat worker's default
)
attach(
    app,
    App(group, [Operator(name="win", source=source, sink=sink, window=Tumbling(60_000),
                         aggregate={"count": Count(), "sum": Sum("amount")})]),
    state_dir=state_dir,
    checkpoints=CheckpointSettings(policy="fixed", interval_s=float(checkpoint_interval)),
    commit_interval_s=float(commit_interval),
)

# streamremat's recovery lines (``replayed N records``) for the harness, whatever
# logging faust sets up.
_handler = logging.StreamHandler(sys.stdout)
_handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
_log = logging.getLogger("streamremat")
_log.addHandler(_handler)
_log.setLevel(logging.INFO)
_log.propagate = False

if __name__ == "__main__":
    sys.argv = [sys.argv[0], "worker", "--loglevel", "warn", "--without-web"]
    app.main()
