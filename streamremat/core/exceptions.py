"""Errors raised by the pure engine layer."""

from __future__ import annotations


class StreamrematError(Exception):
    """Base class of every error streamremat raises on purpose."""


class ConfigError(StreamrematError, ValueError):
    """A window, aggregation or operator was defined wrongly; the message names the fix."""


class BadRecord(StreamrematError):
    """A record could not be processed; it goes to the dead letters, never stops a task.

    ``stage`` says where it failed (``value``, ``step``, ``key``, ``timestamp``,
    ``aggregate``; for a window result: ``result``, ``output``) so dead-letter
    headers and metrics can group by it.
    """

    def __init__(self, stage: str, reason: str) -> None:
        super().__init__(f"{stage}: {reason}")
        self.stage = stage
        self.reason = reason


def reason_of(exc: BaseException) -> str:
    """The dead-letter reason for an exception raised by user code or an encoder."""
    return exc.reason if isinstance(exc, BadRecord) else f"{type(exc).__name__}: {exc}"


class StateFormatError(StreamrematError):
    """Encoded task state could not be decoded (wrong version, truncated, or garbage)."""
