"""``streamremat worker MODULE:APP``: flags and environment into WorkerSettings."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import sys
from typing import Any

from streamremat.core.exceptions import ConfigError
from streamremat.core.operator import App, Operator
from streamremat.logging import setup_logging
from streamremat.runtime.client import KafkaClientConfig
from streamremat.runtime.kafka import Replication
from streamremat.runtime.settings import CheckpointSettings, GapPolicy, Guarantee, WorkerSettings


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


def _env(name: str, default: Any = None) -> Any:
    return os.environ.get(f"STREAMREMAT_{name}", default)


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
    if flags["bootstrap_servers"] is None and _env("BOOTSTRAP"):
        flags["bootstrap_servers"] = _env("BOOTSTRAP")
    return KafkaClientConfig.resolve(
        flags, config_file=getattr(args, "kafka_config", None),
        default_bootstrap=default_bootstrap,
    )


def add_worker_arguments(p: argparse.ArgumentParser) -> None:
    """Flags shared by ``worker`` and ``tune``; each defaults to STREAMREMAT_<NAME>."""
    p.add_argument("app", metavar="MODULE:APP", help="the App (or Operator) to run")
    p.add_argument("--bootstrap", default=None,
                   help="Kafka bootstrap servers (env STREAMREMAT_BOOTSTRAP; default: the "
                        "--kafka-config file's, else the App's)")
    add_kafka_client_arguments(p)
    p.add_argument("--group-id", default=_env("GROUP_ID"),
                   help="consumer group (default streamremat-<app>)")
    p.add_argument("--state-dir", default=_env("STATE_DIR", ".streamremat/state"),
                   help="local checkpoint directory (RocksDB)")
    p.add_argument("--checkpoint-policy", choices=("fixed", "adaptive"),
                   default=_env("CHECKPOINT_POLICY", "adaptive"))
    p.add_argument("--checkpoint-interval", type=float,
                   default=float(_env("CHECKPOINT_INTERVAL", 30)),
                   help="fixed policy: seconds between checkpoints")
    p.add_argument("--checkpoint-records", type=int, default=_env("CHECKPOINT_RECORDS"),
                   help="fixed policy: also checkpoint every N records")
    p.add_argument("--rto-seconds", type=float, default=float(_env("RTO_SECONDS", 120)),
                   help="adaptive policy: recovery-time objective")
    p.add_argument("--min-interval", type=float, default=float(_env("MIN_INTERVAL", 5)))
    p.add_argument("--max-interval", type=float, default=float(_env("MAX_INTERVAL", 600)))
    p.add_argument("--prior-mtbf", type=float, default=float(_env("PRIOR_MTBF", 86_400)),
                   help="adaptive policy: prior mean time between failures, seconds")
    p.add_argument("--keep-checkpoints", type=int, default=int(_env("KEEP_CHECKPOINTS", 3)))
    p.add_argument("--no-replica", action="store_true",
                   help="don't replicate checkpoints to the compacted Kafka topic")


def add_worker_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "worker", help="run an App's operators on Kafka",
        description="Consume the App's source topics in a consumer group, keep window state "
                    "in memory with compact checkpoints, recover by replay.",
    )
    add_worker_arguments(p)
    p.add_argument("--commit-interval", type=float, default=float(_env("COMMIT_INTERVAL", 0.5)),
                   help="seconds between transactional commits of outputs and offsets")
    p.add_argument("--guarantee", choices=[g.value for g in Guarantee],
                   default=_env("GUARANTEE", Guarantee.EXACTLY_ONCE.value))
    p.add_argument("--on-retention-gap", choices=[g.value for g in GapPolicy],
                   default=_env("ON_RETENTION_GAP", GapPolicy.FAIL.value))
    p.add_argument("--metrics-port", type=int, default=_env("METRICS_PORT"),
                   help="serve Prometheus metrics at http://0.0.0.0:PORT/metrics")
    p.add_argument("--max-batch", type=int, default=int(_env("MAX_BATCH", 5000)))
    p.add_argument("--session-timeout-ms", type=int,
                   default=int(_env("SESSION_TIMEOUT_MS", 10_000)))
    p.add_argument("--replication-factor", type=int, default=_env("REPLICATION_FACTOR"),
                   help="of the topics the worker creates (sinks, dead letters, late, "
                        "checkpoints); default min(3, brokers)")
    p.add_argument("--min-insync-replicas", type=int, default=_env("MIN_INSYNC_REPLICAS"),
                   help="of the topics the worker creates; default min(2, replication factor)")
    p.add_argument("--log-format", choices=("text", "json"), default=_env("LOG_FORMAT", "text"))
    p.add_argument("--log-level", default=_env("LOG_LEVEL", "INFO"))
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
    except (ConfigError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(format_explanations(rows))
    return 0


def settings_from_args(args: argparse.Namespace, app: App) -> WorkerSettings:
    checkpoints = CheckpointSettings(
        policy=args.checkpoint_policy,
        interval_s=args.checkpoint_interval,
        interval_records=int(args.checkpoint_records) if args.checkpoint_records else None,
        rto_s=args.rto_seconds,
        min_interval_s=args.min_interval,
        max_interval_s=args.max_interval,
        prior_mtbf_s=args.prior_mtbf,
        keep=args.keep_checkpoints,
        replicate=not args.no_replica,
    )
    extra: dict[str, Any] = {}
    for flag, field in (
        ("commit_interval", "commit_interval_s"),
        ("max_batch", "max_batch_records"),
        ("session_timeout_ms", "session_timeout_ms"),
    ):
        if hasattr(args, flag):
            extra[field] = getattr(args, flag)
    if getattr(args, "metrics_port", None) is not None:
        extra["metrics_port"] = int(args.metrics_port)
    if hasattr(args, "guarantee"):
        extra["guarantee"] = Guarantee(args.guarantee)
        extra["on_retention_gap"] = GapPolicy(args.on_retention_gap)
    if hasattr(args, "replication_factor"):
        try:
            extra["replication"] = Replication(
                int(args.replication_factor) if args.replication_factor else None,
                int(args.min_insync_replicas) if args.min_insync_replicas else None,
            )
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
    return WorkerSettings(
        kafka=client_config_from_args(args, app.kafka.bootstrap_servers),
        group_id=args.group_id,
        state_dir=args.state_dir,
        checkpoints=checkpoints,
        **extra,
    )


def _run_worker(args: argparse.Namespace) -> int:
    from streamremat.runtime.worker import Worker

    setup_logging(args.log_level, args.log_format)
    try:
        app = load_app(args.app)
        settings = settings_from_args(args, app)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    sensor = None
    if settings.metrics_port is not None:
        from streamremat.metrics.prometheus import PrometheusSensor

        prom = PrometheusSensor(app.name)
        prom.serve(settings.metrics_port)
        sensor = prom
    return asyncio.run(Worker(app, settings, sensor).run())
