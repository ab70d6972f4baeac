"""What a checkpoint's rematerialization plan comes to, compact enough to travel
inside the checkpoint (frame ``meta``), so that ``streamremat tune`` explains the
plan a recovery from that checkpoint will follow, in the worker's own figures.

The per-group detail stays out: a session operator has hundreds of groups, and
what a reader needs is how many were stored or recomputed, the bytes, the extra
replay and which constraint forced a store.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import orjson

from streamremat.tuning.exceptions import TunerStateError
from streamremat.tuning.remat import Reason, RematPlan

_VERSION = 1


@dataclass(frozen=True)
class PlanSummary:
    checkpoint_offset: int
    replay_from: int
    groups_stored: int
    groups_recomputed: int
    bytes_stored: int
    bytes_saved: int
    extra_replay_records: int
    extra_replay_s: float
    #: groups stored because a constraint forced it
    forced: Mapping[Reason, int] = field(default_factory=dict)
    #: groups stored because that was cheaper (nothing forced them)
    cheaper_to_store: int = 0

    @classmethod
    def of(cls, plan: RematPlan) -> PlanSummary:
        stored = sum(1 for g in plan.groups if g.store)
        forced = plan.forced()
        return cls(
            checkpoint_offset=plan.checkpoint_offset,
            replay_from=plan.replay_from,
            groups_stored=stored,
            groups_recomputed=len(plan.groups) - stored,
            bytes_stored=plan.bytes_stored,
            bytes_saved=plan.bytes_saved,
            extra_replay_records=plan.extra_replay_records,
            extra_replay_s=plan.extra_replay_s,
            forced=forced,
            cheaper_to_store=stored - sum(forced.values()),
        )

    def to_bytes(self) -> bytes:
        extra_s = None if math.isinf(self.extra_replay_s) else self.extra_replay_s
        return orjson.dumps({
            "v": _VERSION, "c": self.checkpoint_offset, "o": self.replay_from,
            "gs": self.groups_stored, "gr": self.groups_recomputed,
            "bs": self.bytes_stored, "bv": self.bytes_saved,
            "xr": self.extra_replay_records, "xs": extra_s,
            "f": {r.name: n for r, n in sorted(self.forced.items(), key=lambda i: i[0].name)},
            "cs": self.cheaper_to_store,
        })  # fmt: skip

    @classmethod
    def from_bytes(cls, data: bytes) -> PlanSummary:
        try:
            d = orjson.loads(data)
            if d.get("v") != _VERSION:
                raise TunerStateError(f"plan summary version {d.get('v')!r} is not {_VERSION}")
            return cls(
                checkpoint_offset=int(d["c"]), replay_from=int(d["o"]),
                groups_stored=int(d["gs"]), groups_recomputed=int(d["gr"]),
                bytes_stored=int(d["bs"]), bytes_saved=int(d["bv"]),
                extra_replay_records=int(d["xr"]),
                extra_replay_s=math.inf if d["xs"] is None else float(d["xs"]),
                forced={Reason[k]: int(n) for k, n in d["f"].items()},
                cheaper_to_store=int(d["cs"]),
            )  # fmt: skip
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise TunerStateError(f"unreadable plan summary: {exc}") from exc
