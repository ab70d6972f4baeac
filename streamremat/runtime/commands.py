"""``streamremat worker MODULE:APP``: flags and environment into WorkerSettings."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from streamremat.core.exceptions import ConfigError
from streamremat.core.operator import App, Operator
from streamremat.logging import LogFormat, setup_logging
from streamremat.runtime.client import KafkaClientConfig
from streamremat.runtime.exceptions import KafkaAccessError, WorkerError
from streamremat.runtime.kafka import Replication
from streamremat.runtime.settings import (
    DURATION_FORMS,
    CheckpointSettings,
    GapPolicy,
    Guarantee,
    WorkerSettings,
    parse_duration_s,
)

LOG_FORMATS: Final = ("text", "json")
LOG_LEVELS: Final = ("DEBUG", "INFO", "WARNING", "ERROR")


def load_app(spec: str) -> App:
    """Import ``package.module:attribute`` and return the App (an Operator is wrapped)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"{spec!r}: expected MODULE:APP, e.g. operators.clicks:app")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # like `python -m`: apps in the current directory
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"cannot import {module_name!r}: {exc}") from exc
    try:
        obj: Any = getattr(module, attr)
    except AttributeError:
        raise ConfigError(f"module {module_name!r} has no attribute {attr!r}") from None
    if isinstance(obj, Operator):
        return App(obj.name, [obj])
    if not isinstance(obj, App):
        raise ConfigError(f"{spec!r} is a {type(obj).__name__}, not a streamremat App or Operator")
    return obj


@dataclass(frozen=True)
class FromEnv:
    """A flag's default read from ``STREAMREMAT_<NAME>``: parsed later, so that a bad
    value is reported under the variable's name (and never breaks ``--help``)."""

    name: str
    raw: str

    def __str__(self) -> str:
        return f"{self.raw}, from {self.name}"


def _env(name: str, default: Any = None) -> Any:
    raw = os.environ.get(f"STREAMREMAT_{name}")
    return default if raw is None else FromEnv(f"STREAMREMAT_{name}", raw)


def _secs(seconds: float | None) -> str | None:
    return None if seconds is None else f"{seconds:g}s"


_CK = CheckpointSettings()
_WORKER = WorkerSettings(worker_id="defaults")


def add_kafka_client_arguments(p: argparse.ArgumentParser) -> None:
    """Connection and security flags of every command that talks to Kafka.

    Defaults are resolved later (``client_config_from_args``), never shown in
    ``--help``: flags, then ``STREAMREMAT_<NAME>``, then ``--kafka-config``."""
    g = p.add_argument_group(
        "Kafka connection and security",
        "each flag also reads STREAMREMAT_<FLAG> (e.g. STREAMREMAT_SASL_PASSWORD); "
        "anything else aiokafka takes goes in --kafka-config",
    )
    g.add_argument("--kafka-config", metavar="FILE", default=None,
                   help="Java properties or .toml file of client settings (security.protocol, "
                        "sasl.mechanism, sasl.username, sasl.password, ssl.cafile, ..., and any "
                        "aiokafka option; [consumer]/[producer]/[admin] tables or consumer.* keys "
                        "for one kind of client); env STREAMREMAT_KAFKA_CONFIG")
    g.add_argument("--security-protocol", default=None,
                   choices=("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"))
    g.add_argument("--sasl-mechanism", default=None,
                   choices=("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"))
    g.add_argument("--sasl-username", default=None)
    g.add_argument("--sasl-password", default=None,
                   help="prefer STREAMREMAT_SASL_PASSWORD or the config file: "
                        "a flag shows in the process list")
    g.add_argument("--ssl-cafile", default=None,
                   help="CA certificate(s) that signed the brokers' certificates "
                        "(default: the system's)")
    g.add_argument("--ssl-certfile", default=None, help="client certificate (mutual TLS)")
    g.add_argument("--ssl-keyfile", default=None, help="client certificate's private key")


def client_config_from_args(args: argparse.Namespace, default_bootstrap: str) -> KafkaClientConfig:
    flags = {
        "bootstrap_servers": getattr(args, "bootstrap", None),
        **{name: getattr(args, name, None) for name in (
            "security_protocol", "sasl_mechanism", "sasl_username", "sasl_password",
            "ssl_cafile", "ssl_certfile", "ssl_keyfile",
        )},
    }  # fmt: skip
    # STREAMREMAT_BOOTSTRAP is the historic name of STREAMREMAT_BOOTSTRAP_SERVERS.
    if flags["bootstrap_servers"] is None and os.environ.get("STREAMREMAT_BOOTSTRAP"):
        flags["bootstrap_servers"] = os.environ["STREAMREMAT_BOOTSTRAP"]
    return KafkaClientConfig.resolve(
        flags, config_file=getattr(args, "kafka_config", None),
        default_bootstrap=default_bootstrap,
    )


def add_worker_arguments(p: argparse.ArgumentParser) -> None:
    """Flags shared by ``worker`` and ``tune``; each defaults to STREAMREMAT_<NAME>.

    Values are parsed in ``settings_from_args``: durations take ``500ms``, ``30s``,
    ``2m``, ``1h`` or plain seconds."""
    p.add_argument("app", metavar="MODULE:APP", help="the App (or Operator) to run")
    p.add_argument("--bootstrap", default=None,
                   help="Kafka bootstrap servers (env STREAMREMAT_BOOTSTRAP; default: the "
                        "--kafka-config file's, else the App's)")
    add_kafka_client_arguments(p)
    p.add_argument("--group-id", default=_env("GROUP_ID"),
                   help="consumer group (default streamremat-<app>)")
    p.add_argument("--state-dir", default=_env("STATE_DIR", _WORKER.state_dir),
                   help="local checkpoint directory (RocksDB)")
    p.add_argument("--checkpoint-policy", choices=("fixed", "adaptive"),
                   default=_env("CHECKPOINT_POLICY", _CK.policy))
    p.add_argument("--checkpoint-interval",
                   default=_env("CHECKPOINT_INTERVAL", _secs(_CK.interval_s)),
                   help="fixed policy: time between checkpoints (default %(default)s)")
    p.add_argument("--checkpoint-records", default=_env("CHECKPOINT_RECORDS"),
                   help="fixed policy: also checkpoint every N records")
    p.add_argument("--rto-seconds", default=_env("RTO_SECONDS", _secs(_CK.rto_s)),
                   help="adaptive policy: recovery-time objective (default %(default)s)")
    p.add_argument("--min-interval", default=_env("MIN_INTERVAL", _secs(_CK.min_interval_s)),
                   help="adaptive policy: shortest interval (default %(default)s)")
    p.add_argument("--max-interval", default=_env("MAX_INTERVAL", _secs(_CK.max_interval_s)),
                   help="adaptive policy: longest interval (default %(default)s)")
    p.add_argument("--prior-mtbf", default=_env("PRIOR_MTBF", _secs(_CK.prior_mtbf_s)),
                   help="adaptive policy: prior mean time between failures "
                        "(default %(default)s)")
    p.add_argument("--keep-checkpoints", default=_env("KEEP_CHECKPOINTS", _CK.keep))
    p.add_argument("--no-replica", action="store_true",
                   help="don't replicate checkpoints to the compacted Kafka topic")
    p.add_argument("--repartition-retention", type=float,
                   default=_env("REPARTITION_RETENTION"),
                   help="retention of new repartition topics, seconds (< 0: unlimited; "
                        "default: margin x keep-checkpoints x max-interval)")
    p.add_argument("--repartition-retention-margin", type=float,
                   default=float(_env("REPARTITION_RETENTION_MARGIN", 2.0)))


def add_worker_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "worker", help="run an App's operators on Kafka",
        description="Consume the App's source topics in a consumer group, keep window state "
                    "in memory with compact checkpoints, recover by replay.",
    )
    add_worker_arguments(p)
    p.add_argument("--commit-interval",
                   default=_env("COMMIT_INTERVAL", _secs(_WORKER.commit_interval_s)),
                   help="time between transactional commits of outputs and offsets "
                        "(default %(default)s)")
    p.add_argument("--guarantee", choices=[g.value for g in Guarantee],
                   default=_env("GUARANTEE", _WORKER.guarantee.value))
    p.add_argument("--on-retention-gap", choices=[g.value for g in GapPolicy],
                   default=_env("ON_RETENTION_GAP", _WORKER.on_retention_gap.value))
    p.add_argument("--metrics-port", default=_env("METRICS_PORT"),
                   help="serve Prometheus /metrics, /healthz and /ready at http://0.0.0.0:PORT")
    p.add_argument("--max-batch", default=_env("MAX_BATCH", _WORKER.max_batch_records))
    p.add_argument("--session-timeout-ms",
                   default=_env("SESSION_TIMEOUT_MS", _WORKER.session_timeout_ms))
    p.add_argument("--replication-factor", default=_env("REPLICATION_FACTOR"),
                   help="of the topics the worker creates (sinks, dead letters, late, "
                        "checkpoints); default min(3, brokers)")
    p.add_argument("--min-insync-replicas", default=_env("MIN_INSYNC_REPLICAS"),
                   help="of the topics the worker creates; default min(2, replication factor)")
    p.add_argument("--log-format", choices=LOG_FORMATS, default=_env("LOG_FORMAT", "text"))
    p.add_argument("--log-level", choices=LOG_LEVELS, type=str.upper,
                   default=_env("LOG_LEVEL", "INFO"))
    p.set_defaults(handler=_run_worker)


def add_tune_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "tune", help="explain each task's checkpoint interval",
        description="Print, per task, the tuner's estimates (C, L, D, r, mu, lambda), the "
                    "chosen interval, the active bound, and the predicted recovery time "
                    "if a failure happened now, beside the RTO.",
    )
    add_worker_arguments(p)
    p.set_defaults(handler=_run_tune)


def _run_tune(args: argparse.Namespace) -> int:
    from streamremat.runtime.explain import explain_app, format_explanations

    try:
        app = load_app(args.app)
        settings = settings_from_args(args, app)
        rows = asyncio.run(explain_app(app, settings))
    except (ConfigError, RuntimeError, KafkaAccessError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(format_explanations(rows))
    return 0


class _Read:
    """Reads flag values (strings from the command line, ``FromEnv`` defaults, or
    typed defaults), so that every bad value is one ConfigError naming where it came
    from, the value, and what is accepted."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args

    def has(self, dest: str) -> bool:
        return hasattr(self.args, dest)

    def _raw(self, dest: str) -> tuple[str, Any]:
        value = getattr(self.args, dest)
        if isinstance(value, FromEnv):
            return value.name, value.raw
        return "--" + dest.replace("_", "-"), value

    def _parse(self, dest: str, parse: Any, accepted: str) -> Any:
        name, value = self._raw(dest)
        if value is None or not isinstance(value, str):
            return value  # absent, or a typed default
        try:
            return parse(value)
        except ValueError:
            raise ConfigError(f"{name}={value!r} is not valid: use {accepted}") from None

    def duration(self, dest: str) -> Any:
        return self._parse(dest, parse_duration_s, DURATION_FORMS)

    def count(self, dest: str, low: int = 1, high: int | None = None, what: str = "") -> Any:
        def parse(text: str) -> int:
            n = int(text.strip())
            if n < low or (high is not None and n > high):
                raise ValueError(text)
            return n

        span = f"{low}-{high}" if high is not None else f">= {low}"
        return self._parse(dest, parse, what or f"a whole number {span}")

    def choice(self, dest: str, choices: Sequence[str], fold: Any = str.lower) -> Any:
        def parse(text: str) -> str:
            if fold(text) not in choices:
                raise ValueError(text)
            return str(fold(text))

        return self._parse(dest, parse, "one of " + ", ".join(choices))

    def text(self, dest: str) -> Any:
        return self._parse(dest, str, "text")


def settings_from_args(args: argparse.Namespace, app: App) -> WorkerSettings:
    """The settings the flags and STREAMREMAT_* variables ask for; ConfigError (one line:
    the setting, its value, what is accepted) for a bad one."""
    read = _Read(args)
    records = read.count("checkpoint_records")
    checkpoints = CheckpointSettings(
        policy=read.choice("checkpoint_policy", ("fixed", "adaptive")),
        interval_s=read.duration("checkpoint_interval"),
        interval_records=records,
        rto_s=read.duration("rto_seconds"),
        min_interval_s=read.duration("min_interval"),
        max_interval_s=read.duration("max_interval"),
        prior_mtbf_s=read.duration("prior_mtbf"),
        keep=read.count("keep_checkpoints"),
        replicate=not args.no_replica,
    )
    extra: dict[str, Any] = {}
    if read.has("commit_interval"):
        extra["commit_interval_s"] = read.duration("commit_interval")
        extra["max_batch_records"] = read.count("max_batch")
        extra["session_timeout_ms"] = read.count("session_timeout_ms", 1000)
        extra["metrics_port"] = read.count("metrics_port", 1, 65535, "a TCP port 1-65535")
        extra["guarantee"] = Guarantee(read.choice("guarantee", [g.value for g in Guarantee]))
        extra["on_retention_gap"] = GapPolicy(
            read.choice("on_retention_gap", [g.value for g in GapPolicy])
        )
    if read.has("replication_factor"):
        try:
            extra["replication"] = Replication(
                read.count("replication_factor"), read.count("min_insync_replicas")
            )
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
    if args.repartition_retention is not None:
        extra["repartition_retention_s"] = float(args.repartition_retention)
    extra["repartition_retention_margin"] = args.repartition_retention_margin
    return WorkerSettings(
        kafka=client_config_from_args(args, app.kafka.bootstrap_servers),
        group_id=read.text("group_id"),
        state_dir=read.text("state_dir"),
        checkpoints=checkpoints,
        **extra,
    )


def _log_options(args: argparse.Namespace) -> tuple[str, LogFormat]:
    read = _Read(args)
    level: str = read.choice("log_level", LOG_LEVELS, str.upper)
    fmt: LogFormat = read.choice("log_format", LOG_FORMATS)
    return level, fmt


def _run_worker(args: argparse.Namespace) -> int:
    from streamremat.runtime.worker import Worker

    try:
        setup_logging(*_log_options(args))
        app = load_app(args.app)
        settings = settings_from_args(args, app)
        sensor = _serve_metrics(app, settings)
        worker = Worker(app, settings, sensor)
    except (ConfigError, WorkerError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(worker.run())


def _serve_metrics(app: App, settings: WorkerSettings) -> Any:
    if settings.metrics_port is None:
        return None
    from streamremat.metrics.prometheus import PrometheusSensor

    prom = PrometheusSensor(app.name)
    try:
        prom.serve(settings.metrics_port, stall_s=settings.health_stall_s)
    except OSError as exc:
        raise ConfigError(
            f"--metrics-port {settings.metrics_port} (STREAMREMAT_METRICS_PORT): cannot listen "
            f"there ({exc.strerror or exc}); pick a free port, e.g. another worker on this "
            "host needs its own --metrics-port"
        ) from None
    return prom
