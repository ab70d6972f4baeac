"""The rematerialization plan's Prometheus series (DESIGN §9, docs/rematerialization.md).

Gauges describe the plan of the task's newest checkpoint (what a recovery
from it would do); one counter adds up the bytes the plans left out, beside
``streamremat_checkpoint_bytes_total``. Per-task labels, as every other
checkpoint series; ``choice`` and ``reason`` are fixed vocabularies.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from prometheus_client import Counter, Gauge

from streamremat.metrics.sensor import REMAT_FORCED_REASONS, RematSummaryLike, forced_labels

CHOICES: Final = ("store", "recompute")


class RematMetrics:
    """Built by ``PrometheusSensor`` with its per-task metric factories."""

    def __init__(self, counter: Callable[..., Counter], gauge: Callable[..., Gauge]) -> None:
        self.groups = gauge(
            "remat_window_groups",
            "Window groups (windows with one close time) in the newest checkpoint's "
            "plan, by choice: store (in the checkpoint) or recompute (replayed after a "
            "failure).",
            "choice",
        )
        self.stored_bytes = gauge(
            "remat_stored_bytes", "Encoded bytes of the window groups the newest plan stores."
        )
        self.saved_bytes = counter(
            "remat_saved_bytes_total",
            "Encoded bytes of window groups left out of checkpoints to be recomputed.",
        )
        self.extra_records = gauge(
            "remat_extra_replay_records",
            "Records before the newest checkpoint's offset a recovery would replay to "
            "rebuild its recompute windows.",
        )
        self.extra_seconds = gauge(
            "remat_extra_replay_seconds",
            "That extra replay at the measured replay rate (+Inf before one is measured).",
        )
        self.forced = gauge(
            "remat_forced_stores",
            "Window groups of the newest plan stored because a constraint forced it "
            "(reason: requested_store, unknown_offset, retention, rto, no_replay_rate).",
            "reason",
        )

    def report(self, child: Callable[..., Any], summary: RematSummaryLike) -> None:
        """``child(metric, *extra)``: the task's labelled child of ``metric``."""
        child(self.groups, "store").set(summary.groups_stored)
        child(self.groups, "recompute").set(summary.groups_recomputed)
        child(self.stored_bytes).set(summary.bytes_stored)
        child(self.saved_bytes).inc(summary.bytes_saved)
        child(self.extra_records).set(summary.extra_replay_records)
        child(self.extra_seconds).set(summary.extra_replay_s)
        forced = forced_labels(summary)
        for reason in REMAT_FORCED_REASONS:
            child(self.forced, reason).set(forced[reason])
