"""A local multi-node Kafka cluster (KRaft) for development and tests, optionally secured.

Node ``i`` (1-based) is a broker+controller on client port ``port + 2(i-1)``
and controller port one above it, with its own data directory
``<data_dir>/node-<i>``; the three controllers form the quorum, so a cluster
of 3 keeps working with any one node down. Internal topics are replicated 3
times with ``min.insync.replicas`` 2 (fewer on a smaller cluster).

``security="sasl_ssl"`` adds, made locally at the first start (``certs.py``):

* client listeners ``SASL_SSL`` (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), client
  certificates optional; SCRAM users created by ``kafka-storage format
  --add-scram``, passwords random, written to ``users.json`` (mode 600);
* brokers talk to each other over ``SASL_SSL`` as the super user ``admin``, and to
  the controllers over mutual TLS as ``User:broker``;
* the KRaft ``StandardAuthorizer``: nothing is allowed without an ACL, except to
  the super users. ``grant_defaults`` gives the ``streamremat`` user every
  topic, group and transactional id; tests add narrower ACLs with ``acls.py``.

``client-<user>.properties`` in the data directory is a ready ``--kafka-config``
for each user.
"""

from __future__ import annotations

import base64
import json
import secrets
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from streamremat.dev.broker import HOST, BrokerConfig, DevBroker, _port_open
from streamremat.dev.certs import TlsFiles, make_tls_files
from streamremat.dev.exceptions import BrokerStartError, PortInUseError
from streamremat.dev.jars import default_home, file_lock
from streamremat.dev.ports import free_port_run
from streamremat.dev.sync import run_sync
from streamremat.runtime.client import KafkaClientConfig, Secret

__all__ = ["SECURITY", "ClusterConfig", "DevCluster", "free_port_run"]

SECURITY = ("plaintext", "sasl_ssl")
SUPER_USER = "admin"
APP_USER = "streamremat"
_SCRAM = ("SCRAM-SHA-256", "SCRAM-SHA-512")


@dataclass(frozen=True)
class ClusterConfig:
    nodes: int = 3
    port: int = 9092
    data_dir: Path | None = None
    home: Path = field(default_factory=default_home)
    security: str = "plaintext"
    #: SCRAM (and PLAIN) users besides ``admin`` and ``streamremat``
    users: tuple[str, ...] = ()
    heap_mb: int = 512
    stop_with_parent: bool = False
    start_timeout_s: float = 120.0

    def __post_init__(self) -> None:
        if self.security not in SECURITY:
            raise ValueError(f"--security must be one of {', '.join(SECURITY)}, "
                             f"not {self.security!r}")
        if self.nodes < 1:
            raise ValueError("--nodes must be >= 1")
        if self.data_dir is None:
            object.__setattr__(self, "data_dir", self.home / f"cluster-{self.port}")

    @property
    def root(self) -> Path:
        assert self.data_dir is not None  # set in __post_init__
        return self.data_dir

    def ports(self, node: int) -> tuple[int, int]:
        """(client port, controller port) of node ``node`` (1-based)."""
        base = self.port + 2 * (node - 1)
        return base, base + 1

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{HOST}:{self.ports(n)[0]}" for n in range(1, self.nodes + 1))

    @property
    def all_users(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((SUPER_USER, APP_USER, *self.users)))


class DevCluster:
    """Start, stop, kill and inspect the nodes of a ``ClusterConfig``."""

    def __init__(self, config: ClusterConfig | None = None) -> None:
        self.config = config or ClusterConfig()
        self._passwords: dict[str, str] | None = None
        self._tls: TlsFiles | None = None

    # -- what clients need ---------------------------------------------------------

    @property
    def secured(self) -> bool:
        return self.config.security == "sasl_ssl"

    def password(self, user: str) -> str:
        return self._users()[user]

    @property
    def tls(self) -> TlsFiles:
        if self._tls is None:
            self._tls = make_tls_files(self.config.root / "tls")
        return self._tls

    def client(self, user: str = APP_USER, mechanism: str = "SCRAM-SHA-512",
               **changes: object) -> KafkaClientConfig:
        """How ``user`` connects (the super user ``admin`` too); plaintext if unsecured."""
        if not self.secured:
            return KafkaClientConfig(self.config.bootstrap)
        fields: dict[str, object] = {
            "bootstrap_servers": self.config.bootstrap, "security_protocol": "SASL_SSL",
            "sasl_mechanism": mechanism, "sasl_username": user,
            "sasl_password": Secret(self.password(user)), "ssl_cafile": str(self.tls.ca_cert),
        }
        fields.update(changes)
        return KafkaClientConfig(**fields)  # type: ignore[arg-type]

    def nodes(self) -> list[DevBroker]:
        return [DevBroker(self._node_config(n)) for n in range(1, self.config.nodes + 1)]

    def node(self, node_id: int) -> DevBroker:
        return DevBroker(self._node_config(node_id))

    # -- lifecycle ---------------------------------------------------------------

    def start(self) -> float:
        """Start every node not running yet; return the seconds it took.

        1. Make the TLS files and users (secured) and write each node's
           ``client-<user>.properties``.
        2. Format each new node with one cluster id (and the SCRAM users).
        3. Launch every node, then wait until each answers a metadata request
           and the cluster reports all its brokers.
        4. Secured: grant the ``streamremat`` user its default ACLs.
        """
        cfg = self.config
        began = time.monotonic()
        with file_lock(cfg.root / ".start.lock"):
            if self.secured:
                self._write_client_files()
            brokers = self.nodes()
            pids = {}
            for broker in brokers:
                if broker.status().running:
                    continue
                for port in (broker.config.port, broker.config.cport):
                    if _port_open(port):
                        raise PortInUseError(f"port {port} on {HOST} is used by another "
                                             "process; pick other ports with --port")
            # Formatting is a JVM start per node: do them side by side; spawn the
            # brokers from this thread, since a pool thread's exit would SIGTERM them.
            down = [b for b in brokers if not b.status().running]
            with ThreadPoolExecutor(max_workers=len(down) or 1) as pool:
                prepared = list(pool.map(DevBroker.prepare, down))
            for broker, (java, classpath) in zip(down, prepared, strict=True):
                pids[broker.config.node_id] = broker.spawn(java, classpath)
            for broker in brokers:
                if broker.config.node_id in pids:
                    broker.wait_ready(pids[broker.config.node_id])
            self._wait_all_brokers(cfg.start_timeout_s)
            if self.secured and pids:
                from streamremat.dev.acls import grant_defaults

                run_sync(grant_defaults(self.client(SUPER_USER), APP_USER))
        return time.monotonic() - began

    def start_node(self, node_id: int) -> None:
        """(Re)start one node, e.g. after ``kill``; waits until it is back in the cluster."""
        broker = self.node(node_id)
        if not broker.status().running:
            broker.wait_ready(broker.launch())
        self._wait_all_brokers(self.config.start_timeout_s)

    def kill(self, node_id: int) -> bool:
        """SIGKILL one node (no clean shutdown)."""
        return self.node(node_id).kill()

    def stop(self) -> list[int]:
        """Stop every node; return the ids of those that were running."""
        return [b.config.node_id for b in self.nodes() if b.stop()]

    def running(self) -> list[int]:
        return [b.config.node_id for b in self.nodes() if b.status().running]

    # -- internals --------------------------------------------------------------

    def _node_config(self, node_id: int) -> BrokerConfig:
        cfg = self.config
        port, cport = cfg.ports(node_id)
        voters = tuple((n, cfg.ports(n)[1]) for n in range(1, cfg.nodes + 1))
        replicas = min(3, cfg.nodes)
        overrides = {
            "offsets.topic.replication.factor": str(replicas),
            "transaction.state.log.replication.factor": str(replicas),
            "transaction.state.log.min.isr": str(min(2, replicas)),
            "default.replication.factor": str(replicas),
            "min.insync.replicas": "1",
            # Leaders move back to a restarted node soon (fault tests kill nodes).
            "leader.imbalance.check.interval.seconds": "10",
        }
        format_args: tuple[str, ...] = ()
        if self.secured:
            overrides.update(self._security_properties(port, cport))
            format_args = tuple(
                arg for user, pw in self._users().items() for mech in _SCRAM
                for arg in ("--add-scram", f"{mech}=[name={user},password={pw}]")
            )
        return BrokerConfig(
            port=port, controller_port=cport, data_dir=cfg.root / f"node-{node_id}",
            home=cfg.home, heap_mb=cfg.heap_mb, stop_with_parent=cfg.stop_with_parent,
            start_timeout_s=cfg.start_timeout_s, node_id=node_id, voters=voters,
            cluster_id=self._cluster_id(), overrides=overrides, format_args=format_args,
            ready_client=self.client(SUPER_USER) if self.secured else None,
        )

    def _security_properties(self, port: int, cport: int) -> dict[str, str]:
        tls = self.tls
        users = self._users()
        admin_pw = users[SUPER_USER]
        scram_login = "org.apache.kafka.common.security.scram.ScramLoginModule required"
        plain_users = " ".join(f'user_{u}="{p}"' for u, p in users.items())
        return {
            "listeners": f"SASL_SSL://{HOST}:{port},CONTROLLER://{HOST}:{cport}",
            "advertised.listeners": f"SASL_SSL://{HOST}:{port}",
            "listener.security.protocol.map": "SASL_SSL:SASL_SSL,CONTROLLER:SSL",
            "inter.broker.listener.name": "SASL_SSL",
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config":
                f'{scram_login} username="{SUPER_USER}" password="{admin_pw}";',
            "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config": f"{scram_login};",
            "listener.name.sasl_ssl.plain.sasl.jaas.config":
                "org.apache.kafka.common.security.plain.PlainLoginModule required "
                f'username="{SUPER_USER}" password="{admin_pw}" {plain_users};',
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(tls.keystore),
            "ssl.keystore.password": tls.store_password,
            "ssl.key.password": tls.store_password,
            "ssl.truststore.type": "PKCS12",
            "ssl.truststore.location": str(tls.truststore),
            "ssl.truststore.password": tls.store_password,
            # Client certificates are optional for clients, required between controllers.
            "listener.name.sasl_ssl.ssl.client.auth": "requested",
            "listener.name.controller.ssl.client.auth": "required",
            "ssl.principal.mapping.rules": "RULE:^CN=([a-zA-Z0-9.-]+).*$/$1/,DEFAULT",
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": f"User:{SUPER_USER};User:broker",
            "allow.everyone.if.no.acl.found": "false",
        }

    def _cluster_id(self) -> str:
        path = self.config.root / "cluster.id"
        if not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode())
        return path.read_text().strip()

    def _users(self) -> dict[str, str]:
        """Every user's password, made once; new users only before the first format."""
        if self._passwords is None:
            path = self.config.root / "users.json"
            known: dict[str, str] = json.loads(path.read_text()) if path.is_file() else {}
            formatted = (self.config.root / "node-1" / "kraft-logs" / "meta.properties").is_file()
            for user in self.config.all_users:
                if user not in known:
                    if formatted:
                        raise BrokerStartError(
                            f"user {user!r} is new but the cluster in {self.config.root} is "
                            "formatted already (users are created at format); use a new "
                            "--data-dir"
                        )
                    known[user] = secrets.token_urlsafe(12)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(known, indent=1) + "\n")
            path.chmod(0o600)
            self._passwords = known
        return self._passwords

    def _write_client_files(self) -> None:
        for user in self._users():
            path = self.config.root / f"client-{user}.properties"
            path.write_text(client_properties(self.client(user)))
            path.chmod(0o600)

    def _wait_all_brokers(self, timeout_s: float) -> None:
        from streamremat.runtime.kafka import admin_client

        async def count() -> int:
            try:
                async with admin_client(self.client(SUPER_USER)) as admin:
                    return len((await admin.describe_cluster()).get("brokers") or ())
            except Exception:  # not ready yet
                return 0

        deadline = time.monotonic() + timeout_s
        while run_sync(count()) < self.config.nodes:
            if time.monotonic() > deadline:
                raise BrokerStartError(
                    f"not all {self.config.nodes} brokers joined the cluster within "
                    f"{timeout_s:.0f} s; see {self.config.root}/node-*/logs/server.log"
                )
            time.sleep(0.5)


def client_properties(client: KafkaClientConfig) -> str:
    """A ``--kafka-config`` properties file for ``client`` (it holds the password)."""
    lines = [f"bootstrap.servers={client.bootstrap_servers}",
             f"security.protocol={client.security_protocol}"]
    if client.sasl_mechanism:
        assert client.sasl_password is not None
        lines += [f"sasl.mechanism={client.sasl_mechanism}",
                  f"sasl.username={client.sasl_username}",
                  f"sasl.password={client.sasl_password.reveal()}"]
    if client.ssl_cafile:
        lines.append(f"ssl.cafile={client.ssl_cafile}")
    return "\n".join(lines) + "\n"
