"""A task: one operator on one source partition, the unit of state and recovery.

``Task.process(batch)`` is the engine's whole per-record path: decode, stateless
steps, key and timestamp, window assignment, fold, then close due windows. It is
pure and deterministic: the same records in the same order give the same results
and byte-identical encoded state, however the records are split into batches.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from operator import attrgetter
from typing import Any

import xxhash

from streamremat.core.aggregators import Aggregator, Composite, Count
from streamremat.core.codec import (
    read_svarint,
    read_uvarint,
    write_svarint,
    write_uvarint,
)
from streamremat.core.exceptions import StateFormatError, reason_of
from streamremat.core.fastpath import FastPath
from streamremat.core.keyed_state import SessionState, SlidingState
from streamremat.core.operator import Operator
from streamremat.core.records import BatchOutput, DeadLetter, LateRecord, SourceRecord
from streamremat.core.remat_state import grows
from streamremat.core.window_state import (
    NO_TIME,
    Failure,
    FixedWindowState,
    Group,
    WindowState,
)
from streamremat.core.windows import Hopping, Session, Sliding, Tumbling, Window

STATE_MAGIC = b"SRS"
#: 2: per group first offsets and recompute groups (DESIGN §9); 1 still restores,
#: with every first offset unknown (so every group restored from it is stored)
STATE_VERSION = 2
READABLE_VERSIONS = (1, 2)
FULL = b"F"
DELTA = b"D"


def state_fingerprint(operator: Operator) -> bytes:
    """8 bytes that change when the window or aggregation changes shape, so state
    written by a different operator definition is refused instead of misread."""
    agg = operator.aggregator
    parts = [repr(operator.window), type(agg).__name__, ",".join(agg.field_names)]
    if isinstance(agg, Composite):
        parts.append(",".join(agg.names) + "|" + ",".join(type(p).__name__ for p in agg.parts))
    return xxhash.xxh64_digest("\x1f".join(parts).encode())


class Task:
    """One operator's state on one source partition."""

    def __init__(self, operator: Operator, partition: int = 0) -> None:
        self.operator = operator
        self.partition = partition
        self.state = _window_state(operator.window, operator.aggregator)
        self.state.exact_sizes = grows(operator.aggregator)
        #: the next source offset to read: the offset a checkpoint taken now restores to.
        self.next_offset: int | None = None
        self._fingerprint = state_fingerprint(operator)
        self._decode_value = operator.aggregator.needs_value or bool(
            operator.steps or operator.key_by or operator.timestamp_by
        ) or operator.value_serde.name != "raw"
        self._plain = not (operator.steps or operator.key_by or operator.timestamp_by)
        self._timestamp_from_record = operator.timestamp_by is None
        #: the decoded values may be shared with other tasks on the same records
        #: (``PartitionTasks`` decodes once): nothing of this operator runs user code
        #: on them, which might change them
        ts_by = operator.timestamp_by
        #: the batch fold for the common shapes (``core/fastpath.py``), None for the rest
        self.fast = FastPath.for_task(
            self.state, operator.aggregator, operator.value_serde,
            not (operator.steps or operator.key_by or callable(ts_by)),
            ts_by if isinstance(ts_by, str) else None,
        )
        if self.fast is not None:  # it may hold the state in its native table
            self.state = self.fast.state
        # (the native fold reads the raw values: values decoded for it would be wasted)
        self.shares_decoded = (
            self._plain and self._decode_value and _reads_only(operator.aggregator)
            and (self.fast is None or self.fast.native is None)
        )

    @property
    def stream_time_ms(self) -> int | None:
        st = self.state.stream_time
        return None if st == NO_TIME else st

    def process(
        self, records: Sequence[SourceRecord], emit: bool = True, horizon_ms: int | None = None,
        decoded: Mapping[int, Any] | None = None,
    ) -> BatchOutput:
        """Fold a batch of source records into state and close due windows.

        With ``emit=False`` (replay of offsets whose outputs were already committed)
        state advances exactly as in live mode and the outputs are dropped.

        ``horizon_ms`` (replay only): the stream time the replay will end at, known
        from the commit it replays up to. A record all of whose windows close by
        then only feeds windows that were emitted before and are dropped by the end
        of the replay, so it is skipped undecoded; the state at the end is the same
        (see ``WindowState.last_close_ms``).

        ``decoded`` (only if ``shares_decoded``): offset -> value, decoded by the
        caller with this operator's value serde; records not in it are decoded here.
        """
        out = BatchOutput()
        if not records:
            return out
        next_offset = records[-1].offset + 1
        if horizon_ms is not None and not emit and self._timestamp_from_record:
            last_close = self.state.last_close_ms
            if last_close is not None and _any_below(records, last_close, horizon_ms):
                records = [
                    r for r in records
                    if type(r.timestamp) is not int or last_close(r.timestamp) > horizon_ms
                ]
        before = self.state.stream_time
        folded = None if self.fast is None else self.fast.fold(records, decoded)
        times: list[int] | None = None
        if folded is not None:
            srcs = records
            late, late_times, failed = folded
        else:
            srcs, keys, times, items = self._prepare(records, out.dead_letters, decoded)
            failed = []
            late = self.state.add_batch(srcs, keys, times, items, failed)
            late_times = [times[i] for i in late]
        results = self.state.close(out.failed)
        self.next_offset = next_offset
        if not emit:
            return BatchOutput()
        out.results = results
        if failed:
            out.dead_letters.extend(DeadLetter(srcs[i], "aggregate", why) for i, why in failed)
        if late:
            out.late = self._late_records(srcs, times, late, late_times, failed, before)
        return out

    def _late_records(
        self, srcs: Sequence[SourceRecord], times: list[int] | None, late: list[int],
        late_times: list[int], failed: list[Failure], before: int,
    ) -> list[LateRecord]:
        """Each late record with the stream time it was judged at: ``before`` (the
        batch's start) raised by the event times up to it, those of failed folds
        aside (they move no stream time). Not the batch's end: the late records' bytes
        (``streamremat.late.reason``) must not depend on where batches begin, or
        copies an at-least-once restart writes would differ (DESIGN §5). The fast
        path's fold gives no times: the records' own, or those of the prefix."""
        end = late[-1] + 1
        if times is None:
            if self._timestamp_from_record:
                times = [NO_TIME if r.timestamp is None else r.timestamp for r in srcs[:end]]
            else:  # a time field, read in the fold: rare (late records), so decode again
                _, _, times, _ = self._prepare(srcs[:end], [])
                if len(times) != end:  # never: the fold took every record
                    st = self.state.stream_time
                    return [LateRecord(srcs[i], t, st) for i, t in zip(late, late_times,
                                                                       strict=True)]
        skip = {i for i, _ in failed}
        out = []
        st, j = before, 0
        for i, t in zip(late, late_times, strict=True):
            while j <= i:
                if times[j] > st and j not in skip:
                    st = times[j]
                j += 1
            out.append(LateRecord(srcs[i], t, st))
        return out

    def replay_raw(self, raw: Any, lo: int, horizon_ms: int | None) -> bool:
        """``process(emit=False)`` of the records of ``raw`` (a native
        ``RawRecords``: a fetch response parsed without record objects, see
        ``runtime/raw_replay.py``) at offsets >= ``lo``: True; False, with nothing
        changed, when the native fold declines them (the caller then feeds them as
        records to ``process``, which finds the bad ones)."""
        lo = max(lo, self.next_offset or 0)
        last = raw.last_offset(lo)
        if last is None:  # nothing unseen: as ``process`` of no records
            return True
        native = None if self.fast is None else self.fast.native
        if native is None or not hasattr(native, "fold_raw"):
            return False
        use_horizon = self._timestamp_from_record and self.state.last_close_ms is not None
        if native.fold_raw(self.state, raw, lo, horizon_ms if use_horizon else None) is None:
            return False
        self.state.close([])  # closed while replaying: emitted before, dropped now
        self.next_offset = last + 1
        return True

    def _prepare(
        self, records: Sequence[SourceRecord], dead: list[DeadLetter],
        decoded: Mapping[int, Any] | None = None,
    ) -> tuple[list[SourceRecord], list[bytes], list[int], list[Any]]:
        """Decode and extract (source record, key, event time, item) per record."""
        if self._plain:
            return self._prepare_plain(records, dead, decoded)
        return self._prepare_general(records, dead)

    def _prepare_plain(
        self, records: Sequence[SourceRecord], dead: list[DeadLetter],
        decoded: Mapping[int, Any] | None,
    ) -> tuple[list[SourceRecord], list[bytes], list[int], list[Any]]:
        """The common shape, key and time from the Kafka record and no steps: the
        tight loop. Any record it can't take goes through the general path, which
        sends it to the dead letters with the reason."""
        loads = self.operator.value_serde.loads
        decode_value = self._decode_value
        agg = self.operator.aggregator
        plain_count = type(agg) is Count and not agg.needs_value
        pick = agg.pick
        srcs: list[SourceRecord] = []
        keys: list[bytes] = []
        times: list[int] = []
        items: list[Any] = []
        for r in records:
            key, t = r.key, r.timestamp
            try:
                if key is None or type(t) is not int or t < 0:
                    raise ValueError
                if decoded is not None:
                    value = decoded[r.offset]  # KeyError: not decodable, see below
                    item = 1 if plain_count else pick(value)
                elif decode_value:
                    raw = r.value
                    if raw is None:
                        raise ValueError
                    value = loads(raw)
                    item = 1 if plain_count else pick(value)
                else:
                    item = 1 if plain_count else pick(None)
            except Exception:
                s2, k2, t2, i2 = self._prepare_general([r], dead)
                srcs += s2
                keys += k2
                times += t2
                items += i2
                continue
            srcs.append(r)
            keys.append(key)
            times.append(t)
            items.append(item)
        return srcs, keys, times, items

    def _prepare_general(
        self, records: Sequence[SourceRecord], dead: list[DeadLetter]
    ) -> tuple[list[SourceRecord], list[bytes], list[int], list[Any]]:
        op = self.operator
        return extract(op, records, dead, self._decode_value, op.aggregator.pick)

    # -- checkpoints -----------------------------------------------------------

    def snapshot(self, full: bool, recompute: Collection[int] = ()) -> bytes:
        """Encode the state for a checkpoint: all of it, or only what changed since
        the previous snapshot (dirty accumulators; closed windows are implied by
        stream time). Either way the dirty set is reset, so after a failed write
        the next checkpoint must be full.

        ``recompute``: the groups (close times, ``groups``) of a plan written as
        their first offset instead of their accumulators; ``replay_from`` then
        tells where a recovery from this snapshot starts its replay."""
        out = bytearray(STATE_MAGIC)
        out.append(STATE_VERSION)
        out += FULL if full else DELTA
        out += self._fingerprint
        write_svarint(out, self.state.stream_time)
        write_svarint(out, self.state.closed_through)
        write_uvarint(out, 0 if self.next_offset is None else self.next_offset + 1)
        return self.state.encode_after(bytes(out), full, recompute)

    @property
    def replay_from(self) -> int | None:
        """The smallest first offset the last snapshot wrote as recompute (None:
        it stored everything): a replay after restoring it starts there."""
        return self.state.last_replay_from

    def groups(self) -> list[Group]:
        """The open groups for the planner: (close time, encoded bytes, first offset);
        none when an accumulator's ``encode`` raises (the snapshot then raises too,
        and the checkpoint is skipped as for any such failure)."""
        try:
            return self.state.groups()
        except Exception:
            return []

    # -- recomputing the groups a checkpoint did not store -------------------------

    @property
    def refold_from(self) -> int | None:
        """After a restore with recompute groups: the offset their replay starts at."""
        start = self.state.refold_start()
        return None if start is None else start[0]

    def refold(self, records: Sequence[SourceRecord]) -> None:
        """Replay records of ``[refold_from, next_offset)`` into the recompute groups
        only (the other windows were restored). Nothing is emitted."""
        start = self.refold_from
        if start is not None and records and records[0].offset < start:
            records = [r for r in records if r.offset >= start]
        if self._timestamp_from_record:
            wants = self.state.refold_wants
            records = [r for r in records if type(r.timestamp) is not int or wants(r.timestamp)]
        if records:
            srcs, keys, times, items = self._prepare(records, [])
            self.state.refold(srcs, keys, times, items)

    def finish_refold(self, exact: bool = True) -> None:
        """The replay reached ``next_offset``: the recompute groups are complete."""
        self.state.finish_refold(exact)

    @classmethod
    def restore(cls, operator: Operator, partition: int, payloads: Sequence[bytes]) -> Task:
        """Rebuild a task from a full snapshot followed by the deltas taken after it."""
        if not payloads:
            raise StateFormatError("nothing to restore from")
        task = cls(operator, partition)
        for i, payload in enumerate(payloads):
            kind, start = task._read_header(payload)
            if (i == 0) != (kind == FULL):
                raise StateFormatError("a restore chain is one full snapshot, then deltas")
            task.state.apply_at(payload, start, payload[3])
        task.state.after_restore()
        return task

    def _read_header(self, payload: bytes) -> tuple[bytes, int]:
        """Check the header and set the task's fields from it; (kind, where the
        window state's body starts)."""
        if payload[:3] != STATE_MAGIC:
            raise StateFormatError("not a streamremat task state")
        if payload[3] not in READABLE_VERSIONS:
            raise StateFormatError(
                f"task state version {payload[3]} is not supported (this build reads "
                f"{', '.join(map(str, READABLE_VERSIONS))})"
            )
        kind = payload[4:5]
        if kind not in (FULL, DELTA):
            raise StateFormatError(f"unknown snapshot kind {kind!r}")
        if payload[5:13] != self._fingerprint:
            raise StateFormatError(
                f"checkpoint of operator {self.operator.name!r} was written for a different "
                "window or aggregation; restore is refused (use a new operator name or "
                "clear the checkpoints to rebuild from the source)"
            )
        view = memoryview(payload)
        st, pos = read_svarint(view, 13)
        closed, pos = read_svarint(view, pos)
        nxt, pos = read_uvarint(view, pos)
        self.state.stream_time = st
        self.state.closed_through = closed
        self.next_offset = None if nxt == 0 else nxt - 1
        return kind, pos

    def open_windows(self) -> int:
        return self.state.open_windows()

    def open_keys(self) -> int:
        return self.state.open_keys()


def extract(
    op: Operator,
    records: Sequence[SourceRecord],
    dead: list[DeadLetter],
    decode_value: bool,
    pick: Callable[[Any], Any],
) -> tuple[list[SourceRecord], list[bytes], list[int], list[Any]]:
    """Decode, run the steps, key, timestamp and ``pick`` the item of each record;
    a record that fails any of them goes to ``dead`` with the stage and reason.
    Shared by the windowed task and the repartition stage (``core/repartition.py``)."""
    loads = op.value_serde.loads
    steps = op.steps
    key_by, key_dumps = op.key_by, op.key_serde.dumps
    ts_by = op.timestamp_by
    ts_field = ts_by if isinstance(ts_by, str) else None
    srcs: list[SourceRecord] = []
    keys: list[bytes] = []
    times: list[int] = []
    items: list[Any] = []
    for r in records:
        stage = "value"
        try:
            value: Any = None
            if decode_value:
                raw = r.value
                if raw is None:
                    raise ValueError("record has no value")
                value = loads(raw)
            if steps:
                stage = "step"
                keep = True
                for step in steps:
                    if step.kind == "map":
                        value = step.fn(value)
                    elif not step.fn(value):
                        keep = False
                        break
                if not keep:
                    continue
            stage = "key"
            if key_by is None:
                key = r.key
                if key is None:
                    raise ValueError("record has no key")
            else:
                key = key_dumps(key_by(value))
            stage = "timestamp"
            if ts_by is None:
                t = r.timestamp
            elif ts_field is not None:
                t = value[ts_field]
            else:
                t = ts_by(value)  # type: ignore[operator]
            if type(t) is not int:
                t = _as_millis(t)
            if t < 0:
                raise ValueError(f"negative timestamp {t}")
            stage = "aggregate"
            item = pick(value)
        except Exception as exc:
            reason = reason_of(exc)
            dead.append(DeadLetter(r, stage, reason))
            continue
        srcs.append(r)
        keys.append(key)
        times.append(t)
        items.append(item)
    return srcs, keys, times, items


def _any_below(records: Sequence[SourceRecord], last_close: Callable[[int], int],
               horizon_ms: int) -> bool:
    """Whether the horizon may skip a record of the batch: only if the oldest
    timestamp's windows close by then (``last_close`` grows with ``t``). A replay of
    a backlog younger than its windows skips none, and this costs one ``min`` in C
    instead of a Python test per record. Non-int timestamps: test each record."""
    try:
        return last_close(min(map(_timestamp, records))) <= horizon_ms
    except TypeError:
        return True


_timestamp = attrgetter("timestamp")


def _reads_only(agg: Aggregator) -> bool:
    """True when folding a value runs no user code on it: built-in aggregators that
    pick fields by name (or take the whole value)."""
    parts = agg.parts if isinstance(agg, Composite) else (agg,)
    return all(
        type(p).__module__.startswith("streamremat.core.") and not p.calls_user_code
        for p in parts
    )


def _as_millis(t: Any) -> int:
    if isinstance(t, bool) or t is None:
        raise ValueError(f"timestamp must be an int of milliseconds, got {t!r}")
    if isinstance(t, float) and t.is_integer():
        return int(t)
    raise ValueError(f"timestamp must be an int of milliseconds, got {t!r}")


def _window_state(window: Window, agg: Aggregator) -> WindowState:
    """The state class for a window definition."""
    if isinstance(window, Tumbling):
        return FixedWindowState(agg, window.size_ms, window.size_ms, window.grace_ms)
    if isinstance(window, Hopping):
        return FixedWindowState(agg, window.size_ms, window.advance_ms, window.grace_ms)
    if isinstance(window, Sliding):
        return SlidingState(agg, window.size_ms, window.grace_ms)
    if isinstance(window, Session):
        return SessionState(agg, window.gap_ms, window.grace_ms)
    raise TypeError(f"unknown window type {type(window).__name__}")
