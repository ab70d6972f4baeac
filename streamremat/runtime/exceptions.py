"""Errors of the worker runtime."""

from __future__ import annotations

from streamremat.core.exceptions import StreamrematError


class WorkerError(StreamrematError):
    """The worker cannot go on; the message says why and what to do."""


class RetentionGapError(WorkerError):
    """A checkpoint's offset is below the partition's log start: retention already
    deleted records that replay needs."""

    def __init__(self, topic: str, partition: int, checkpoint_offset: int, log_start: int) -> None:
        super().__init__(
            f"{topic}[{partition}]: checkpoint offset {checkpoint_offset} is below the log start "
            f"offset {log_start}: retention deleted {log_start - checkpoint_offset} records that "
            "replay needs. Raise the topic's retention.ms (or lower the checkpoint interval), or "
            "run with --on-retention-gap=reset to skip them explicitly"
        )
        self.topic = topic
        self.partition = partition
        self.checkpoint_offset = checkpoint_offset
        self.log_start = log_start


class FencedError(WorkerError):
    """Another worker took over this partition; this one must drop it without committing."""


class KafkaAccessError(WorkerError):
    """The cluster refused this client: TLS, SASL or an ACL. Retrying cannot help; the
    message names the setting or the grant that fixes it."""
