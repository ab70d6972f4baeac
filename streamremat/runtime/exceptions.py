"""Errors of the worker runtime."""

from __future__ import annotations

from streamremat.core.exceptions import StreamrematError


class WorkerError(StreamrematError):
    """The worker cannot go on; the message says why and what to do."""


class RetentionGapError(WorkerError):
    """Offsets a task needs are below the partition's log start: retention (or
    DeleteRecords) already removed records that were never processed, or that a
    replay needs. ``expected`` is the first offset the task needs, ``log_start``
    the first one the partition still has; ``what`` names ``expected``."""

    def __init__(
        self,
        topic: str,
        partition: int,
        expected: int,
        log_start: int,
        what: str = "checkpoint offset",
    ) -> None:
        super().__init__(
            f"{topic}[{partition}]: {what} {expected} is below the log start offset "
            f"{log_start}: the source no longer has offsets [{expected}, {log_start}) "
            f"({log_start - expected} records) that this task needs. Nothing after them "
            "is processed or committed. Raise the topic's retention.ms (or lower the "
            "checkpoint interval), or run with --on-retention-gap=reset to skip them "
            "explicitly (logged and counted)"
        )
        self.topic = topic
        self.partition = partition
        self.expected = expected
        self.log_start = log_start


class LogTruncatedError(WorkerError):
    """A partition's position is beyond its log end: the log lost records the group
    already processed (an unclean leader election, or the topic was re-created)."""

    def __init__(self, topic: str, partition: int, expected: int, log_end: int) -> None:
        super().__init__(
            f"{topic}[{partition}]: the next offset to read, {expected}, is beyond the log "
            f"end offset {log_end}: the partition lost records this group already "
            "processed (unclean leader election, or the topic was deleted and created "
            "again). --on-retention-gap does not apply: the offsets would now name other "
            "records. Use a new --group-id and state dir to start over on this topic"
        )
        self.topic = topic
        self.partition = partition
        self.expected = expected
        self.log_end = log_end


class PhaseError(RuntimeError):
    """A partition was asked for a transition its lifecycle does not have: a bug."""


class KafkaAccessError(WorkerError):
    """The cluster refused this client: TLS, SASL or an ACL. Retrying cannot help; the
    message names the setting or the grant that fixes it."""
