"""The batch fast path: the common operator shapes folded a whole batch at a time.

Shapes: a dict of ``Count()``, ``Sum``, ``Min``, ``Max``, ``Mean`` of a field (or
of the whole value), or a lone ``Min``, ``Max`` or ``Mean`` (a lone ``Count`` or
``Sum`` too where the native fold is built; in Python it has a loop of its own in
the general path, as fast), over tumbling or hopping windows, keyed by the record
key, timed by the record timestamp or a value field, with no steps and the
built-in JSON (or, for ``Count()``, raw) value serde. Everything else, and every
batch the fast path can't prove clean, takes ``Task``'s general path.

Where the optional extension ``streamremat_native`` (``native/``, Rust) is
installed, a batch goes to its ``Folder.fold`` first: the same proof and fold
(its JSON scanner accepts a subset of what orjson does, with the same values;
numbers it can't fold exactly as Python, e.g. ints past 64 bits, make it decline),
into the same ``FixedWindowState`` dicts, with nothing touched when it declines.
A declined batch goes on as below. ``STREAMREMAT_NATIVE=0`` turns it off.
There the state itself is native too (``core/native_state.py``: the entries in a
``Table``, not in dicts; ``STREAMREMAT_NATIVE_STATE=0`` keeps the dicts): the
native fold, and the Python fold's proven columns, go into the table.

How a batch goes in Python (``FastPath.fold``):

1. Column extraction at C speed: keys, timestamps and values with ``map`` and
   ``attrgetter``; the values decoded with ``map(orjson.loads, ...)`` (the very
   decoder of the general path, so what is bad JSON is exactly the same); each
   aggregated field with ``map(itemgetter(field), ...)``.
2. Proof that the general path would take every record: no key or value is None,
   every timestamp is an int >= 0, every value is a dict holding the fields, every
   item has a type the aggregation checks for (``set(map(type, column))``). If any
   check fails, nothing has been touched: the whole batch goes the general way,
   which finds the bad records and dead-letters them with their reasons.
3. The fold: a loop generated for the shape (one line per aggregation, no call
   per record), over the same ``FixedWindowState`` dicts with the same
   accumulators in the same order as ``Aggregator.add`` builds them, so results,
   late records, failed folds and checkpoint bytes are those of the general path.
   Float sums stay left to right per (window, key), as there.

Why not msgspec, polars, pyarrow or numpy (measured in docs/benchmarks.md):
msgspec's batch decode is ~2x orjson's but accepts what orjson refuses (invalid
UTF-8, out-of-range floats in fields it skips, records that only parse joined),
so dead letters would differ; polars and pyarrow cost more per batch than they
save at 1,000 records; numpy's grouping needs a key -> index dict per record first.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Sequence
from operator import attrgetter, itemgetter
from types import ModuleType
from typing import Any

import orjson

from streamremat.core.aggregators import Aggregator, Composite, Count, Max, Mean, Min, Sum
from streamremat.core.exceptions import reason_of
from streamremat.core.native_state import NativeWindowState
from streamremat.core.records import SourceRecord
from streamremat.core.serdes import JsonSerde, RawSerde
from streamremat.core.window_state import NO_TIME, Failure, FixedWindowState

native_module: ModuleType | None
try:
    import streamremat_native as native_module
except ImportError:  # not built (no Rust toolchain): the Python fold below
    native_module = None

#: False: every task takes the general path (the benchmarks' A/B switch)
enabled = True
#: False: the native fold is not used even where it is installed (A/B, fallback tests)
native_enabled = os.environ.get("STREAMREMAT_NATIVE", "1") != "0"
#: False: with the native fold, the state stays in Python dicts (no native table; A/B)
native_state_enabled = os.environ.get("STREAMREMAT_NATIVE_STATE", "1") != "0"

_KEY, _VALUE, _TIME = attrgetter("key"), attrgetter("value"), attrgetter("timestamp")
_NUMBERS = frozenset((int, float))
_INTS = frozenset((int,))
_STRS = frozenset((str,))

#: per kind: the new accumulator and the statements that fold ``x`` into ``a`` in
#: place ({a}: the accumulator expression, {x}: the item), exactly as ``add`` does
#: it starting from ``zero()``
_NEW = {
    "count": "0 + 1",
    "sum": "0 + {x}",
    "min": "{x}",
    "max": "{x}",
    "mean": "[0 + {x}, 1]",
}
_UPDATE = {
    "count": ["{a} = {a} + 1"],
    "sum": ["{a} = {a} + {x}"],
    "min": ["m = {a}", "{a} = {x} if m is None or {x} < m else m"],
    "max": ["m = {a}", "{a} = {x} if m is None or {x} > m else m"],
    "mean": ["m = {a}", "m[0] += {x}", "m[1] += 1"],
}


def _kind(agg: Aggregator) -> str | None:
    """The fast-path kind of a built-in aggregation, None if it has none."""
    kinds: dict[type, str] = {Sum: "sum", Min: "min", Max: "max", Mean: "mean"}
    if type(agg) is Count:
        return "count" if not agg.needs_value else None
    kind = kinds.get(type(agg))
    if kind is None or agg.calls_user_code:
        return None
    return kind


class FastPath:
    """The batch fold of one task whose operator has a fast-path shape."""

    def __init__(
        self, state: FixedWindowState, kinds: Sequence[str], fields: Sequence[str | None],
        composite: bool, decode: bool, time_field: str | None,
    ) -> None:
        self.state = state
        self.kinds = tuple(kinds)
        self._decode = decode
        self._time_field = time_field
        # One column per aggregation that reads the value (Count doesn't).
        self._columns: list[tuple[Callable[[Any], Any] | None, frozenset[type], frozenset[type]]]
        self._columns = []
        for kind, field in zip(kinds, fields, strict=True):
            if kind == "count":
                continue
            get = None if field is None else itemgetter(field)
            # Min and Max also take strings (Min.check), but not mixed with numbers.
            alt = _STRS if kind in ("min", "max") else _NUMBERS
            self._columns.append((get, _NUMBERS, alt))
        self._reads_values = time_field is not None or bool(self._columns)
        hopping = state.advance != state.size
        #: the Python fold, None for a lone Count or Sum (the general path's loop)
        self._fold = (None if self.kinds in (("count",), ("sum",)) and not composite
                      else _compile(self.kinds, composite, hopping))
        #: the native fold, None where it is not installed or not enabled
        self.native: Any = None
        if native_module is not None and native_enabled:
            try:
                self.native = native_module.Folder(
                    list(self.kinds), list(fields), time_field, decode, composite, hopping)
            except ValueError:  # a shape it doesn't take (e.g. many fields)
                self.native = None
        if (self.native is not None and native_module is not None and native_state_enabled
                and not state.windows):
            # the entries in the native table (core/native_state.py), not in dicts
            table = native_module.Table(list(self.kinds), composite, state.size,
                                        state.advance, state.grace)
            native = NativeWindowState(state.agg, state.size, state.advance, state.grace, table)
            native.exact_sizes = state.exact_sizes
            self.state = native

    @classmethod
    def for_task(
        cls, state: Any, agg: Aggregator, value_serde: Any, plain: bool,
        time_field: str | None,
    ) -> FastPath | None:
        """The fast path for this shape, or None when only the general path can run it.
        ``plain``: no steps, no ``key_by``, no callable ``timestamp_by``."""
        if not enabled or not plain or type(state) is not FixedWindowState:
            return None
        parts = agg.parts if isinstance(agg, Composite) else (agg,)
        kinds = [_kind(p) for p in parts]
        native = native_module is not None and native_enabled
        if kinds in (["count"], ["sum"]) and not isinstance(agg, Composite) and not native:
            # A lone Count or Sum has its own tight loop in the general path, as fast
            # as the Python fold (bench/core_throughput.py): nothing to gain
            return None
        if any(k is None for k in kinds):
            return None
        fields = [p.field_names[0] if p.field_names else None for p in parts]
        reads_value = time_field is not None or any(k != "count" for k in kinds)
        if type(value_serde) is JsonSerde:
            decode = True
        elif type(value_serde) is RawSerde and not reads_value:
            decode = False
        else:
            return None
        return cls(state, [k for k in kinds if k is not None], fields,
                   isinstance(agg, Composite), decode, time_field)

    def fold(
        self, records: Sequence[SourceRecord], decoded: Any = None,
    ) -> tuple[list[int], list[int], list[Failure]] | None:
        """Fold the whole batch; return (late indices, their event times, failed
        folds), or None, having changed nothing, when some record needs the general
        path. ``decoded``: offset -> value already decoded by the caller (shared
        decode; the native fold reads the raw values, which decode to the same)."""
        if not records:  # all skipped by the replay horizon: nothing to prove
            return None
        state = self.state
        # the native table (core/native_state.py): its own folds, never the dicts'
        table = type(state) is NativeWindowState and state.table is not None
        if self.native is not None:
            if table:
                assert isinstance(state, NativeWindowState)
                table_got = state.fold_native(self.native, _listed(records))
                if table_got is not None:
                    return table_got[0], table_got[1], []
            else:
                got = self.native.fold(state, _listed(records))
                if got is not None:
                    return got[0], got[1], []
        elif table:
            return None
        if self._fold is None:
            return None
        keys = list(map(_KEY, records))
        if None in keys:
            return None
        values: list[Any] = []
        if self._decode:
            if decoded is not None:
                try:
                    values = [decoded[r.offset] for r in records]
                except KeyError:  # not decodable: the general path says why
                    return None
            else:
                raw = list(map(_VALUE, records))
                if None in raw:
                    return None
                try:
                    if self._reads_values:
                        values = list(map(orjson.loads, raw))
                    else:  # Count() only: decoded to find bad JSON, values not kept
                        deque(map(orjson.loads, raw), maxlen=0)
                except orjson.JSONDecodeError:
                    return None
        columns = []
        needs_dicts = self._time_field is not None or any(g for g, _, _ in self._columns)
        if needs_dicts and set(map(type, values)) != {dict}:
            return None
        try:
            if self._time_field is None:
                times = list(map(_TIME, records))
            else:
                times = list(map(itemgetter(self._time_field), values))
            for get, allowed, alt in self._columns:
                col = values if get is None else list(map(get, values))
                types = set(map(type, col))
                if not (types <= allowed or types <= alt):
                    return None
                columns.append(col)
        except KeyError:
            return None
        if not set(map(type, times)) <= _INTS or min(times) < 0:
            return None
        if table:  # the Python proof took it: the table folds the columns
            assert isinstance(state, NativeWindowState)
            got_late = state.fold_columns(records, keys, times, columns)
            if got_late is not None:
                return got_late, [times[i] for i in got_late], []
            state.to_python()  # a number only Python folds exactly
        late: list[int] = []
        failed: list[Failure] = []
        self._fold(self.state, records, keys, times, columns, late, failed)
        return late, [times[i] for i in late], failed


def _listed(records: Sequence[SourceRecord]) -> list[SourceRecord]:
    return records if type(records) is list else list(records)


def _compile(kinds: tuple[str, ...], composite: bool, hopping: bool) -> Callable[..., None]:
    """Generate the fold loop for one shape: the same steps as
    ``FixedWindowState._add_tumbling``/``_add_hopping`` with ``add`` inlined."""
    items = []
    col = 0
    for kind in kinds:
        if kind == "count":
            items.append("")
        else:
            items.append(f"x{col}")
            col += 1
    if composite:
        new = "[" + ", ".join(_NEW[k].format(x=x) for k, x in zip(kinds, items, strict=True)) + "]"
        update = [
            line.format(a=f"acc[{j}]", x=x)
            for j, (k, x) in enumerate(zip(kinds, items, strict=True))
            for line in _UPDATE[k]
        ]
    else:
        new = _NEW[kinds[0]].format(x=items[0])
        # A lone accumulator is the value itself (except Mean's list): fold, then store.
        update = [line.format(a="acc", x=items[0]) for line in _UPDATE[kinds[0]]]
        if kinds[0] != "mean":
            update.append("cur[key] = acc")
    names = [f"x{j}" for j in range(col)]
    unpack = "".join(f", {n}" for n in names)
    cols = "".join(f", c[{j}]" for j in range(col))
    body = _HOPPING if hopping else _TUMBLING
    assert hopping or _TRY_TUMBLING in body
    if not any(k in ("min", "max") for k in kinds):
        # nothing else can raise: counts and sums of checked numbers
        body = body.replace(_TRY_TUMBLING, _NO_TRY_TUMBLING).replace("        prev = st\n", "")
    src = body.format(
        unpack=unpack, cols=cols, new=new,
        update="\n".join(" " * 16 + line for line in update).lstrip(),
        update_12="\n".join(" " * 12 + line for line in update).lstrip(),
        update_h="\n".join(" " * 20 + line for line in update).lstrip(),
    )
    namespace: dict[str, Any] = {"NO_TIME": NO_TIME, "reason_of": reason_of}
    exec(compile(src, f"<fastpath {','.join(kinds)}>", "exec"), namespace)
    fold: Callable[..., None] = namespace["fold"]
    return fold


_TUMBLING = """
def fold(state, srcs, keys, times, c, late, failed):
    st, size, grace = state.stream_time, state.size, state.grace
    windows, dirty, firsts = state.windows, state.dirty, state.firsts
    cur_end = NO_TIME
    cur = cur_dirty = None
    for i, (key, t{unpack}) in enumerate(zip(keys, times{cols})):
        prev = st
        if t > st:
            st = t
        end = t - t % size + size
        if end + grace <= st:
            late.append(i)
            continue
        if end != cur_end:
            cur_end = end
            cur = windows.get(end)
            if cur is None:
                cur = windows[end] = {{}}
                firsts[end] = srcs[i].offset
            cur_dirty = dirty.get(end)
            if cur_dirty is None:
                cur_dirty = dirty[end] = set()
        acc = cur.get(key)
        if acc is None:
            cur[key] = {new}
        else:
            try:
                {update}
            except Exception as exc:
                failed.append((i, reason_of(exc)))
                state._unknown_first(t)
                st = prev
                continue
        cur_dirty.add(key)
    state.stream_time = st
"""

_TRY_TUMBLING = """
            try:
                {update}
            except Exception as exc:
                failed.append((i, reason_of(exc)))
                state._unknown_first(t)
                st = prev
                continue
"""
_NO_TRY_TUMBLING = """
            {update_12}
"""

_HOPPING = """
def fold(state, srcs, keys, times, c, late, failed):
    st, size, advance, grace = state.stream_time, state.size, state.advance, state.grace
    windows, dirty, firsts = state.windows, state.dirty, state.firsts
    for i, (key, t{unpack}) in enumerate(zip(keys, times{cols})):
        now = t if t > st else st
        is_late = False
        start = t - t % advance
        try:
            while start > t - size:
                end = start + size
                start -= advance
                if end + grace <= now:
                    is_late = True
                    continue
                cur = windows.get(end)
                if cur is None:
                    cur = windows[end] = {{}}
                    firsts[end] = srcs[i].offset
                acc = cur.get(key)
                if acc is None:
                    cur[key] = {new}
                else:
                    {update_h}
                cur_dirty = dirty.get(end)
                if cur_dirty is None:
                    cur_dirty = dirty[end] = set()
                cur_dirty.add(key)
        except Exception as exc:
            failed.append((i, reason_of(exc)))
            state._unknown_first(t)
            continue
        st = now
        if is_late:
            late.append(i)
    state.stream_time = st
"""
