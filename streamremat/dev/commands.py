"""``streamremat broker start|stop|status``: argparse wiring over ``DevBroker``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from streamremat.dev.broker import DEFAULT_PORT, KAFKA_VERSION, BrokerConfig, DevBroker
from streamremat.dev.exceptions import DevBrokerError


def add_broker_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    broker = subparsers.add_parser(
        "broker",
        help=f"run a local Apache Kafka {KAFKA_VERSION} broker (KRaft, no Docker)",
        description="Start, stop or inspect the dev broker. Needs java; mvn on first start.",
    )
    actions = broker.add_subparsers(dest="broker_action", required=True, metavar="ACTION")
    for name, run, text in (
        ("start", _start, "start the broker (no-op if it already runs)"),
        ("stop", _stop, "stop the broker (SIGTERM, then SIGKILL)"),
        ("status", _status, "say whether the broker runs"),
    ):
        action = actions.add_parser(name, help=text, description=text)
        action.add_argument("--port", type=int, default=DEFAULT_PORT, help="client port")
        action.add_argument(
            "--data-dir",
            type=Path,
            default=None,
            help="broker data directory (default: $STREAMREMAT_HOME/broker-<port>)",
        )
        action.set_defaults(handler=run)


def broker_from_args(args: argparse.Namespace) -> DevBroker:
    return DevBroker(BrokerConfig(port=args.port, data_dir=args.data_dir))


def _start(args: argparse.Namespace) -> int:
    broker = broker_from_args(args)
    try:
        status = broker.start()
    except DevBrokerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if status.started_now:
        print(f"Kafka {KAFKA_VERSION} started in {status.start_seconds:.1f} s (pid {status.pid})")
    else:
        print(f"Kafka broker already running (pid {status.pid})")
    print(f"bootstrap: {status.bootstrap}")
    print(f"log:       {status.server_log}")
    return 0


def _stop(args: argparse.Namespace) -> int:
    broker = broker_from_args(args)
    if broker.stop():
        print(f"Kafka broker on {broker.config.bootstrap} stopped")
    else:
        print(f"Kafka broker on {broker.config.bootstrap} was not running")
    return 0


def _status(args: argparse.Namespace) -> int:
    status = broker_from_args(args).status()
    if status.running:
        print(f"running (pid {status.pid}), bootstrap {status.bootstrap}, log {status.server_log}")
        return 0
    print(f"not running (bootstrap would be {status.bootstrap})")
    return 3  # like `systemctl status`: scripts can test it
