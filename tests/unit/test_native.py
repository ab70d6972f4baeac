"""The native fast path (``native/``, the ``streamremat_native`` module) against the
Python fast path, the general path and the brute-force reference.

* Its JSON scanner accepts a subset of what orjson accepts, with the same values:
  edge-case byte strings (numbers at every limit, escapes, surrogates, invalid
  UTF-8, whitespace, duplicate keys, nesting, random edits) thrown at both.
* The same random streams (bad records, late records, tumbling and hopping, event
  time from a field, ints past 64 bits, int/float mixes, checkpoints with deltas
  and recompute plans, crashes and restores) give identical outputs and
  byte-identical checkpoints through the three paths.

Where cargo is, ``make test`` sets STREAMREMAT_REQUIRE_NATIVE=1: then a missing
module fails here instead of skipping.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamremat import RAW, Count, Max, Mean, Min, Sum, Tumbling
from streamremat.core import fastpath
from streamremat.core.records import Record
from streamremat.core.recovery import PartitionTasks
from streamremat.core.task import Task
from tests.unit.fastpath_support import SHAPES, T0, WINDOWS, canon, keys, make_op, run_task, streams
from tests.unit.reference import RefWindow, run_reference

REQUIRED = os.environ.get("STREAMREMAT_REQUIRE_NATIVE") == "1"
native = fastpath.native_module
needs_native = pytest.mark.skipif(
    native is None and not REQUIRED,
    reason="streamremat_native is not built (no cargo here): the Python fast path runs "
    "(make venv builds it where cargo is)",
)
MISSING = object()
#: shapes the native fold takes beyond the Python fast path's
NATIVE_SHAPES: dict[str, Any] = {**SHAPES, "lone_count": Count, "lone_sum": lambda: Sum("x")}


def test_native_module_is_loaded_where_it_must_be() -> None:
    if REQUIRED:
        assert native is not None, (
            "STREAMREMAT_REQUIRE_NATIVE=1 but streamremat_native does not import: "
            "see .venv/native-build.log and rerun make venv")
    task = Task(make_op(Tumbling(100), {"n": Count(), "s": Sum("x")}))
    assert task.fast is not None
    assert (task.fast.native is not None) == (native is not None and fastpath.native_enabled)


# -- the JSON scanner against orjson -----------------------------------------------------

def _same(tag: str, got: Any, ref: Any) -> None:
    """The scanner's (tag, value) is orjson's value."""
    if tag == "missing":
        assert ref is MISSING
    elif tag == "int":
        assert type(ref) is int and ref == got
    elif tag == "float":
        assert type(ref) is float and ref == got
        assert math.copysign(1.0, ref) == math.copysign(1.0, got)  # -0.0 stays -0.0
    elif tag == "str":
        assert type(ref) is str and got.decode() == ref
    elif tag == "escaped_str":
        assert type(ref) is str
    else:
        assert tag == "other" and (ref is None or type(ref) in (bool, list, dict))


def _agree(doc: bytes) -> tuple[bool, bool]:
    """native accepted => orjson accepted, with the same picked values; returns
    whether the field scan and the whole-document scan accepted."""
    assert native is not None
    picked = native.scan_json(doc, ["x", "ts"])
    whole = native.scan_json(doc)
    try:
        ref: Any = orjson.loads(doc)
        ok = True
    except orjson.JSONDecodeError:
        ok = False
    if picked is not None:
        assert ok, doc
        assert type(ref) is dict, doc
        for (tag, got), name in zip(picked, ["x", "ts"], strict=True):
            _same(tag, got, ref.get(name, MISSING))
    if whole is not None:
        assert ok, doc
        _same(whole[0], whole[1], ref)
    return picked is not None, whole is not None


_WS = st.sampled_from([b"", b"", b" ", b"\t", b"\n", b"\r", b"  ", b"\x0c", b"\xc2\xa0"])
_NUMBERS = st.one_of(
    st.integers(-(2**70), 2**70).map(lambda i: str(i).encode()),
    st.integers(-10, 300).map(lambda i: str(i).encode()),
    st.floats(allow_nan=False, allow_infinity=False).map(lambda f: repr(f).encode()),
    st.builds(lambda m, e, c: f"{m}{c}{e}".encode(), st.integers(-(10**20), 10**20),
              st.integers(-420, 420), st.sampled_from(["e", "E", "e+", "E-"])),
    st.builds(lambda a, b: f"{a}.{b}".encode(), st.integers(-(10**6), 10**6),
              st.integers(0, 10**25)),
    st.sampled_from([
        b"-0", b"-0.0", b"0.0", b"1E5", b"1e+5", b"1e-400", b"-1e-400", b"1e400", b"-1e400",
        b"1.7976931348623157e308", b"1.7976931348623159e308", b"2.2250738585072011e-308",
        b"4.9e-324", b"2.4703282292062328e-324", b"01", b"-01", b"1.", b".5", b"+1", b"-",
        b"1e", b"1e+", b"0x10", b"NaN", b"Infinity", b"-Infinity", b"9223372036854775807",
        b"9223372036854775808", b"-9223372036854775808", b"-9223372036854775809",
        b"18446744073709551615", b"18446744073709551616", b"1" + b"0" * 400,
        b"0." + b"0" * 400 + b"1", b"9007199254740993", b"9007199254740993.0", b"1_0",
    ]),
)
_STRINGS = st.one_of(
    st.text(max_size=6).map(lambda s: orjson.dumps(s)),
    st.text(max_size=6).map(lambda s: ('"' + s.encode("ascii", "backslashreplace")
                                       .decode().replace('"', '\\"') + '"').encode()),
    st.sampled_from([
        b'"\\ud800"', b'"\\udc00"', b'"\\ud800\\udc00"', b'"\\uD83D\\uDE00"', b'"\\ud800x"',
        b'"\\ud800\\u0041"', b'"\\u00e9"', b'"\\u00E9"', b'"\\/"', b'"\\a"', b'"\\u12"',
        b'"\\u12g4"', b'"\x01"', b'"\x1f"', b'"\x7f"', b'"\xff"', b'"\xed\xa0\x80"',
        b'"\xc3\xa9"', b'"\xe2\x82"', b'"\xe2\x82\xac"', b'"\xf0\x9f\x98\x80"', b'"\xc0\xaf"',
        b'"\xf4\x90\x80\x80"', b'"\\u0000"', b'"a\\', b'"abc', b'"\\"',
    ]),
)
_NAMES = st.sampled_from([b'"x"', b'"ts"', b'"y"', b'"\\u0078"', b'"x "', b"x", b'"t\\u0073"'])


def _json(children: Any) -> Any:
    arrays = st.builds(
        lambda ws, xs, trail: b"[" + ws + b",".join(xs) + trail + b"]",
        _WS, st.lists(children, max_size=4), st.sampled_from([b"", b"", b","]))
    members = st.builds(lambda k, w1, w2, v: k + w1 + b":" + w2 + v, _NAMES, _WS, _WS, children)
    objects = st.builds(
        lambda ws, ms, trail: b"{" + ws + b",".join(ms) + trail + b"}",
        _WS, st.lists(members, max_size=4), st.sampled_from([b"", b"", b","]))
    return arrays | objects


_SCALARS = _NUMBERS | _STRINGS | st.sampled_from([b"true", b"false", b"null", b"tru", b"nul"])
_VALUES = st.recursive(_SCALARS, _json, max_leaves=12)


@st.composite
def documents(draw: Callable[..., Any]) -> bytes:
    """A top-level object holding x and ts most of the time (else any value), framed
    by whitespace, then maybe a few random edits."""
    if draw(st.integers(0, 9)) < 8:
        members = [b'"x":' + draw(_VALUES), b'"ts":' + draw(_VALUES)]
        members += draw(st.lists(st.builds(lambda k, v: k + b":" + v, _NAMES, _VALUES),
                                 max_size=3))
        order = draw(st.permutations(members))
        body = b"{" + b",".join(order) + b"}"
    else:
        body = draw(_VALUES)
    doc = bytearray(draw(_WS) + body + draw(_WS))
    for _ in range(draw(st.sampled_from([0, 0, 0, 1, 2, 3]))):
        at = draw(st.integers(0, len(doc)))
        how = draw(st.sampled_from(["insert", "delete", "replace"]))
        byte = draw(st.sampled_from([0x00, 0x0C, 0x22, 0x2C, 0x5C, 0x7B, 0x7D, 0x30, 0x2D,
                                     0x2E, 0x65, 0x80, 0xBF, 0xC3, 0xED, 0xFF]))
        if how == "insert":
            doc.insert(at, byte)
        elif at < len(doc):
            if how == "delete":
                del doc[at]
            else:
                doc[at] = byte
    return bytes(doc)


@needs_native
@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=documents())
def test_scanner_accepts_only_what_orjson_accepts_with_the_same_values(doc: bytes) -> None:
    _agree(doc)


@needs_native
def test_scanner_edge_cases() -> None:
    """Clean documents it must take (so the property above is not vacuous) and the
    edges orjson refuses even in a field nobody reads."""
    taken = [
        b'{"x": 1.5e3, "ts": 5}', b' {"x":-0.0,"ts":9223372036854775807}\n',
        b'{"x":-9223372036854775808,"ts":0}', b'{"ts":1,"x":2,"x":3.25}',
        b'{"y":{"a":[1,2,{"b":null}],"c":"\\u00e9\\ud83d\\ude00"},"x":"\xc3\xa9","ts":1}',
        b'{"x":2.2250738585072011e-308,"ts":4.9e-324}', b'{"x":1e-400}', b"{}",
        b'{"x":"a\\"b","ts":true}', b'{"\\u0041":1}',
    ]
    for doc in taken:
        assert _agree(doc)[1], doc
    assert _agree(b'{"ts":1,"x":2,"x":3.25}')[0]
    refused = [
        b'{"x":1,"y":1e400}', b'{"x":1,"y":"\xff"}', b'{"x":1,"y":"\\ud800"}',
        b'{"x":1,"y":01}', b'{"x":1,}', b'\xef\xbb\xbf{"x":1}', b'\x0c{"x":1}',
        b'{"x":1} 2', b'{"x":1,"y":"\x01"}', b'{"x":18446744073709551615}',
        b"[" * 70 + b"]" * 70,
    ]
    for doc in refused:
        assert _agree(doc) == (False, False), doc


# -- the fold: native vs Python fast path vs general path ---------------------------------

class _Spy:
    """Counts the batches the native fold took."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.calls, self.taken = inner, 0, 0

    def fold(self, state: Any, records: Any) -> Any:
        got = self.inner.fold(state, records)
        self.calls += 1
        self.taken += got is not None
        return got


def _mode(task: Task, mode: str) -> Task:
    """Set a task built with the native fold to take ``mode``'s path."""
    assert task.fast is not None and task.fast.native is not None, "expected the native fold"
    if mode == "native":
        task.fast.native = _Spy(task.fast.native)
    elif mode == "python":
        task.fast.native = None
    else:
        task.fast = None
    return task


def _build(make: Callable[[], Task], mode: str) -> Task:
    """The native fold into the Python state's dicts (the native table is
    ``test_native_state.py``'s)."""
    saved = fastpath.native_enabled, fastpath.native_state_enabled
    fastpath.native_enabled, fastpath.native_state_enabled = True, False
    try:
        return _mode(make(), mode)
    finally:
        fastpath.native_enabled, fastpath.native_state_enabled = saved


MODES = ("native", "python", "general")
#: numbers at the limits of i64 and of exact int/float comparison
edge_numbers = st.one_of(
    st.integers(-50, 50),
    st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False),
    st.sampled_from([2**63 - 1, -(2**63), 2**62, 2**53, 2**53 + 1, float(2**53), -0.0, 0.1,
                     9.5, 1e16, 2**63, -(2**63) - 1]),
)


@st.composite
def edge_streams(draw: Callable[..., Any]) -> list[Record]:
    n = draw(st.integers(0, 60))
    recs = []
    for i in range(n):
        x = draw(edge_numbers)
        recs.append(Record(draw(keys), json.dumps({"x": x}).encode(),
                           T0 + draw(st.integers(0, 500)), i))
    return recs


@needs_native
@pytest.mark.parametrize("window", sorted(WINDOWS))
@pytest.mark.parametrize("shape", sorted(NATIVE_SHAPES))
@settings(max_examples=20, deadline=None)
@given(stream=streams(), edge=edge_streams(), cut=st.integers(1, 25),
       snaps=st.sets(st.integers(0, 10)))
def test_native_equals_python_and_general_path(
    window: str, shape: str, stream: list[Record], edge: list[Record], cut: int,
    snaps: set[int],
) -> None:
    op = make_op(WINDOWS[window](), NATIVE_SHAPES[shape]())
    for recs in (stream, edge):
        batches = [recs[i : i + cut] for i in range(0, len(recs), cut)]
        seen = [run_task(_build(lambda: Task(op), m), batches, snaps) for m in MODES]
        assert seen[0] == seen[1] == seen[2]


@needs_native
@pytest.mark.parametrize("window", sorted(WINDOWS))
@settings(max_examples=20, deadline=None)
@given(stream=streams(), cut=st.integers(1, 25))
def test_native_event_time_from_a_field_and_raw_counts(
    window: str, stream: list[Record], cut: int,
) -> None:
    batches = [stream[i : i + cut] for i in range(0, len(stream), cut)]
    for op in (make_op(WINDOWS[window](), {"n": Count(), "s": Sum("x")}, timestamp_by="ts"),
               make_op(WINDOWS[window](), {"n": Count()}, value_serde=RAW),
               make_op(WINDOWS[window](), Count(), value_serde=RAW)):
        seen = [run_task(_build(lambda op=op: Task(op), m), batches, {1}) for m in MODES]
        assert seen[0] == seen[1] == seen[2]


def _recover(op: Any, mode: str, recs: list[Record], cut: int, at: int, crash: int,
             pick: list[bool]) -> list[Any]:
    """Checkpoint at ``at`` (full, with a recompute plan), a delta at ``crash``, then
    a crash: restore the chain and replay from the plan's start (nothing emitted
    below the committed offset ``crash``) to the end."""
    task = _build(lambda: Task(op), mode)
    seen: list[Any] = []

    def batches(rs: list[Record]) -> list[list[Record]]:
        return [rs[i : i + cut] for i in range(0, len(rs), cut)]

    for b in batches(recs[:at]):
        task.process(b)
    groups = task.groups()
    plan = [g[0] for g, p in zip(groups, pick, strict=False) if p]
    chain = [task.snapshot(full=True, recompute=plan)]
    for b in batches(recs[at:crash]):
        task.process(b)
    chain.append(task.snapshot(full=False, recompute=plan))
    seen.append(chain)
    horizon = task.stream_time_ms
    restored = _build(lambda: Task.restore(op, 0, chain), mode)
    tasks = PartitionTasks([restored], crash if crash else None,
                           {} if horizon is None else {op.name: horizon})
    for b in batches(recs[tasks.start:]):
        for _, out in tasks.process(b):
            seen.append(([(r.key, r.start_ms, r.end_ms, canon(r.value)) for r in out.results],
                         [(d.record.offset, d.stage, d.reason) for d in out.dead_letters],
                         [(lr.record.offset, lr.timestamp_ms) for lr in out.late]))
    seen.append(restored.snapshot(full=True))
    return seen


@needs_native
@pytest.mark.parametrize("window", sorted(WINDOWS))
@settings(max_examples=25, deadline=None)
@given(stream=streams(), cut=st.integers(1, 20), at=st.integers(0, 80), more=st.integers(0, 40),
       pick=st.lists(st.booleans(), max_size=12))
def test_native_checkpoints_plans_and_restores_equal_the_other_paths(
    window: str, stream: list[Record], cut: int, at: int, more: int, pick: list[bool],
) -> None:
    op = make_op(WINDOWS[window](), SHAPES["all"]())
    at = min(at, len(stream))
    crash = min(at + more, len(stream))
    seen = [_recover(op, m, stream, cut, at, crash, pick) for m in MODES]
    assert seen[0] == seen[1] == seen[2]


@needs_native
@pytest.mark.parametrize("window", sorted(WINDOWS))
@settings(max_examples=40, deadline=None)
@given(xs=st.lists(st.tuples(keys, st.integers(0, 500), edge_numbers), max_size=60),
       cut=st.integers(1, 30))
def test_native_folds_clean_batches_and_matches_the_reference(
    window: str, xs: list[Any], cut: int,
) -> None:
    """The native fold takes every clean batch of numbers inside i64 (or declines it
    for an int/float mix it can't fold exactly) and the results are the reference's,
    computed with Python's own arbitrary-precision ints."""
    w = WINDOWS[window]()
    op = make_op(w, {"n": Count(), "s": Sum("x"), "lo": Min("x"), "hi": Max("x")})
    task = _build(lambda: Task(op), "native")
    stream = [Record(k, json.dumps({"x": x}).encode(), T0 + t, i)
              for i, (k, t, x) in enumerate(xs)]
    emitted, late = [], []
    for i in range(0, len(stream), cut):
        out = task.process(stream[i : i + cut])
        emitted += [(r.key, r.start_ms, r.end_ms, repr(r.value)) for r in out.results]
        late += [lr.record.offset for lr in out.late]

    def result(vs: list[Any]) -> str:
        total: Any = 0
        lo = hi = None
        for x in vs:  # left to right, as a stream folds
            total += x
            lo = x if lo is None or x < lo else lo
            hi = x if hi is None or x > hi else hi
        return repr({"n": len(vs), "s": total, "lo": lo, "hi": hi})

    ref = run_reference(RefWindow(window, 100, getattr(w, "advance_ms", 0), w.grace_ms),
                        # as decoded: orjson makes ints past 64 bits floats
                        [(r.key, r.timestamp, orjson.loads(r.value or b"")["x"])
                         for r in stream], result)  # type: ignore[arg-type]
    assert emitted == [(k, s, e, v) for k, s, e, v in ref.emissions]
    assert late == ref.late
    spy = task.fast.native if task.fast is not None else None
    assert isinstance(spy, _Spy)
    if all(type(x) is int and abs(x) < 2**40 for _, _, x in xs):
        assert spy.taken == spy.calls  # nothing to decline: small ints only


@needs_native
@pytest.mark.parametrize("window", sorted(WINDOWS))
def test_native_min_max_sum_of_int_float_pairs_are_pythons(window: str) -> None:
    """Every ordered pair of numbers where a float can't hold the int exactly (or only
    just can), folded into one window per pair: Min/Max compare as Python does (not
    through float conversion) and sums round as Python's int + float."""
    tricky = [2**53, 2**53 + 1, float(2**53), 2**53 - 1, 2**63 - 1, float(2**63), -(2**63),
              float(-(2**63)), -(2**63) + 1, 2**62 + 1, float(2**62), 0.5, 1, 0, -0.0,
              -(2**53) - 1, float(-(2**53)), 1e300, -1e300]
    batches, fits = [], 0
    for a in tricky:
        for b in tricky:
            key = json.dumps(f"{a!r},{b!r}").encode()
            batches.append([Record(key, json.dumps({"x": x}).encode(), T0, len(batches) * 2 + j)
                            for j, x in enumerate((a, b))])
            # an int sum past i64 is declined (Python's big ints), the rest folded here
            fits += not (type(a) is type(b) is int and not -(2**63) <= a + b < 2**63)
    batches.append([Record(b'"end"', b'{"x": 0}', T0 + 10_000, len(batches) * 2)])
    op = make_op(WINDOWS[window](), {"n": Count(), "s": Sum("x"), "lo": Min("x"),
                                     "hi": Max("x"), "m": Mean("x")})
    runs = [run_task(_build(lambda: Task(op), m), batches, {0, 5}) for m in ("native", "general")]
    assert runs[0] == runs[1]
    task = _build(lambda: Task(op), "native")
    for batch in batches:
        task.process(batch)
    spy = task.fast.native if task.fast is not None else None
    assert isinstance(spy, _Spy) and spy.taken == fits + 1


class _DictRecord:
    """Attributes in the instance dict (as aiokafka's ConsumerRecord)."""

    def __init__(self, key: Any, value: Any, timestamp: Any, offset: int) -> None:
        self.key, self.value, self.timestamp, self.offset = key, value, timestamp, offset
        self.headers = ()


class _PropRecord(_DictRecord):
    """``key`` a property: it wins over the instance dict's ``key`` (a decoy)."""

    @property  # type: ignore[override]
    def key(self) -> Any:
        return self.__dict__["k"]

    @key.setter
    def key(self, k: Any) -> None:
        self.__dict__["k"] = k
        self.__dict__["key"] = b'"decoy"'


class _SlotsRecord:
    __slots__ = ("headers", "key", "offset", "timestamp", "value")

    def __init__(self, key: Any, value: Any, timestamp: Any, offset: int,
                 unset: str | None = None) -> None:
        self.key, self.value, self.timestamp, self.offset = key, value, timestamp, offset
        self.headers = ()
        if unset:
            delattr(self, unset)


class _GetattrRecord:
    """Attributes only through ``__getattr__``."""

    def __init__(self, key: Any, value: Any, timestamp: Any, offset: int) -> None:
        self._d = {"key": key, "value": value, "timestamp": timestamp, "offset": offset,
                   "headers": ()}

    def __getattr__(self, name: str) -> Any:
        return self._d[name]


@needs_native
@pytest.mark.parametrize("kind", ["record", "dict", "prop", "slots", "getattr", "consumer",
                                  "mixed"])
def test_native_reads_every_kind_of_record_as_getattr_does(kind: str) -> None:
    """The native fold reads a record's attributes as ``getattr`` does, whatever the
    records' class (slots, an instance dict, a property over it, ``__getattr__``,
    several classes in one batch): the same outputs and checkpoints as the general
    path, and the batch taken natively; a record with an unset attribute (not a
    SourceRecord) is declined, not an error."""
    from aiokafka.structs import ConsumerRecord

    def consumer(k: Any, v: Any, t: Any, o: int) -> Any:
        return ConsumerRecord(topic="in", partition=0, offset=o, timestamp=t, timestamp_type=0,
                              key=k, value=v, checksum=None, serialized_key_size=1,
                              serialized_value_size=1, headers=())

    makers: dict[str, Callable[..., Any]] = {
        "record": Record, "dict": _DictRecord, "prop": _PropRecord, "slots": _SlotsRecord,
        "getattr": _GetattrRecord, "consumer": consumer,
    }
    recs = []
    for i in range(40):
        make = makers[kind] if kind in makers else list(makers.values())[i % len(makers)]
        recs.append(make(b'"k%d"' % (i % 3), b'{"x": %d}' % i, T0 + 7 * i, i))
    op = make_op(Tumbling(100), {"n": Count(), "s": Sum("x")})
    batches = [recs[:25], recs[25:]]
    seen = [run_task(_build(lambda: Task(op), m), batches, {0}) for m in ("native", "general")]
    assert seen[0] == seen[1]
    task = _build(lambda: Task(op), "native")
    for batch in batches:
        task.process(batch)
    spy = task.fast.native if task.fast is not None else None
    assert isinstance(spy, _Spy) and spy.taken == 2
    unset = [*recs[:5], _SlotsRecord(b'"k"', b"{}", T0, 5, unset="value")]
    assert spy.inner.fold(task.state, unset) is None
