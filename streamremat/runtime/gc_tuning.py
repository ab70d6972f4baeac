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

import gc

#: allocations (minus deallocations) of tracked objects between young collections
GEN0_THRESHOLD = 50_000

_users = 0
_saved: tuple[int, int, int] | None = None


def start() -> None:
    """Raise the young threshold (once per process) and freeze what exists."""
    global _users, _saved
    if _users == 0:
        _saved = gc.get_threshold()
        gen0, gen1, gen2 = _saved
        gc.set_threshold(max(gen0, GEN0_THRESHOLD), gen1, gen2)
    _users += 1
    freeze()


def freeze() -> None:
    """Collect once, then move every surviving object to the permanent generation:
    long-lived state (just restored) is not walked again by later collections."""
    gc.collect()
    gc.freeze()


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
