"""The faust app of the faust fault tests: the fault scenario's operators
(``tests/fault/apps.py``) attached to a faust app, run as
``python -m tests.fault.faust_app worker``.

Names come from the environment like the worker's (``FaultEnv.worker_env``), so
the group is ``streamremat-<app>`` and the checkpoint topic the App's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import sys
from typing import Any

import faust

from streamremat import App
from streamremat.integrations.faust import attach
from streamremat.runtime.lifecycle import Phase
from streamremat.runtime.settings import CheckpointSettings
from tests.fault.apps import APP_NAME, SCENARIO, SCENARIOS, SOURCE

BOOTSTRAP = os.environ["STREAMREMAT_FAULT_BOOTSTRAP"]
STATE_DIR = os.environ["STREAMREMAT_FAULT_STATE_DIR"]
INTERVAL_S = float(os.environ.get("STREAMREMAT_FAULT_CHECKPOINT_INTERVAL", "1.0"))

os.makedirs(os.path.join(STATE_DIR, "faust"), exist_ok=True)
#: the operators' late topic, if the test gives one (the worker's fault Apps have none)
LATE_TOPIC = os.environ.get("STREAMREMAT_FAULT_LATE_TOPIC") or None
operators = App(APP_NAME, [dataclasses.replace(op.engine(SOURCE), late_topic=LATE_TOPIC)
                           for op in SCENARIOS[SCENARIO]])
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
    # A test may make the source topic after the worker started: faust's subscription
    # sees it at the next metadata refresh (aiokafka's default: 5 minutes).
    consumer_metadata_max_age_ms=int(os.environ.get("STREAMREMAT_FAULT_METADATA_MAX_AGE_MS",
                                                    "300000")),
)
bridge = attach(
    app, operators, state_dir=STATE_DIR,
    checkpoints=CheckpointSettings(policy="fixed", interval_s=INTERVAL_S),
    metrics_port=int(os.environ["STREAMREMAT_FAULT_METRICS_PORT"])
    if os.environ.get("STREAMREMAT_FAULT_METRICS_PORT") else None,
    commit_interval_s=0.2,
    max_batch_records=int(os.environ.get("STREAMREMAT_FAULT_MAX_BATCH_RECORDS", "5000")),
)

REPLAY_DELAY_S = float(os.environ.get("STREAMREMAT_FAULT_REPLAY_DELAY_S", "0"))
if REPLAY_DELAY_S:
    # A slow machine's replay: each step with records of a replaying partition waits
    # first, so that a test can rebalance the group while a partition replays.
    _process = bridge._process

    async def _slow_process(batch: Any, generation: int | None) -> Any:
        if any(r.phase is Phase.REPLAYING for r in map(bridge.runners.get, batch) if r):
            await asyncio.sleep(REPLAY_DELAY_S)
        return await _process(batch, generation)

    bridge._process = _slow_process  # type: ignore[method-assign]

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
