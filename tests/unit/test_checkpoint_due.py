"""``checkpoint_due()`` is a query: asking it changes nothing, and the tuner takes
its decision step only when a checkpoint starts a new interval."""

from __future__ import annotations

import time
from pathlib import Path

from aiokafka import TopicPartition

from streamremat.metrics.sensor import Sensor
from streamremat.runtime.lifecycle import Phase
from streamremat.runtime.partition import PartitionRunner
from streamremat.runtime.scheduling import CheckpointScheduler
from streamremat.runtime.settings import CheckpointSettings, WorkerSettings
from streamremat.state.rocksdb import RocksDBCheckpointStore


def _live_runner(tmp_path: Path) -> PartitionRunner:
    checkpoints = CheckpointSettings(policy="adaptive", min_interval_s=5.0, max_interval_s=60.0)
    settings = WorkerSettings(state_dir=str(tmp_path), checkpoints=checkpoints)
    runner = PartitionRunner(
        TopicPartition("events", 0), [], settings=settings, group_id="g", producer=None,
        local=RocksDBCheckpointStore(tmp_path / "local"), replica=None,
        scheduler=CheckpointScheduler(checkpoints), sensor=Sensor(),
    )
    runner.to(Phase.LIVE)
    return runner


def test_checkpoint_due_twice_gives_the_same_answer_and_leaves_the_tuner_alone(
    tmp_path: Path,
) -> None:
    runner = _live_runner(tmp_path)
    tuner = runner.scheduler.tuner
    for seconds_since in (1.0, 1000.0):  # not due yet, then long overdue
        runner.feed.last_checkpoint_mono = time.monotonic() - seconds_since
        before = tuner.to_bytes()
        answers = [runner.checkpoint_due(), runner.checkpoint_due()]
        assert answers[0] == answers[1] == (seconds_since > 5.0)
        assert tuner.to_bytes() == before
        assert tuner.current_interval_s is None


def test_a_new_interval_takes_one_tuner_step(tmp_path: Path) -> None:
    runner = _live_runner(tmp_path)
    tuner = runner.scheduler.tuner
    now = time.time()
    expected = tuner.decision(now).interval_s
    runner.scheduler.start_interval(now)
    assert tuner.current_interval_s == expected
    runner.scheduler.start_interval(now)  # each call is one step; the estimates are unchanged
    assert tuner.current_interval_s == expected
