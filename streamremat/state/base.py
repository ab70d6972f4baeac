"""The one interface every checkpoint store implements.

The runtime talks only to this; the contract test suite runs the same tests
against every implementation.
"""

from __future__ import annotations

import abc

from streamremat.state.chain import RestorePoint
from streamremat.state.frame import CheckpointFrame, TaskId

__all__ = ["CheckpointStore"]


class CheckpointStore(abc.ABC):
    """Durable, verifiable storage of checkpoint frames for many tasks."""

    name: str = "store"

    @abc.abstractmethod
    async def append(self, frame: CheckpointFrame) -> None:
        """Store ``frame`` atomically and durably; raise ``CheckpointSequenceError``
        when ``frame.seq`` is not above every seq stored for its task."""

    @abc.abstractmethod
    async def load(self, task: TaskId) -> RestorePoint | None:
        """The newest restorable chain of ``task`` (see ``chain.select_restore_point``)."""

    @abc.abstractmethod
    async def prune(self, task: TaskId, keep: int) -> int:
        """Delete frames no longer needed for the ``keep`` newest restorable
        checkpoints; return how many frames were deleted."""

    @abc.abstractmethod
    async def last_seq(self, task: TaskId) -> int | None:
        """The highest seq stored for ``task``, readable or not (``None``: none)."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release resources; the store is unusable afterwards."""
