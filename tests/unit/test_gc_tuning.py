"""The worker's GC tuning: process-wide, reference-counted, undone by the last stop."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from streamremat.runtime import gc_tuning


@pytest.fixture(autouse=True)
def _restore_gc() -> Iterator[None]:
    # A worker an earlier test left running in this process may still hold the tuning.
    saved_users = gc_tuning._users
    gc_tuning._users = 0
    before = gc.get_threshold()
    yield
    while gc_tuning._users:
        gc_tuning.stop()
    gc.unfreeze()
    gc.set_threshold(*before)
    gc_tuning._users = saved_users


def test_start_raises_the_young_threshold_and_freezes_state() -> None:
    gc.unfreeze()
    gc.set_threshold(700, 10, 10)
    state = [[i] for i in range(1000)]  # long-lived, tracked containers
    gc_tuning.start()
    assert gc.get_threshold() == (gc_tuning.GEN0_THRESHOLD, 10, 10)
    assert gc.get_freeze_count() >= len(state)
    gc_tuning.stop()
    assert gc.get_threshold() == (700, 10, 10)
    assert gc.get_freeze_count() == 0


def test_the_last_of_several_workers_puts_the_defaults_back() -> None:
    gc.set_threshold(700, 10, 10)
    gc_tuning.start()
    gc_tuning.start()
    gc_tuning.stop()
    assert gc.get_threshold()[0] == gc_tuning.GEN0_THRESHOLD  # one worker still runs
    gc_tuning.stop()
    assert gc.get_threshold() == (700, 10, 10)
    gc_tuning.stop()  # an extra stop changes nothing
    assert gc.get_threshold() == (700, 10, 10)


def test_a_higher_threshold_set_by_the_user_is_kept() -> None:
    gc.set_threshold(10 * gc_tuning.GEN0_THRESHOLD, 10, 10)
    gc_tuning.start()
    assert gc.get_threshold()[0] == 10 * gc_tuning.GEN0_THRESHOLD
    gc_tuning.stop()


def test_freeze_after_restore_moves_new_state_to_the_permanent_generation() -> None:
    gc_tuning.start()
    frozen = gc.get_freeze_count()
    restored = [[i] for i in range(5000)]  # accumulators are lists
    gc_tuning.freeze()
    assert gc.get_freeze_count() >= frozen + len(restored)
