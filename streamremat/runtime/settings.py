"""Worker settings: one frozen dataclass, filled from CLI flags and environment."""

from __future__ import annotations

import math
import os
import re
import socket
from dataclasses import dataclass, field
from enum import StrEnum

from streamremat.core.exceptions import ConfigError
from streamremat.runtime.client import KafkaClientConfig
from streamremat.runtime.kafka import Replication
from streamremat.runtime.lifecycle import RetryPolicy
from streamremat.tuning.config import TunerConfig

#: The tuner's defaults are TunerConfig's: one source for settings, CLI and docs.
_TUNER = TunerConfig()

_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h)?\s*", re.ASCII)
DURATION_FORMS = "seconds (120, 0.5) or a number with a unit ms, s, m or h (500ms, 30s, 2m, 1h)"


def parse_duration_s(text: str) -> float:
    """Seconds from ``"120"``, ``"0.5"``, ``"500ms"``, ``"30s"``, ``"2m"`` or ``"1h"``;
    ValueError for anything else (negative, empty, unknown unit, inf/nan)."""
    match = _DURATION.fullmatch(text)
    if match is None:
        raise ValueError(f"not a duration: {text!r}")
    seconds = float(match[1]) * _UNIT_S[match[2] or "s"]
    if not math.isfinite(seconds):
        raise ValueError(f"not a finite duration: {text!r}")
    return seconds


class Guarantee(StrEnum):
    EXACTLY_ONCE = "exactly_once"
    AT_LEAST_ONCE = "at_least_once"


class GapPolicy(StrEnum):
    """What to do when a checkpoint's offset fell out of the source's retention."""

    FAIL = "fail"
    RESET = "reset"


@dataclass(frozen=True)
class CheckpointSettings:
    """When and how checkpoints are written.

    ``policy`` ``fixed`` checkpoints every ``interval_s`` seconds and/or every
    ``interval_records`` records; ``adaptive`` lets the tuner choose the interval
    within ``[min_interval_s, max_interval_s]`` so that recovery stays under ``rto_s``.
    """

    policy: str = "adaptive"
    interval_s: float | None = 30.0
    interval_records: int | None = None
    rto_s: float = _TUNER.rto_s
    min_interval_s: float = _TUNER.min_interval_s
    max_interval_s: float = _TUNER.max_interval_s
    prior_mtbf_s: float = _TUNER.prior_mtbf_s
    keep: int = 3
    replicate: bool = True
    #: a full snapshot once the deltas since the last full add up to this share of it
    full_after_delta_ratio: float = 1.0

    def __post_init__(self) -> None:
        if self.policy not in ("fixed", "adaptive"):
            raise ConfigError(
                f"checkpoint policy must be 'fixed' or 'adaptive', not {self.policy!r}"
            )
        if self.keep < 1:
            raise ConfigError("keep at least one checkpoint (--keep-checkpoints >= 1)")
        if self.min_interval_s <= 0 or self.max_interval_s < self.min_interval_s:
            raise ConfigError("need 0 < --min-interval <= --max-interval")
        if self.rto_s <= 0:
            raise ConfigError("--rto-seconds must be > 0")


@dataclass(frozen=True)
class WorkerSettings:
    """Everything a worker runs with. ``client`` is the one place its Kafka clients
    take their connection, security and pass-through options from."""

    bootstrap_servers: str = "127.0.0.1:9092"
    group_id: str | None = None
    state_dir: str = ".streamremat/state"
    commit_interval_s: float = 0.5
    guarantee: Guarantee = Guarantee.EXACTLY_ONCE
    on_retention_gap: GapPolicy = GapPolicy.FAIL
    metrics_port: int | None = None
    max_batch_records: int = 5000
    session_timeout_ms: int = 10_000
    heartbeat_interval_ms: int = 1_000
    shutdown_timeout_s: float = 30.0
    replay_log_interval_s: float = 2.0
    worker_id: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    checkpoints: CheckpointSettings = field(default_factory=CheckpointSettings)
    #: how every client connects; ``None``: plaintext to ``bootstrap_servers``. When
    #: given, its ``bootstrap_servers`` wins.
    kafka: KafkaClientConfig | None = None
    replication: Replication = field(default_factory=Replication)
    #: retention of repartition topics: None covers the checkpoints a replay may
    #: need (``repartition_retention_margin`` x keep x max interval); < 0 unlimited
    repartition_retention_s: float | None = None
    repartition_retention_margin: float = 2.0
    #: raise the young GC threshold and freeze state after restore (runtime/gc_tuning.py)
    tune_gc: bool = True
    #: backoff and retry budget of a partition whose Kafka steps fail
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    #: /healthz fails once the loop stalls, or the group session is down, this long
    health_stall_s: float = 60.0

    def __post_init__(self) -> None:
        if self.kafka is None:
            object.__setattr__(self, "kafka", KafkaClientConfig(self.bootstrap_servers))
        else:
            object.__setattr__(self, "bootstrap_servers", self.kafka.bootstrap_servers)
        if self.commit_interval_s <= 0:
            raise ConfigError("--commit-interval must be > 0 seconds")
        if self.max_batch_records < 1:
            raise ConfigError("--max-batch must be >= 1")
        if self.repartition_retention_margin < 1:
            raise ConfigError("--repartition-retention-margin must be >= 1 (a multiple of "
                              "the time the kept checkpoints span)")
        if self.repartition_retention_s is not None and 0 <= self.repartition_retention_s < 1:
            raise ConfigError("--repartition-retention must be >= 1 s (or < 0: unlimited)")

    @property
    def client(self) -> KafkaClientConfig:
        assert self.kafka is not None  # set in __post_init__
        return self.kafka

    @property
    def repartition_retention_ms(self) -> int:
        """``retention.ms`` of new repartition topics (-1: unlimited). The oldest kept
        checkpoint is up to keep x max interval old, and a replay reads from it."""
        if self.repartition_retention_s is not None:
            s = self.repartition_retention_s
            return -1 if s < 0 else int(s * 1000)
        c = self.checkpoints
        span_s = c.keep * c.max_interval_s
        if c.policy == "fixed" and c.interval_s is not None:
            span_s = c.keep * max(c.interval_s, c.max_interval_s)
        return int(self.repartition_retention_margin * span_s * 1000)
