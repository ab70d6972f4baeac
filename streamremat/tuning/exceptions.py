"""Errors raised by the tuning layer."""

from __future__ import annotations


class TuningError(Exception):
    """Base class of every error raised by ``streamremat.tuning``."""


class TunerConfigError(TuningError, ValueError):
    """A ``TunerConfig`` or scenario value is out of range; the message names the fix."""


class TunerStateError(TuningError, ValueError):
    """Persisted tuner state cannot be decoded (corrupt, or written by a newer version)."""
