"""A real single-node Apache Kafka broker (KRaft mode) for development and tests.

No Docker: the broker jars come from Maven Central (see ``jars.py``), the JVM
runs detached in its own session, and everything it writes lives in one data
directory (properties, KRaft logs, log4j output, pid file).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streamremat.dev.exceptions import BrokerStartError, PortInUseError
from streamremat.dev.jars import KAFKA_VERSION, default_home, ensure_jars, file_lock, require_tool
from streamremat.dev.ports import free_port_pair
from streamremat.dev.sync import run_sync

HOST = "127.0.0.1"
DEFAULT_PORT = 9092

# Children we spawned from this process, kept so they are reaped (no zombies,
# no "subprocess still running" warnings) when stopped from the same process.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


@dataclass(frozen=True)
class BrokerConfig:
    """Where and how the dev broker runs.

    ``controller_port`` defaults to ``port + 1``; ``data_dir`` defaults to
    ``<home>/broker-<port>``; ``home`` (jar cache and default data root) to
    ``$STREAMREMAT_HOME`` or ``~/.cache/streamremat``. ``stop_with_parent``
    makes the kernel SIGTERM the broker when the starting process dies.

    A node of a multi-node cluster (``cluster.py``) also sets ``node_id``,
    ``voters`` (every controller's ``(node id, controller port)``), a shared
    ``cluster_id``, ``overrides`` of the server properties (listeners, security,
    replication), ``format_args`` for ``kafka-storage format`` (``--add-scram``)
    and ``ready_client`` (how the readiness probe connects: a KafkaClientConfig).
    """

    port: int = DEFAULT_PORT
    controller_port: int | None = None
    data_dir: Path | None = None
    home: Path = field(default_factory=default_home)
    heap_mb: int = 1024
    # Test sessions set this so a killed pytest leaves no orphan JVM (Linux only).
    stop_with_parent: bool = False
    # A JVM broker's start takes 10-20 s on an idle 2-core machine and over a
    # minute under load (a fresh clone's `make demo` missed 60 s at load 24).
    start_timeout_s: float = 180.0
    stop_timeout_s: float = 30.0
    node_id: int = 1
    voters: tuple[tuple[int, int], ...] = ()
    cluster_id: str | None = None
    overrides: Mapping[str, str] = field(default_factory=dict, repr=False)  # may too
    format_args: tuple[str, ...] = field(default=(), repr=False)  # may carry passwords
    ready_client: Any = None

    def __post_init__(self) -> None:
        if self.controller_port is None:
            object.__setattr__(self, "controller_port", self.port + 1)
        if self.data_dir is None:
            object.__setattr__(self, "data_dir", self.home / f"broker-{self.port}")
        if self.controller_port == self.port:
            raise ValueError(f"controller_port must differ from port ({self.port})")

    @property
    def cport(self) -> int:
        assert self.controller_port is not None  # set in __post_init__
        return self.controller_port

    @property
    def root(self) -> Path:
        assert self.data_dir is not None  # set in __post_init__
        return self.data_dir

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def log_dirs(self) -> Path:
        return self.root / "kraft-logs"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def server_log(self) -> Path:
        return self.logs / "server.log"

    @property
    def stdout_log(self) -> Path:
        return self.logs / "kafka.out"

    @property
    def properties_file(self) -> Path:
        return self.root / "server.properties"

    @property
    def log4j_file(self) -> Path:
        return self.root / "log4j.properties"

    @property
    def pid_file(self) -> Path:
        return self.root / "broker.pid"


def server_properties(config: BrokerConfig) -> dict[str, str]:
    """The KRaft broker+controller settings, sized for a laptop/CI box: one node
    unless ``config.voters`` lists the others; ``config.overrides`` win."""
    voters = config.voters or ((config.node_id, config.cport),)
    props = {
        "process.roles": "broker,controller",
        "node.id": str(config.node_id),
        "controller.quorum.voters": ",".join(f"{n}@{HOST}:{p}" for n, p in voters),
        "listeners": f"PLAINTEXT://{HOST}:{config.port},CONTROLLER://{HOST}:{config.cport}",
        "advertised.listeners": f"PLAINTEXT://{HOST}:{config.port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(config.log_dirs),
        # One node: every internal topic has one replica.
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "default.replication.factor": "1",
        "min.insync.replicas": "1",
        # Fewer internal partitions: the first group/transaction starts faster.
        "offsets.topic.num.partitions": "5",
        "transaction.state.log.num.partitions": "5",
        "group.initial.rebalance.delay.ms": "0",
        # Fault tests kill workers; let consumers ask for short session timeouts.
        "group.min.session.timeout.ms": "1000",
        # A transaction past its timeout is aborted within a second, not ten
        # (tests give producers a transaction timeout of a second or two).
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
        "num.partitions": "1",
        "auto.create.topics.enable": "false",
        "delete.topic.enable": "true",
        # Small-machine sizing.
        "num.network.threads": "2",
        "num.io.threads": "4",
        "num.recovery.threads.per.data.dir": "1",
        "log.segment.bytes": str(64 * 1024 * 1024),
        "log.cleaner.dedupe.buffer.size": str(32 * 1024 * 1024),
        # Retention tests need deletion to happen within seconds, not 5 minutes.
        "log.retention.check.interval.ms": "5000",
        "log.retention.hours": "168",
    }
    props.update(config.overrides)
    return props


def ports_in(data_dir: Path) -> tuple[int, int] | None:
    """The client and controller ports of the broker configured in ``data_dir`` (from
    its ``server.properties``), or None when no broker was ever started there."""
    try:
        text = (data_dir / "server.properties").read_text()
    except OSError:
        return None
    ports: dict[str, int] = {}
    for line in text.splitlines():
        if line.startswith("listeners="):
            for listener in line.removeprefix("listeners=").split(","):
                name, _, address = listener.partition("://")
                ports.setdefault("CONTROLLER" if name == "CONTROLLER" else "client",
                                 int(address.rpartition(":")[2]))
    if set(ports) != {"client", "CONTROLLER"}:
        return None
    return ports["client"], ports["CONTROLLER"]


def render_properties(props: dict[str, str]) -> str:
    return "".join(f"{key}={value}\n" for key, value in props.items())


def log4j_properties(config: BrokerConfig) -> str:
    return (
        "log4j.rootLogger=INFO, file\n"
        "log4j.appender.file=org.apache.log4j.RollingFileAppender\n"
        f"log4j.appender.file.File={config.server_log}\n"
        "log4j.appender.file.MaxFileSize=20MB\n"
        "log4j.appender.file.MaxBackupIndex=2\n"
        "log4j.appender.file.layout=org.apache.log4j.PatternLayout\n"
        "log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n\n"
        "log4j.logger.kafka.request.logger=WARN\n"
        "log4j.logger.kafka.log.LogCleaner=WARN\n"
        "log4j.logger.state.change.logger=WARN\n"
        "log4j.logger.kafka.coordinator=WARN\n"
        "log4j.logger.org.apache.kafka.coordinator=WARN\n"
        "log4j.logger.org.apache.kafka.storage.internals.log=WARN\n"
        "log4j.logger.kafka.log=WARN\n"
    )


@dataclass(frozen=True)
class BrokerStatus:
    running: bool
    pid: int | None
    bootstrap: str
    server_log: Path
    started_now: bool = False
    start_seconds: float | None = None


class DevBroker:
    """Start, stop and inspect one dev broker described by a ``BrokerConfig``."""

    def __init__(self, config: BrokerConfig | None = None) -> None:
        self.config = config or BrokerConfig()

    def status(self) -> BrokerStatus:
        pid = self._running_pid()
        return BrokerStatus(pid is not None, pid, self.config.bootstrap, self.config.server_log)

    def start(self) -> BrokerStatus:
        """Start the broker unless it already runs; return once clients can use it.

        1. Check ``java`` exists, fetch the jars if not cached.
        2. Write ``server.properties`` and ``log4j.properties``.
        3. Format KRaft storage once (a fresh cluster id).
        4. Launch ``kafka.Kafka`` detached, record its pid.
        5. Wait until the port accepts and a metadata request succeeds.
        """
        cfg = self.config
        with file_lock(cfg.root / ".start.lock"):
            pid = self._running_pid()
            if pid is not None:
                return BrokerStatus(True, pid, cfg.bootstrap, cfg.server_log)
            began = time.monotonic()
            pid = self.launch()
            self.wait_ready(pid)
            elapsed = time.monotonic() - began
            return BrokerStatus(True, pid, cfg.bootstrap, cfg.server_log, True, elapsed)

    def launch(self) -> int:
        """Steps 1-4 of ``start``: a cluster launches every node before waiting (the
        controllers need a quorum before any node is ready)."""
        return self.spawn(*self.prepare())

    def prepare(self) -> tuple[str, str]:
        """Steps 1-3 of ``start`` (ports, config, format); returns ``(java, classpath)``.

        Safe to run in a worker thread; ``spawn`` is not (see ``_term_on_parent_death``).
        """
        cfg = self.config
        java = require_tool("java", "to run the Kafka broker")
        libs = ensure_jars(cfg.home)
        for port in (cfg.port, cfg.cport):
            if _port_open(port):
                raise PortInUseError(
                    f"port {port} on {HOST} is used by another process; "
                    "pick free ports with --port (controller uses port+1)"
                )
        self._write_config()
        classpath = f"{libs}/*"
        self._format_storage(java, classpath)
        return java, classpath

    def spawn(self, java: str, classpath: str) -> int:
        """Step 4 of ``start``: the broker JVM. Call it from a thread that outlives the
        broker (the main thread): with ``stop_with_parent`` Linux signals the child when
        the *thread* that forked it exits, not the process."""
        return self._launch(java, classpath)

    def kill(self) -> bool:
        """SIGKILL the broker (fault tests: no clean shutdown). False if not running."""
        pid = self._running_pid()
        if pid is None:
            return False
        _signal_group(pid, signal.SIGKILL)
        _wait_gone(pid, 10.0)
        return True

    def stop(self) -> bool:
        """Stop the broker (SIGTERM, then SIGKILL). Returns False if it was not running."""
        cfg = self.config
        pid = self._running_pid()
        if pid is None:
            cfg.pid_file.unlink(missing_ok=True)
            return False
        _signal_group(pid, signal.SIGTERM)
        if not _wait_gone(pid, cfg.stop_timeout_s):
            _signal_group(pid, signal.SIGKILL)
            _wait_gone(pid, 10.0)
        cfg.pid_file.unlink(missing_ok=True)
        return True

    def log_tail(self, lines: int = 40) -> str:
        parts = []
        for path in (self.config.stdout_log, self.config.server_log):
            if path.is_file():
                text = path.read_text(errors="replace").splitlines()[-lines:]
                parts.append(f"--- {path} (last {len(text)} lines)\n" + "\n".join(text))
        return "\n".join(parts) or "(no broker log written)"

    def _write_config(self) -> None:
        cfg = self.config
        cfg.logs.mkdir(parents=True, exist_ok=True)
        cfg.properties_file.write_text(render_properties(server_properties(cfg)))
        cfg.properties_file.chmod(0o600)  # a secured node's holds passwords
        cfg.log4j_file.write_text(log4j_properties(cfg))

    def _format_storage(self, java: str, classpath: str) -> None:
        cfg = self.config
        if (cfg.log_dirs / "meta.properties").is_file():
            return
        tool = [java, "-cp", classpath, f"-Dlog4j.configuration=file:{cfg.log4j_file}"]
        tool.append("kafka.tools.StorageTool")
        cluster_id = cfg.cluster_id or _run_checked([*tool, "random-uuid"]).strip().splitlines()[-1]
        # "--cluster-id=": a random id may start with "-", which the tool would
        # otherwise read as an option (seen in CI: "expected one argument").
        _run_checked([*tool, "format", f"--cluster-id={cluster_id}",
                      "-c", str(cfg.properties_file), *cfg.format_args])

    def _launch(self, java: str, classpath: str) -> int:
        cfg = self.config
        cmd = [
            java, f"-Xmx{cfg.heap_mb}m", f"-Xms{min(256, cfg.heap_mb)}m", "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-Djava.awt.headless=true", f"-Dlog4j.configuration=file:{cfg.log4j_file}",
            f"-Dkafka.logs.dir={cfg.logs}", "-cp", classpath,
            "kafka.Kafka", str(cfg.properties_file),
        ]  # fmt: skip
        with cfg.stdout_log.open("ab") as out:
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=cfg.root,
                start_new_session=True,
                preexec_fn=_term_on_parent_death if cfg.stop_with_parent else None,
            )
        _CHILDREN[proc.pid] = proc
        cfg.pid_file.write_text(f"{proc.pid}\n")
        return proc.pid

    def wait_ready(self, pid: int) -> None:
        """Step 5 of ``start``: until the port accepts and a metadata request succeeds."""
        cfg = self.config
        deadline = time.monotonic() + cfg.start_timeout_s
        while time.monotonic() < deadline:
            if not _is_alive(pid):
                cfg.pid_file.unlink(missing_ok=True)
                raise BrokerStartError(f"Kafka broker exited during startup.\n{self.log_tail()}")
            if _port_open(cfg.port) and run_sync(_metadata_ok(cfg.ready_client or cfg.bootstrap)):
                return
            time.sleep(0.2)
        self.stop()
        raise BrokerStartError(
            f"Kafka broker not ready on {cfg.bootstrap} after {cfg.start_timeout_s:.0f} s "
            f"(stopped it).\n{self.log_tail()}"
        )

    def _running_pid(self) -> int | None:
        try:
            pid = int(self.config.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        return pid if _is_alive(pid) and _is_kafka(pid) else None


def _run_checked(cmd: list[str]) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        # --add-scram arguments carry passwords: name the tool, not its arguments.
        shown = " ".join(a for a in cmd if "password=" not in a)
        raise BrokerStartError(
            f"command failed (exit {done.returncode}): {shown}\n{done.stdout}{done.stderr}"
        )
    return done.stdout


def _port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((HOST, port)) == 0


async def _metadata_ok(bootstrap: Any) -> bool:
    from streamremat.runtime.kafka import cluster_ready

    return await cluster_ready(bootstrap, timeout_s=5.0)


def _is_alive(pid: int) -> bool:
    child = _CHILDREN.get(pid)
    if child is not None:
        return child.poll() is None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    if stat.is_file():  # a zombie is dead for our purposes
        try:
            return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except (OSError, IndexError):
            return False
    return True


def _is_kafka(pid: int) -> bool:
    """Guard against a recycled pid: the process must be a Kafka JVM (Linux only check)."""
    cmdline = Path(f"/proc/{pid}/cmdline")
    if not cmdline.parent.is_dir():
        return True
    try:
        return b"kafka.Kafka" in cmdline.read_bytes()
    except OSError:
        return False


def _term_on_parent_death() -> None:
    """In the forked child: ask Linux to SIGTERM us when the parent dies (best effort).

    PR_SET_PDEATHSIG fires when the forking *thread* exits, so a broker must be
    spawned from a long-lived thread (a pool thread would take it down with it)."""
    if sys.platform != "linux":
        return
    pr_set_pdeathsig = 1
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)  # the broker leads its own session (start_new_session)
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def _wait_gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    child = _CHILDREN.get(pid)
    while time.monotonic() < deadline:
        if child is not None:
            try:
                child.wait(timeout=0.1)
            except subprocess.TimeoutExpired:
                continue
            _CHILDREN.pop(pid, None)
            return True
        if not _is_alive(pid):
            return True
        time.sleep(0.1)
    return not _is_alive(pid)


__all__ = [
    "DEFAULT_PORT",
    "KAFKA_VERSION",
    "BrokerConfig",
    "BrokerStatus",
    "DevBroker",
    "free_port_pair",
    "log4j_properties",
    "render_properties",
    "server_properties",
]
