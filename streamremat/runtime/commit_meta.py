"""What each commit stores next to a partition's offset (the offset metadata).

Committed atomically with the offset, so it describes exactly that offset, and
only an owner that still holds the partition can write it (a fenced producer,
or a consumer of an old group generation, cannot commit):

* ``st``: every task's stream time at the offset, so a replay up to it knows
  where it will end (``Task.process(horizon_ms=...)``);
* ``ep``: the committing owner's checkpoint seq epoch. A new owner starts above
  it, so two owners never share a seq space of the replica, even when the
  replica (or the old owner's late frames) cannot be seen (DESIGN §5);
* ``at``: the wall time of the commit in ms, the owner's last sign of life for
  this partition: a successor measures the downtime D from it;
* ``cl``: per operator, how far a closing whose results span several
  transactions got (``runtime/closing_progress.py``): ``[end, start, n]``, every
  window before the windows ``(end, start)`` and the first ``n`` of them (in the
  closing's order) are committed. The offset of such a commit is that of the
  batch that closes them, so a successor replays to it, closes them again and
  emits only the rest. Never dropped: without it, results would be emitted twice.

Kept small: the broker caps offset metadata (``offset.metadata.max.bytes``, 4 KiB).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import orjson

__all__ = ["CommitMeta", "decode_commit_metadata", "encode_commit_metadata"]

_VERSION = 1
_MAX_CHARS = 3500


@dataclass(frozen=True)
class CommitMeta:
    """Decoded offset metadata; every field is optional (older or foreign commits)."""

    stream_times: dict[str, int] = field(default_factory=dict)
    owner_epoch: int | None = None
    at_ms: int | None = None
    #: per operator, ``(end_ms, start_ms, n)`` of a closing committed in part
    closings: dict[str, tuple[int, int, int]] = field(default_factory=dict)


def encode_commit_metadata(meta: CommitMeta) -> str:
    """The metadata string; stream times are dropped (replay then skips less) before
    the epoch and time, which keep the seq spaces apart and measure D."""
    head: dict[str, object] = {"v": _VERSION}
    if meta.owner_epoch is not None:
        head["ep"] = meta.owner_epoch
    if meta.at_ms is not None:
        head["at"] = meta.at_ms
    if meta.closings:
        head["cl"] = meta.closings
    text = orjson.dumps({**head, "st": meta.stream_times}).decode()
    return text if len(text) <= _MAX_CHARS else orjson.dumps(head).decode()


def decode_commit_metadata(text: str | None) -> CommitMeta:
    """The fields of ``encode_commit_metadata``; a field that is absent or malformed
    is left empty (no replay skipping, no epoch floor, no sign of life)."""
    try:
        data = orjson.loads(text or "{}")
    except orjson.JSONDecodeError:
        return CommitMeta()
    if not isinstance(data, dict) or data.get("v") != _VERSION:
        return CommitMeta()
    try:
        stream_times = {str(k): int(v) for k, v in data.get("st", {}).items()}
    except (AttributeError, TypeError, ValueError):
        stream_times = {}
    return CommitMeta(stream_times, _int_or_none(data.get("ep")), _int_or_none(data.get("at")),
                      _closings(data.get("cl", {})))


def _closings(value: object) -> dict[str, tuple[int, int, int]]:
    """``cl``; a malformed entry is an error, not a field to leave empty: dropping
    it would emit committed results again."""
    if not isinstance(value, dict):
        raise ValueError(f"malformed closing progress in the committed metadata: {value!r}")
    out: dict[str, tuple[int, int, int]] = {}
    for name, marker in value.items():
        if (not isinstance(marker, list) or len(marker) != 3
                or not all(type(x) is int for x in marker)):
            raise ValueError(f"malformed closing progress of {name!r} in the committed "
                             f"metadata: {marker!r}")
        out[str(name)] = (marker[0], marker[1], marker[2])
    return out


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
