"""The records the engine reads and the results it produces."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol


class SourceRecord(Protocol):
    """What the engine needs of an input record.

    aiokafka's ``ConsumerRecord`` has exactly these attributes, so the worker
    hands its batches to the engine without copying.
    """

    @property
    def key(self) -> bytes | None: ...

    @property
    def value(self) -> bytes | None: ...

    @property
    def timestamp(self) -> int | None: ...

    @property
    def offset(self) -> int: ...

    @property
    def headers(self) -> Any: ...


@dataclass(frozen=True, slots=True)
class Record:
    """An input record built by hand (tests, the TestDriver, benchmarks)."""

    key: bytes | None
    value: bytes | None
    timestamp: int | None
    offset: int
    headers: tuple[tuple[str, bytes], ...] = ()


# Not frozen: a frozen dataclass's __init__ sets each field through
# object.__setattr__, 3.3 us a result against 0.7 us here, and a window of 100k keys
# builds 100k of them. Treat it as immutable all the same.
@dataclass(slots=True)
class WindowResult:
    """A window's final value, emitted once when the window closes.

    ``key`` is the encoded key (what goes to the sink); ``end_ms`` is exclusive for
    tumbling and hopping windows and inclusive for sliding and session windows.
    """

    key: bytes
    start_ms: int
    end_ms: int
    value: Any


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """An input record that could not be processed, with why."""

    record: SourceRecord
    stage: str
    reason: str


@dataclass(frozen=True, slots=True)
class FailedResult:
    """A closed window whose result could not be produced or serialized: an
    aggregation's ``merge`` or ``result`` raised (stage ``result``), or the
    operator's ``output`` or output serde did (stage ``output``). It goes to the
    dead letters instead of the sink; ``value`` is the result when there is one."""

    key: bytes
    start_ms: int
    end_ms: int
    stage: str
    reason: str
    value: Any = None


@dataclass(frozen=True, slots=True)
class LateRecord:
    """An input record that was late for at least one of its windows (DESIGN §4):
    for hopping windows some of its windows may still have taken it; for sliding
    windows, its own window ``[t - size, t]`` (``[0, size]`` if ``t < size``) had closed."""

    record: SourceRecord
    timestamp_ms: int
    stream_time_ms: int


class Forward(NamedTuple):
    """A record a repartition stage writes to its internal topic: the new key, the
    value (the source bytes when no step changed it) and the event time. A tuple:
    one is built per source record."""

    record: SourceRecord
    key: bytes
    value: bytes
    timestamp_ms: int


@dataclass(slots=True)
class BatchOutput:
    """Everything one batch produced, in order; the runtime sends it to the sinks.

    ``results`` is a list, or the ``core.closing.ClosedWindows`` of a task's
    closing, which builds them on demand (and can hand them out in slices); the
    results whose ``result`` raises join ``failed`` as they are built."""

    results: Sequence[WindowResult] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    late: list[LateRecord] = field(default_factory=list)
    forwards: list[Forward] = field(default_factory=list)
    #: windows that closed but failed into the dead letters instead of the sink
    failed: list[FailedResult] = field(default_factory=list)
