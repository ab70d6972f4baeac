"""``streamremat broker start|stop|status``: argparse wiring over ``DevBroker`` and
``DevCluster`` (``--nodes N`` and/or ``--security sasl_ssl``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from streamremat.dev.broker import (
    DEFAULT_PORT,
    KAFKA_VERSION,
    BrokerConfig,
    DevBroker,
    ports_in,
)
from streamremat.dev.cluster import APP_USER, SECURITY, ClusterConfig, DevCluster
from streamremat.dev.exceptions import DevBrokerError


def add_broker_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    broker = subparsers.add_parser(
        "broker",
        help=f"run a local Apache Kafka {KAFKA_VERSION} broker or cluster (KRaft, no Docker)",
        description="Start, stop or inspect the dev broker, or with --nodes N a local cluster "
                    "(node i listens on PORT+2(i-1), its controller one above). Needs java; "
                    "mvn on first start; openssl and keytool for --security sasl_ssl.",
    )
    actions = broker.add_subparsers(dest="broker_action", required=True, metavar="ACTION")
    for name, run, text in (
        ("start", _start, "start the broker (no-op if it already runs)"),
        ("stop", _stop, "stop the broker (SIGTERM, then SIGKILL)"),
        ("status", _status, "say whether the broker runs"),
    ):
        action = actions.add_parser(name, help=text, description=text)
        action.add_argument("--port", type=int, default=None,
                            help=f"client port (default: that of the broker in --data-dir, "
                                 f"else {DEFAULT_PORT})")
        action.add_argument(
            "--data-dir",
            type=Path,
            default=None,
            help="broker data directory (default: $STREAMREMAT_HOME/broker-<port>, "
                 "or cluster-<port> for a cluster)",
        )
        action.add_argument("--nodes", type=int, default=1,
                            help="KRaft nodes (broker+controller each); default 1")
        action.add_argument("--security", choices=SECURITY, default="plaintext",
                            help="sasl_ssl: SASL_SSL listeners, SCRAM users, TLS certificates "
                                 "made locally, the StandardAuthorizer (ACLs)")
        action.set_defaults(handler=run)


def broker_from_args(args: argparse.Namespace) -> DevBroker:
    """Without --port, a --data-dir of a broker started before names its ports (so
    ``stop --data-dir X`` stops, and says, the broker of X, not the default port's)."""
    if args.port is None and args.data_dir is not None and (ports := ports_in(args.data_dir)):
        return DevBroker(BrokerConfig(port=ports[0], controller_port=ports[1],
                                      data_dir=args.data_dir))
    return DevBroker(BrokerConfig(port=_port(args), data_dir=args.data_dir))


def _port(args: argparse.Namespace) -> int:
    return DEFAULT_PORT if args.port is None else int(args.port)


def _cluster(args: argparse.Namespace) -> DevCluster | None:
    if args.nodes == 1 and args.security == "plaintext":
        return None  # the single dev broker, as before
    return DevCluster(ClusterConfig(nodes=args.nodes, port=_port(args), data_dir=args.data_dir,
                                    security=args.security))


def _start(args: argparse.Namespace) -> int:
    try:
        cluster = _cluster(args)
        if cluster is not None:
            return _start_cluster(cluster)
        status = broker_from_args(args).start()
    except (DevBrokerError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if status.started_now:
        print(f"Kafka {KAFKA_VERSION} started in {status.start_seconds:.1f} s (pid {status.pid})")
    else:
        print(f"Kafka broker already running (pid {status.pid})")
    print(f"bootstrap: {status.bootstrap}")
    print(f"log:       {status.server_log}")
    return 0


def _start_cluster(cluster: DevCluster) -> int:
    cfg = cluster.config
    seconds = cluster.start()
    print(f"Kafka {KAFKA_VERSION} cluster of {cfg.nodes} nodes ({cfg.security}) up after "
          f"{seconds:.1f} s")
    print(f"bootstrap: {cfg.bootstrap}")
    for broker in cluster.nodes():
        print(f"node {broker.config.node_id}: pid {broker.status().pid}, "
              f"log {broker.config.server_log}")
    if cluster.secured:
        print(f"client config ({APP_USER}, all ACLs): {cfg.root}/client-{APP_USER}.properties")
        print(f"super user:   {cfg.root}/client-admin.properties")
        print(f"CA:           {cluster.tls.ca_cert}")
    return 0


def _stop(args: argparse.Namespace) -> int:
    cluster = _cluster(args)
    if cluster is not None:
        stopped = cluster.stop()
        print(f"stopped nodes {stopped}" if stopped else "no node was running")
        return 0
    broker = broker_from_args(args)
    if broker.stop():
        print(f"Kafka broker on {broker.config.bootstrap} stopped")
    else:
        print(f"Kafka broker on {broker.config.bootstrap} was not running")
    return 0


def _status(args: argparse.Namespace) -> int:
    cluster = _cluster(args)
    if cluster is not None:
        up = 0
        for broker in cluster.nodes():
            status = broker.status()
            up += status.running
            state = f"running (pid {status.pid})" if status.running else "not running"
            print(f"node {broker.config.node_id}: {state}, bootstrap {status.bootstrap}")
        return 0 if up == cluster.config.nodes else 3
    status = broker_from_args(args).status()
    if status.running:
        print(f"running (pid {status.pid}), bootstrap {status.bootstrap}, log {status.server_log}")
        return 0
    print(f"not running (bootstrap would be {status.bootstrap})")
    return 3  # like `systemctl status`: scripts can test it
