"""The cyclic garbage collector in a worker process.

A worker allocates many small container objects per record (decoded values,
accumulator lists, output tuples) that die by reference counting, plus a large,
long-lived state (restored windows, clients). With CPython's default thresholds
(700, 10, 10) a young collection runs every few hundred records and each old one
walks the whole state: measured in docs/benchmarks.md. So while a worker runs:

* the young threshold is raised (``GEN0_THRESHOLD``): cycles are rare on the
  per-record path, and a larger young generation still bounds their memory;
* after start-up and after each restore the surviving objects are moved to the
  permanent generation (``gc.freeze``), which collections never walk.

Process-wide, so reference-counted: several workers in one process (tests,
benchmarks) share one tuning, and the last to stop puts the defaults back.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

#: allocations (minus deallocations) of tracked objects between young collections
GEN0_THRESHOLD = 50_000

_users = 0
_saved: tuple[int, int, int] | None = None
_pauses = 0
_pauses_enabled = [True]  # whether the collector was enabled when the first pause began


def start() -> None:
    """Raise the young threshold (once per process) and freeze what exists."""
    global _users, _saved
    if _users == 0:
        _saved = gc.get_threshold()
        gen0, gen1, gen2 = _saved
        gc.set_threshold(max(gen0, GEN0_THRESHOLD), gen1, gen2)
    _users += 1
    freeze()


def freeze(collect: bool = True) -> None:
    """Collect once, then move every surviving object to the permanent generation:
    long-lived state (just restored) is not walked again by later collections.

    ``collect=False`` (after a restore): freeze without the full collection, which
    would walk every restored object at once, holding the GIL (a second at a few
    million entries); a restore makes no garbage cycles worth that stall."""
    if collect:
        gc.collect()
    gc.freeze()


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """No automatic collection meanwhile (a restore building millions of objects):
    each old-generation collection would walk all of them while holding the GIL,
    stalling the event loop whichever thread allocates. Nests; process-wide.

    While the tuning is on (``start``), what was built is frozen at the end,
    before the collector runs again: else the first young collection after the
    pause would walk all of it at once."""
    global _pauses
    if _pauses == 0:
        _pauses_enabled[0] = gc.isenabled()
        gc.disable()
    _pauses += 1
    try:
        yield
    finally:
        _pauses -= 1
        if _pauses == 0:
            if _users > 0:
                gc.freeze()
            if _pauses_enabled[0]:
                gc.enable()


def stop() -> None:
    """Undo ``start`` when the last worker of the process stops."""
    global _users, _saved
    if _users == 0:
        return
    _users -= 1
    if _users == 0:
        gc.unfreeze()
        if _saved is not None:
            gc.set_threshold(*_saved)
            _saved = None
