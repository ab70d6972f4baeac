"""Choose between the local checkpoint and the portable replica (DESIGN §6.1)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from streamremat.state.base import CheckpointStore
from streamremat.state.chain import RestorePoint
from streamremat.state.frame import TaskId

__all__ = ["RestoreChoice", "newest_restore_point"]

log = logging.getLogger("streamremat.state")


@dataclass(frozen=True)
class RestoreChoice:
    """The restore point to use (``None``: replay from the earliest retained
    offset), the store it came from, ``next_seq`` for the next append to either
    store, and ``notes`` (store failures and skipped frames) to log and count."""

    point: RestorePoint | None
    source: str | None
    next_seq: int
    notes: tuple[str, ...]


async def newest_restore_point(
    task: TaskId,
    local: CheckpointStore,
    replica: CheckpointStore | None,
    replica_timeout_s: float = 30.0,
) -> RestoreChoice:
    """Load ``task`` from both stores and keep the more advanced restore point,
    by ``(offset, seq)``; on a tie the local one (no network on the next load).

    A store that fails or times out is skipped with a note: an unreachable
    replica must not stop a worker that has a good local checkpoint, and a
    damaged local DB must not stop one that has a replica. Only when both fail
    is the error raised.
    """
    notes: list[str] = []
    points: list[tuple[RestorePoint, str]] = []
    next_seq = 0
    errors: list[BaseException] = []
    stores: list[tuple[CheckpointStore, float | None]] = [(local, None)]
    if replica is not None:
        stores.append((replica, replica_timeout_s))
    for store, timeout in stores:
        try:
            point = await asyncio.wait_for(store.load(task), timeout)
            last = await asyncio.wait_for(store.last_seq(task), timeout)
        except Exception as exc:  # any failure of one store falls back to the other
            errors.append(exc)
            note = f"{task}: {store.name} checkpoint store failed: {type(exc).__name__}: {exc}"
            log.warning("%s", note)
            notes.append(note)
            continue
        if last is not None:
            next_seq = max(next_seq, last + 1)
        if point is not None:
            points.append((point, store.name))
            notes.extend(f"{store.name}: {line}" for line in point.fallbacks)
    if len(errors) == len(stores):
        raise errors[0]
    if not points:
        return RestoreChoice(None, None, next_seq, tuple(notes))
    point, source = max(points, key=lambda p: (p[0].offset, p[0].seq, p[1] == local.name))
    return RestoreChoice(point, source, max(next_seq, point.next_seq), tuple(notes))
