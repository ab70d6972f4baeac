"""`Sensor` implemented with prometheus-client (after faust `sensors/prometheus.py`).

Per-task series carry `app`, `operator`, `partition`; they are created when a
task is assigned. When it is revoked its gauges are removed, so a partition that
moved to another worker leaves no stale gauge here; its counters stay, so that
within a process a counter never goes back (after a rebalance that brings the
partition back it continues from where it was; elsewhere `rate()` reads 0).

`serve()` also answers `/healthz` (the worker's loop is not stalled and its
group session is up) and `/ready` (every assigned partition is live): 200 or
503 with the reasons as text. Histograms carry `app` and
`operator` only: buckets multiply series, and per-partition detail of a latency
adds little next to per-partition lag.

Tuner inputs get one gauge each, not one `input` label: they have different
units (seconds, records/s, 1/s, a ratio), and a metric's series should be
summable and share a unit.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final
from wsgiref.simple_server import WSGIServer, make_server

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    make_wsgi_app,
)
from prometheus_client.core import HistogramMetricFamily, Metric
from prometheus_client.exposition import ThreadingWSGIServer, _SilentHandler
from prometheus_client.metrics import MetricWrapperBase

from streamremat.metrics.remat import RematMetrics
from streamremat.metrics.sensor import (
    BOUNDS,
    E2E_LATENCY_BUCKETS_S,
    PARTITION_STATES,
    LatencyBatch,
    RematSummaryLike,
    Sensor,
    TunerDecisionLike,
    read_tuner_decision,
)

__all__ = ["PrometheusSensor"]

PREFIX: Final = "streamremat_"
_TASK: Final = ("app", "operator", "partition")
_OPERATOR: Final = ("app", "operator")

COMMIT_BUCKETS_S: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
CHECKPOINT_BUCKETS_S: Final = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
RESTORE_BUCKETS_S: Final = (0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)

# Tuner reading field -> (gauge name, help).
_TUNER_GAUGES: Final = {
    "interval_s": ("checkpoint_interval_seconds", "Checkpoint interval the tuner chose."),
    "C": ("tuner_checkpoint_cost_seconds", "C: capacity-seconds lost per checkpoint."),
    "L": ("tuner_checkpoint_latency_seconds", "L: time until a checkpoint is durable."),
    "D": ("tuner_downtime_seconds", "D: downtime per failure (detect + restore)."),
    "r": ("tuner_ingest_rate_records_per_second", "r: source ingest rate."),
    "mu": ("tuner_replay_rate_records_per_second", "mu: replay throughput."),
    "sigma": ("tuner_replay_speedup_ratio", "sigma = mu / r; recovery needs > 1."),
    "lam": ("tuner_failure_rate_per_second", "lambda: estimated failure rate."),
    "t_star": ("tuner_optimal_interval_seconds", "T*: interval minimising expected waste."),
    "t_rto": ("tuner_rto_interval_seconds", "T_rto: largest interval meeting the RTO."),
    "t_retention": ("tuner_retention_interval_seconds", "Largest interval inside retention."),
    "predicted_recovery_s": (
        "predicted_recovery_seconds",
        "Predicted time to recover (lag back to ~0) if a failure happened now.",
    ),
    "rto_s": ("rto_seconds", "Recovery-time objective."),
}


class _LatencyHistogram:
    """A histogram fed whole `LatencyBatch`es: one lock and len(bounds) adds per batch."""

    def __init__(self, name: str, documentation: str, bounds_s: tuple[float, ...]) -> None:
        self._name = name
        self._doc = documentation
        self._bounds_s = bounds_s
        self._le = [repr(float(b)) for b in bounds_s] + ["+Inf"]
        self._series: dict[tuple[str, ...], tuple[list[int], list[float]]] = {}
        self._lock = threading.Lock()

    def add(self, labels: tuple[str, ...], batch: LatencyBatch) -> None:
        if batch.bounds_s != self._bounds_s:
            raise ValueError(
                f"{self._name}: LatencyBatch was binned over other bounds; build it with "
                "LatencyBatch.of(seconds), which uses E2E_LATENCY_BUCKETS_S"
            )
        with self._lock:
            counts, total = self._series.setdefault(labels, ([0] * len(self._le), [0.0]))
            for i, c in enumerate(batch.counts):
                counts[i] += c
            total[0] += batch.sum_s

    def describe(self) -> list[Metric]:
        return [HistogramMetricFamily(self._name, self._doc, labels=_OPERATOR)]

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self._name, self._doc, labels=_OPERATOR)
        with self._lock:
            snapshot = [(k, list(c), t[0]) for k, (c, t) in self._series.items()]
        for labels, counts, total in snapshot:
            cumulative, buckets = 0, []
            for le, c in zip(self._le, counts, strict=True):
                cumulative += c
                buckets.append((le, float(cumulative)))
            family.add_metric(labels, buckets, total)
        yield family


class _Task:
    """Cached label children of one task, so hot calls skip `.labels()`; removed together."""

    def __init__(self, labels: tuple[str, str, str]) -> None:
        self.labels = labels
        self._children: dict[tuple[int, tuple[str, ...]], tuple[MetricWrapperBase, Any]] = {}

    def child(self, metric: MetricWrapperBase, *extra: str) -> Any:
        key = (id(metric), extra)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = (metric, metric.labels(*self.labels, *extra))
        return found[1]

    def remove_gauges(self) -> None:
        """Drop the gauges; counters stay so they never go back within the process."""
        for key, (metric, _) in list(self._children.items()):
            if not isinstance(metric, Counter):
                metric.remove(*self.labels, *key[1])
                del self._children[key]


class PrometheusSensor(Sensor):
    """Prometheus metrics for one app. `registry=None` makes a private registry with
    the process, platform and GC collectors; `serve()` exposes it over HTTP."""

    def __init__(self, app: str, registry: CollectorRegistry | None = None) -> None:
        if registry is None:
            registry = CollectorRegistry()
            for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
                registry.register(collector)
        self.app = app
        self.registry = registry
        self._tasks: dict[tuple[str, int], _Task] = {}
        #: revoked tasks, kept for their counters until assigned again
        self._gone: dict[tuple[str, int], _Task] = {}
        self._states: dict[tuple[str, int], str] = {}
        self._health_lock = threading.Lock()
        self._last_loop = time.monotonic()
        self._session_alive = False
        self._session_changed = time.monotonic()
        self._joined = False

        def counter(name: str, doc: str, *extra: str) -> Counter:
            return Counter(PREFIX + name, doc, (*_TASK, *extra), registry=registry)

        def gauge(name: str, doc: str, *extra: str) -> Gauge:
            return Gauge(PREFIX + name, doc, (*_TASK, *extra), registry=registry)

        # Throughput.
        self._records_in = counter("records_in_total", "Records consumed from the source.")
        self._records_out = counter("records_out_total", "Records emitted to the sink.")
        self._batches = counter("batches_total", "Batches processed.")
        self._batch_records = counter("batch_records_total", "Records in processed batches.")
        self._busy = counter("busy_seconds_total", "Time spent processing batches.")
        self._lag = gauge("consumer_lag_records", "Records behind the source high watermark.")
        self._e2e = _LatencyHistogram(
            PREFIX + "e2e_latency_seconds",
            "Event timestamp to emission.",
            E2E_LATENCY_BUCKETS_S,
        )
        registry.register(self._e2e)
        self._commit = Histogram(
            PREFIX + "commit_duration_seconds",
            "Transactional commit of outputs and offsets.",
            ("app",),
            buckets=COMMIT_BUCKETS_S,
            registry=registry,
        ).labels(app)
        # Checkpoints.
        self._ckpt_duration = Histogram(
            PREFIX + "checkpoint_duration_seconds",
            "Time to write a checkpoint until durable.",
            _OPERATOR,
            buckets=CHECKPOINT_BUCKETS_S,
            registry=registry,
        )
        self._ckpts = counter("checkpoints_total", "Durable checkpoints.", "kind")
        self._ckpt_bytes = counter("checkpoint_bytes_total", "Checkpoint bytes written.", "kind")
        self._ckpt_failures = counter(
            "checkpoint_failures_total", "Checkpoints that were not written.", "reason"
        )
        self._ckpt_age = gauge("checkpoint_age_seconds", "Age of the newest durable checkpoint.")
        self._ckpt_ts = gauge(
            "last_checkpoint_timestamp_seconds", "Unix time of the last checkpoint written here."
        )
        # Recovery.
        self._restore = Histogram(
            PREFIX + "restore_duration_seconds",
            "Time to load a task's checkpoint.",
            (*_OPERATOR, "source"),
            buckets=RESTORE_BUCKETS_S,
            registry=registry,
        )
        self._replayed = counter("replayed_records_total", "Records replayed to rebuild state.")
        self._replay_seconds = counter("replay_seconds_total", "Time spent replaying.")
        self._replay_rate = gauge(
            "replay_throughput_records_per_second", "Throughput of the latest replay."
        )
        self._replay_remaining = gauge(
            "replay_remaining_records", "Records left to replay before live mode."
        )
        self._fallbacks = counter(
            "checkpoint_fallbacks_total", "Invalid checkpoints skipped for older ones.", "reason"
        )
        self._failures = counter("failures_total", "Unclean shutdowns or lost partitions.")
        self._gap_offsets = counter(
            "retention_gap_offsets_total",
            "Source offsets skipped by --on-retention-gap=reset (gone from the source).",
        )
        self._missing_commits = counter(
            "committed_offset_missing_total",
            "Recoveries that found a checkpoint but no committed offset of the group.",
        )
        # Bad input and windows.
        self._dead_letters = counter(
            "dead_letters_total", "Records sent to the dead-letter topic.", "reason"
        )
        self._late = counter("late_records_total", "Records that arrived after their window.")
        self._open_windows = gauge("open_windows", "Windows held in state.")
        self._open_keys = gauge("open_keys", "Keys held in state.")
        # Tuner.
        self._tuner = {field: gauge(name, doc) for field, (name, doc) in _TUNER_GAUGES.items()}
        self._bound = gauge("tuner_bound", "1 for the bound that set the interval.", "bound")
        self._infeasible = gauge("rto_infeasible", "1 when no interval >= T_min can meet the RTO.")
        self._remat = RematMetrics(counter, gauge)
        # Lifecycle and health.
        self._state = gauge(
            "partition_state", "1 for the partition's lifecycle state (restoring, replaying, "
            "live, backoff, fenced), 0 for the others.", "state",
        )
        session = Gauge(PREFIX + "group_session_alive", "1 while the consumer group session is "
                        "up.", ("app",), registry=registry)
        self._session = session.labels(app)
        Gauge(PREFIX + "loop_idle_seconds", "Seconds since the worker's loop last went round "
              "(large: stalled).", ("app",), registry=registry,
              ).labels(app).set_function(lambda: time.monotonic() - self._last_loop)

    def serve(
        self, port: int, addr: str = "0.0.0.0", stall_s: float = 60.0
    ) -> tuple[WSGIServer, threading.Thread]:
        """Expose http://addr:port/metrics, /healthz and /ready (daemon thread).
        ``stall_s``: how long the loop may not go round, or the group session be down,
        before /healthz fails."""
        metrics = make_wsgi_app(self.registry)

        def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            path = environ.get("PATH_INFO", "")
            if path not in ("/healthz", "/ready"):
                return metrics(environ, start_response)  # type: ignore[no-any-return]
            ok, text = self.healthz(stall_s) if path == "/healthz" else self.ready()
            start_response("200 OK" if ok else "503 Service Unavailable",
                           [("Content-Type", "text/plain; charset=utf-8")])
            return [text.encode() + b"\n"]

        server = make_server(addr, port, app, ThreadingWSGIServer, handler_class=_SilentHandler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        return server, thread

    def healthz(self, stall_s: float = 60.0) -> tuple[bool, str]:
        """Alive: the loop went round and the group session was up within ``stall_s``."""
        now = time.monotonic()
        with self._health_lock:
            idle = now - self._last_loop
            down = 0.0 if self._session_alive else now - self._session_changed
        problems = []
        if idle > stall_s:
            problems.append(f"the worker loop has not gone round for {idle:.0f} s")
        if down > stall_s:
            problems.append(f"the consumer group session has been down for {down:.0f} s")
        return (not problems, "; ".join(problems) or "ok")

    def ready(self) -> tuple[bool, str]:
        """Ready: the group gave this worker its partitions and every one is live."""
        with self._health_lock:
            joined = self._joined
            states = dict(self._states)
        if not joined:
            return False, "not ready: waiting for the consumer group to assign partitions"
        waiting = sorted({(p, st) for (_, p), st in states.items() if st != "live"})
        if waiting:
            return False, "not ready: " + ", ".join(f"partition {p} {st}" for p, st in waiting)
        return True, f"ready: {len({p for _, p in states})} partition(s) live"

    def _task(self, operator: str, partition: int) -> _Task:
        task = self._tasks.get((operator, partition))
        if task is None:
            task = self._gone.pop((operator, partition), None) or _Task(
                (self.app, operator, str(partition))
            )
            self._tasks[(operator, partition)] = task
            # Counters start at 0 so rate() and `unless increase()` see them at once.
            for metric in (
                self._records_in,
                self._records_out,
                self._batches,
                self._batch_records,
                self._busy,
                self._late,
                self._replayed,
                self._replay_seconds,
                self._failures,
                self._gap_offsets,
                self._missing_commits,
                self._remat.saved_bytes,
            ):
                task.child(metric)
        return task

    def on_task_assigned(self, operator: str, partition: int) -> None:
        self._task(operator, partition)

    def on_task_revoked(self, operator: str, partition: int) -> None:
        task = self._tasks.pop((operator, partition), None)
        if task is not None:
            task.remove_gauges()
            self._gone[(operator, partition)] = task
        with self._health_lock:
            self._states.pop((operator, partition), None)

    def on_partition_state(self, operator: str, partition: int, state: str) -> None:
        if state not in PARTITION_STATES:
            raise ValueError(f"partition state {state!r} is not one of "
                             f"{', '.join(PARTITION_STATES)}")
        task = self._task(operator, partition)
        for name in PARTITION_STATES:
            task.child(self._state, name).set(1 if name == state else 0)
        with self._health_lock:
            self._states[(operator, partition)] = state

    def on_loop(self, session_alive: bool, joined: bool) -> None:
        now = time.monotonic()
        with self._health_lock:
            self._last_loop = now
            self._joined = joined
            if session_alive != self._session_alive:
                self._session_alive = session_alive
                self._session_changed = now
                self._session.set(1 if session_alive else 0)

    def on_records_in(self, operator: str, partition: int, n: int) -> None:
        self._task(operator, partition).child(self._records_in).inc(n)

    def on_records_out(self, operator: str, partition: int, n: int) -> None:
        self._task(operator, partition).child(self._records_out).inc(n)

    def on_batch(self, operator: str, partition: int, n: int, busy_s: float) -> None:
        task = self._task(operator, partition)
        task.child(self._batches).inc()
        task.child(self._batch_records).inc(n)
        task.child(self._busy).inc(busy_s)

    def on_lag(self, operator: str, partition: int, lag_records: int) -> None:
        self._task(operator, partition).child(self._lag).set(lag_records)

    def on_e2e_latency(
        self, operator: str, partition: int, latencies: Iterable[float] | LatencyBatch
    ) -> None:
        batch = latencies if isinstance(latencies, LatencyBatch) else LatencyBatch.of(latencies)
        if batch.count:
            self._e2e.add((self.app, operator), batch)

    def on_commit(self, duration_s: float) -> None:
        self._commit.observe(duration_s)

    def on_checkpoint(
        self, operator: str, partition: int, duration_s: float, size_bytes: int, kind: str
    ) -> None:
        task = self._task(operator, partition)
        self._ckpt_duration.labels(self.app, operator).observe(duration_s)
        task.child(self._ckpts, kind).inc()
        task.child(self._ckpt_bytes, kind).inc(size_bytes)
        task.child(self._ckpt_ts).set(time.time())
        task.child(self._ckpt_age).set(0)

    def on_checkpoint_failed(self, operator: str, partition: int, reason: str) -> None:
        self._task(operator, partition).child(self._ckpt_failures, reason).inc()

    def on_checkpoint_age(self, operator: str, partition: int, age_s: float) -> None:
        self._task(operator, partition).child(self._ckpt_age).set(age_s)

    def on_restore(self, operator: str, partition: int, duration_s: float, source: str) -> None:
        self._task(operator, partition)
        self._restore.labels(self.app, operator, source).observe(duration_s)

    def on_replay(self, operator: str, partition: int, records: int, seconds: float) -> None:
        task = self._task(operator, partition)
        task.child(self._replayed).inc(records)
        task.child(self._replay_seconds).inc(seconds)
        if seconds > 0:
            task.child(self._replay_rate).set(records / seconds)

    def on_replay_progress(self, operator: str, partition: int, done: int, total: int) -> None:
        self._task(operator, partition).child(self._replay_remaining).set(max(total - done, 0))

    def on_checkpoint_fallback(self, operator: str, partition: int, reason: str) -> None:
        self._task(operator, partition).child(self._fallbacks, reason).inc()

    def on_failure_detected(self, operator: str, partition: int) -> None:
        self._task(operator, partition).child(self._failures).inc()

    def on_retention_gap(self, operator: str, partition: int, skipped: int) -> None:
        self._task(operator, partition).child(self._gap_offsets).inc(skipped)

    def on_committed_offset_missing(self, operator: str, partition: int) -> None:
        self._task(operator, partition).child(self._missing_commits).inc()

    def on_dead_letter(self, operator: str, partition: int, reason_class: str) -> None:
        self._task(operator, partition).child(self._dead_letters, reason_class).inc()

    def on_late(self, operator: str, partition: int, n: int) -> None:
        self._task(operator, partition).child(self._late).inc(n)

    def on_open_windows(self, operator: str, partition: int, windows: int, keys: int) -> None:
        task = self._task(operator, partition)
        task.child(self._open_windows).set(windows)
        task.child(self._open_keys).set(keys)

    def on_tuner(self, operator: str, partition: int, decision: TunerDecisionLike) -> None:
        reading = read_tuner_decision(decision)
        task = self._task(operator, partition)
        for field, metric in self._tuner.items():
            value = getattr(reading, field)
            if value is not None:
                task.child(metric).set(value)
        if reading.bound is not None:
            for bound in BOUNDS:
                task.child(self._bound, bound).set(1 if bound == reading.bound else 0)
        if reading.rto_infeasible is not None:
            task.child(self._infeasible).set(1 if reading.rto_infeasible else 0)

    def on_remat_plan(self, operator: str, partition: int, plan: RematSummaryLike) -> None:
        self._remat.report(self._task(operator, partition).child, plan)
