"""Durations given by users as integer milliseconds or as ``timedelta``."""

from __future__ import annotations

from datetime import timedelta

from streamremat.core.exceptions import ConfigError

Duration = int | timedelta


def to_ms(value: Duration, name: str, *, allow_zero: bool = True) -> int:
    """Return ``value`` as whole milliseconds, rejecting negatives and fractions clearly."""
    if isinstance(value, timedelta):
        ms = value / timedelta(milliseconds=1)
        if ms != int(ms):
            raise ConfigError(f"{name}={value!r} is not a whole number of milliseconds")
        out = int(ms)
    elif isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be int milliseconds or a timedelta, got {value!r}")
    else:
        out = value
    if out < 0 or (out == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ConfigError(f"{name} must be {bound} ms, got {out}")
    return out
