"""Errors raised by the pure engine layer."""

from __future__ import annotations


class StreamrematError(Exception):
    """Base class of every error streamremat raises on purpose."""


class ConfigError(StreamrematError, ValueError):
    """A window, aggregation or operator was defined wrongly; the message names the fix."""


class BadRecord(StreamrematError):
    """A record could not be processed; it goes to the dead letters, never stops a task.

    ``stage`` says where it failed (``key``, ``value``, ``timestamp``, ``step``,
    ``aggregate``) so dead-letter headers and metrics can group by it.
    """

    def __init__(self, stage: str, reason: str) -> None:
        super().__init__(f"{stage}: {reason}")
        self.stage = stage
        self.reason = reason


class StateFormatError(StreamrematError):
    """Encoded task state could not be decoded (wrong version, truncated, or garbage)."""
