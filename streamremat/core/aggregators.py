"""Aggregations: how a window folds the values of its records into one result.

An aggregator is a small protocol (``zero``, ``add``, ``merge``, ``result``,
``encode``, ``decode``) plus ``pick``, which takes the aggregated item out of a
record value. ``pick`` runs before any state is touched and is the only step
allowed to fail on bad input: a record whose value lacks the field goes to the
dead letters and leaves every accumulator untouched.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from streamremat.core.codec import (
    decode_json,
    decode_number,
    encode_json,
    encode_number,
    read_bytes,
    write_bytes,
)
from streamremat.core.exceptions import ConfigError, StateFormatError

Picker = str | Callable[[Any], Any] | None
_MISSING = object()


def _make_picker(of: Picker, what: str) -> Callable[[Any], Any] | None:
    if of is None:
        return None
    if isinstance(of, str):
        if not of:
            raise ConfigError(f"{what}: field name must not be empty")
        field = of

        def pick_field(value: Any) -> Any:
            try:
                return value[field]
            except (KeyError, TypeError, IndexError):
                raise KeyError(f"value has no field {field!r}") from None

        return pick_field
    if callable(of):
        return of
    raise ConfigError(f"{what}: expected a field name or a callable, got {of!r}")


class Aggregator:
    """Base class of the built-in aggregators; subclass it for a custom one.

    ``of`` names a field of the record value (``"amount"``) or is a callable that
    picks the item out of the value; None aggregates the whole value.
    """

    #: False when the aggregator never looks at the record value (``Count()``).
    needs_value: bool = True

    def __init__(self, of: Picker = None) -> None:
        self._picker = _make_picker(of, type(self).__name__)
        #: True when folding runs a callable of the user on the value (``of``)
        self.calls_user_code = callable(of)
        #: value fields read by name; checked against ``Operator(value_fields=...)``.
        self.field_names: tuple[str, ...] = (of,) if isinstance(of, str) else ()

    def pick(self, value: Any) -> Any:
        picker = self._picker
        item = value if picker is None else picker(value)
        self.check(item)
        return item

    def check(self, item: Any) -> None:
        """Raise if ``item`` can't be aggregated, so ``add`` never fails half-way."""

    def zero(self) -> Any:
        raise NotImplementedError

    def add(self, acc: Any, item: Any) -> Any:
        raise NotImplementedError

    def merge(self, a: Any, b: Any) -> Any:
        raise NotImplementedError

    def result(self, acc: Any) -> Any:
        return acc

    def encode(self, acc: Any) -> bytes:
        return encode_json(acc)

    def decode(self, data: bytes) -> Any:
        return decode_json(data)


def _check_number(item: Any) -> None:
    if isinstance(item, bool) or not isinstance(item, int | float):
        raise TypeError(f"expected a number, got {type(item).__name__}: {item!r}")
    if isinstance(item, float) and not math.isfinite(item):
        raise ValueError(f"expected a finite number, got {item!r}")


class Count(Aggregator):
    """Number of records; with ``of``, the number of records whose item is not None."""

    def __init__(self, of: Picker = None) -> None:
        super().__init__(of)
        self.needs_value = of is not None

    def pick(self, value: Any) -> Any:
        picker = self._picker
        return 1 if picker is None else (0 if picker(value) is None else 1)

    def zero(self) -> int:
        return 0

    def add(self, acc: int, item: int) -> int:
        return acc + item

    def merge(self, a: int, b: int) -> int:
        return a + b

    def encode(self, acc: int) -> bytes:
        return encode_number(acc)

    def decode(self, data: bytes) -> int:
        return int(decode_number(data))


class Sum(Aggregator):
    """Sum of a numeric field; exact while every item is an int."""

    def __init__(self, of: Picker = None) -> None:
        super().__init__(of)
        self._field = of if isinstance(of, str) else None

    def pick(self, value: Any) -> Any:
        # Hot path: a plain int or finite float under a field name, no extra calls.
        field = self._field
        if field is not None and type(value) is dict:
            item = value.get(field, _MISSING)
            t = type(item)
            if t is int or (t is float and item - item == 0.0):
                return item
        return super().pick(value)

    def check(self, item: Any) -> None:
        _check_number(item)

    def zero(self) -> int | float:
        return 0

    def add(self, acc: int | float, item: int | float) -> int | float:
        return acc + item

    def merge(self, a: int | float, b: int | float) -> int | float:
        return a + b

    def encode(self, acc: int | float) -> bytes:
        return encode_number(acc)

    def decode(self, data: bytes) -> int | float:
        return decode_number(data)


class Min(Aggregator):
    """Smallest item (numbers, or strings); None for a window without items."""

    def check(self, item: Any) -> None:
        if not isinstance(item, str):
            _check_number(item)

    def zero(self) -> Any:
        return None

    def add(self, acc: Any, item: Any) -> Any:
        return item if acc is None or item < acc else acc

    def merge(self, a: Any, b: Any) -> Any:
        return b if a is None else a if b is None else min(a, b)


class Max(Min):
    """Largest item (numbers, or strings); None for a window without items."""

    def add(self, acc: Any, item: Any) -> Any:
        return item if acc is None or item > acc else acc

    def merge(self, a: Any, b: Any) -> Any:
        return b if a is None else a if b is None else max(a, b)


class Mean(Aggregator):
    """Arithmetic mean of a numeric field; None for a window without items."""

    def check(self, item: Any) -> None:
        _check_number(item)

    def zero(self) -> list[Any]:
        return [0, 0]

    def add(self, acc: list[Any], item: int | float) -> list[Any]:
        acc[0] += item
        acc[1] += 1
        return acc

    def merge(self, a: list[Any], b: list[Any]) -> list[Any]:
        return [a[0] + b[0], a[1] + b[1]]

    def result(self, acc: list[Any]) -> float | None:
        return acc[0] / acc[1] if acc[1] else None

    def encode(self, acc: list[Any]) -> bytes:
        out = bytearray()
        write_bytes(out, encode_number(acc[0]))
        write_bytes(out, encode_number(acc[1]))
        return bytes(out)

    def decode(self, data: bytes) -> list[Any]:
        total, pos = read_bytes(data, 0)
        count, _ = read_bytes(data, pos)
        return [decode_number(total), decode_number(count)]


def _hashable(item: Any) -> Any:
    """Items are JSON values; lists and dicts become their canonical JSON bytes."""
    if isinstance(item, list | dict):
        return encode_json(item)
    return item


def _sort_key(item: Any) -> tuple[str, Any]:
    # Mixed types can't be compared; grouping by type name first keeps sorting total.
    if isinstance(item, bool):
        return ("bool", item)
    if isinstance(item, int | float):
        return ("number", item)
    if isinstance(item, str):
        return ("str", item)
    if isinstance(item, bytes):
        return ("bytes", item)
    return ("other", repr(item))


class DistinctCount(Aggregator):
    """Exact number of distinct items (keeps them all; see ApproxDistinct for big sets,
    in ``streamremat.core.sketches``)."""

    def check(self, item: Any) -> None:
        hash(_hashable(item))

    def pick(self, value: Any) -> Any:
        return _hashable(super().pick(value))

    def zero(self) -> set[Any]:
        return set()

    def add(self, acc: set[Any], item: Any) -> set[Any]:
        acc.add(item)
        return acc

    def merge(self, a: set[Any], b: set[Any]) -> set[Any]:
        return a | b

    def result(self, acc: set[Any]) -> int:
        return len(acc)

    def encode(self, acc: set[Any]) -> bytes:
        items = [x.decode("latin-1") if isinstance(x, bytes) else x for x in acc]
        tagged = [[isinstance(x, bytes), y] for x, y in zip(acc, items, strict=True)]
        return encode_json(sorted(tagged, key=lambda t: (t[0], _sort_key(t[1]))))

    def decode(self, data: bytes) -> set[Any]:
        return {y.encode("latin-1") if is_bytes else y for is_bytes, y in decode_json(data)}


class TopK(Aggregator):
    """The ``k`` items with the highest count (or summed ``weight``).

    Result: a list of ``(item, count)``, by count descending, then item ascending.
    Counts are exact: the window keeps a counter per distinct item.
    """

    def __init__(self, k: int, of: Picker = None, weight: Picker = None) -> None:
        super().__init__(of)
        if isinstance(k, bool) or not isinstance(k, int) or k <= 0:
            raise ConfigError(f"TopK k must be a positive int, got {k!r}")
        self.k = k
        self._weight = _make_picker(weight, "TopK weight")
        self.calls_user_code = self.calls_user_code or callable(weight)
        if isinstance(weight, str):
            self.field_names += (weight,)

    def pick(self, value: Any) -> tuple[Any, int | float]:
        picker = self._picker
        item = _hashable(value if picker is None else picker(value))
        hash(item)
        weight = 1 if self._weight is None else self._weight(value)
        _check_number(weight)
        return item, weight

    def zero(self) -> dict[Any, int | float]:
        return {}

    def add(self, acc: dict[Any, int | float], item: tuple[Any, int | float]) -> Any:
        key, weight = item
        acc[key] = acc.get(key, 0) + weight
        return acc

    def merge(self, a: dict[Any, int | float], b: dict[Any, int | float]) -> Any:
        out = dict(a)
        for key, n in b.items():
            out[key] = out.get(key, 0) + n
        return out

    def result(self, acc: dict[Any, int | float]) -> list[tuple[Any, int | float]]:
        ranked = sorted(acc.items(), key=lambda kv: (-kv[1], _sort_key(kv[0])))
        return ranked[: self.k]

    def encode(self, acc: dict[Any, int | float]) -> bytes:
        pairs = sorted(([k, n] for k, n in acc.items()), key=lambda kv: _sort_key(kv[0]))
        return encode_json(pairs)

    def decode(self, data: bytes) -> dict[Any, int | float]:
        return {k: n for k, n in decode_json(data)}


class ListAggregator(Aggregator):
    """Base of the aggregators that keep every item: the accumulator is a list in
    arrival order, and merging two lists puts the earlier one first."""

    def zero(self) -> list[Any]:
        return []

    def add(self, acc: list[Any], item: Any) -> list[Any]:
        acc.append(item)
        return acc

    def merge(self, a: list[Any], b: list[Any]) -> list[Any]:
        return a + b


class Collect(ListAggregator):
    """Every item, in arrival order. When a record bridges two sessions, the merged
    session's items are the earlier session's, then the later one's (as Kafka
    Streams merges sessions), then the bridging record's."""


class Composite(Aggregator):
    """Several named aggregations at once; the result is a dict by name."""

    def __init__(self, parts: Mapping[str, Aggregator]) -> None:
        super().__init__(None)
        if not parts:
            raise ConfigError("an aggregation dict needs at least one entry")
        self.names = tuple(parts)
        self.parts = tuple(as_aggregator(p) for p in parts.values())
        self.needs_value = any(p.needs_value for p in self.parts)
        self.field_names = tuple(f for p in self.parts for f in p.field_names)
        self._picks = tuple(p.pick for p in self.parts)
        self._adds = tuple(enumerate(p.add for p in self.parts))

    def pick(self, value: Any) -> list[Any]:
        return [pick(value) for pick in self._picks]

    def zero(self) -> list[Any]:
        return [p.zero() for p in self.parts]

    def add(self, acc: list[Any], item: list[Any]) -> list[Any]:
        for i, add in self._adds:
            acc[i] = add(acc[i], item[i])
        return acc

    def merge(self, a: list[Any], b: list[Any]) -> list[Any]:
        return [p.merge(x, y) for p, x, y in zip(self.parts, a, b, strict=True)]

    def result(self, acc: list[Any]) -> dict[str, Any]:
        return {n: p.result(x) for n, p, x in zip(self.names, self.parts, acc, strict=True)}

    def encode(self, acc: list[Any]) -> bytes:
        out = bytearray()
        for part, x in zip(self.parts, acc, strict=True):
            write_bytes(out, part.encode(x))
        return bytes(out)

    def decode(self, data: bytes) -> list[Any]:
        accs, pos = [], 0
        for part in self.parts:
            raw, pos = read_bytes(data, pos)
            accs.append(part.decode(raw))
        if pos != len(data):
            raise StateFormatError("trailing bytes after composite accumulator")
        return accs


_PROTOCOL = ("zero", "add", "merge", "result", "encode", "decode")


class _UserAggregator(Aggregator):
    """Adapts an object implementing the protocol without subclassing Aggregator."""

    def __init__(self, impl: Any) -> None:
        super().__init__(None)
        self.calls_user_code = True
        self._impl = impl
        self.zero = impl.zero  # type: ignore[method-assign]
        self.add = impl.add  # type: ignore[method-assign]
        self.merge = impl.merge  # type: ignore[method-assign]
        self.result = impl.result  # type: ignore[method-assign]
        self.encode = impl.encode  # type: ignore[method-assign]
        self.decode = impl.decode  # type: ignore[method-assign]
        self.field_names = tuple(getattr(impl, "field_names", ()))
        if hasattr(impl, "pick"):
            self.pick = impl.pick  # type: ignore[method-assign]


def as_aggregator(spec: Any) -> Aggregator:
    """Accept an Aggregator, a dict of them, or any object with the protocol's methods."""
    if isinstance(spec, Aggregator):
        return spec
    if isinstance(spec, Mapping):
        return Composite(spec)
    missing = [m for m in _PROTOCOL if not callable(getattr(spec, m, None))]
    if missing:
        raise ConfigError(
            f"{spec!r} is not an aggregation: it lacks {', '.join(missing)}; "
            "use Count(), Sum('field'), ... or a dict of them"
        )
    return _UserAggregator(spec)
