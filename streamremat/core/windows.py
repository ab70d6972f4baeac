"""Window definitions (DESIGN.md §4). Times are integer milliseconds of event time.

Every window has a *close time*: the smallest stream time at which it is closed.
A record is late for a window whose close time is <= the stream time after the
record was seen; a window is emitted once, when stream time reaches its close time.

* Tumbling / Hopping: windows ``[start, end)``; close time ``end + grace``.
* Sliding: windows ``[start, end]`` (inclusive, Kafka Streams ``SlidingWindows``);
  close time ``end + 1 + grace`` ("closed when stream-time > window-end + grace").
  A record's own window is ``[t - size, t]``, or ``[0, size]`` when ``t < size``.
* Session: ``[first, last]``; close time ``last + gap + 1 + grace``, so a record
  exactly ``gap`` after the last one still joins the session, as §4 requires.
"""

from __future__ import annotations

from dataclasses import dataclass

from streamremat.core.durations import Duration, to_ms
from streamremat.core.exceptions import ConfigError


class Window:
    """Base of the window definitions; ``kind`` is stored in encoded state."""

    kind: str = ""
    grace_ms: int = 0


@dataclass(frozen=True, init=False)
class Tumbling(Window):
    """Fixed, non-overlapping windows ``[k*size, (k+1)*size)`` aligned to epoch 0."""

    size_ms: int
    grace_ms: int
    kind = "tumbling"

    def __init__(self, size_ms: Duration, grace_ms: Duration = 0) -> None:
        object.__setattr__(self, "size_ms", to_ms(size_ms, "Tumbling size_ms", allow_zero=False))
        object.__setattr__(self, "grace_ms", to_ms(grace_ms, "Tumbling grace_ms"))


@dataclass(frozen=True, init=False)
class Hopping(Window):
    """Overlapping windows ``[k*advance, k*advance + size)`` for every k containing t."""

    size_ms: int
    advance_ms: int
    grace_ms: int
    kind = "hopping"

    def __init__(self, size_ms: Duration, advance_ms: Duration, grace_ms: Duration = 0) -> None:
        size = to_ms(size_ms, "Hopping size_ms", allow_zero=False)
        advance = to_ms(advance_ms, "Hopping advance_ms", allow_zero=False)
        if advance > size:
            raise ConfigError(
                f"Hopping advance_ms={advance} is larger than size_ms={size}: records between "
                "windows would be lost; use advance_ms <= size_ms (or Tumbling for equal)"
            )
        object.__setattr__(self, "size_ms", size)
        object.__setattr__(self, "advance_ms", advance)
        object.__setattr__(self, "grace_ms", to_ms(grace_ms, "Hopping grace_ms"))


@dataclass(frozen=True, init=False)
class Sliding(Window):
    """Kafka Streams ``SlidingWindows``: windows of ``size_ms`` time difference, created
    by records: ``[t - size, t]`` for each record and ``[t + 1, t + 1 + size]`` when a
    later record falls in it. Bounds are inclusive. No window starts below 0: a
    record with ``t < size`` goes in ``[0, size]`` instead of ``[t - size, t]``, as
    Kafka Streams does (``KStreamSlidingWindowAggregate.processEarly``)."""

    size_ms: int
    grace_ms: int
    kind = "sliding"

    def __init__(self, size_ms: Duration, grace_ms: Duration = 0) -> None:
        object.__setattr__(self, "size_ms", to_ms(size_ms, "Sliding size_ms", allow_zero=False))
        object.__setattr__(self, "grace_ms", to_ms(grace_ms, "Sliding grace_ms"))


@dataclass(frozen=True, init=False)
class Session(Window):
    """Per key, records whose timestamps chain within ``gap_ms`` (inclusive) form one
    session ``[first, last]``; a record that bridges two sessions merges them."""

    gap_ms: int
    grace_ms: int
    kind = "session"

    def __init__(self, gap_ms: Duration, grace_ms: Duration = 0) -> None:
        object.__setattr__(self, "gap_ms", to_ms(gap_ms, "Session gap_ms", allow_zero=False))
        object.__setattr__(self, "grace_ms", to_ms(grace_ms, "Session grace_ms"))
