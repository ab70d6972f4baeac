"""The faust app of the faust fault tests: the fault scenario's operators
(``tests/fault/apps.py``) attached to a faust app, run as
``python -m tests.fault.faust_app worker``.

Names come from the environment like the worker's (``FaultEnv.worker_env``), so
the group is ``streamremat-<app>`` and the checkpoint topic the App's.
"""

from __future__ import annotations

import logging
import os
import sys

import faust

from streamremat import App
from streamremat.integrations.faust import attach
from streamremat.runtime.settings import CheckpointSettings
from tests.fault.apps import APP_NAME, SCENARIO, SCENARIOS, SOURCE

BOOTSTRAP = os.environ["STREAMREMAT_FAULT_BOOTSTRAP"]
STATE_DIR = os.environ["STREAMREMAT_FAULT_STATE_DIR"]
INTERVAL_S = float(os.environ.get("STREAMREMAT_FAULT_CHECKPOINT_INTERVAL", "1.0"))

os.makedirs(os.path.join(STATE_DIR, "faust"), exist_ok=True)
operators = App(APP_NAME, [op.engine(SOURCE) for op in SCENARIOS[SCENARIO]])
app = faust.App(
    operators.group_id,
    broker=f"streamremat://{BOOTSTRAP}",
    datadir=os.path.join(STATE_DIR, "faust"),
    web_enabled=False,
    broker_session_timeout=3.0,
    broker_heartbeat_interval=0.5,
    broker_commit_interval=0.5,
    consumer_auto_offset_reset="earliest",
    topic_partitions=4,
)
bridge = attach(
    app, operators, state_dir=STATE_DIR,
    checkpoints=CheckpointSettings(policy="fixed", interval_s=INTERVAL_S),
    metrics_port=int(os.environ["STREAMREMAT_FAULT_METRICS_PORT"])
    if os.environ.get("STREAMREMAT_FAULT_METRICS_PORT") else None,
    commit_interval_s=0.2,
)

# streamremat's lines as the worker prints them (the harness parses them).
_handler = logging.StreamHandler(sys.stdout)
_handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
_log = logging.getLogger("streamremat")
_log.addHandler(_handler)
_log.setLevel(logging.INFO)
_log.propagate = False



@app.timer(1.0)
async def report_faust_path() -> None:
    # The source's records reach the operators in batches from the transport's
    # getmany, never through faust's conductor (which counts what it receives).
    _log.info("faust conductor received %d records of %s",
              app.monitor.messages_received_by_topic[SOURCE], SOURCE)


if __name__ == "__main__":
    app.main()
