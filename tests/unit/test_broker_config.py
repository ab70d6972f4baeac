"""Dev broker configuration and its error messages (no broker is started here)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from streamremat.cli import main
from streamremat.dev import jars
from streamremat.dev.broker import BrokerConfig, DevBroker, free_port_pair, server_properties
from streamremat.dev.exceptions import MissingToolError

REPO = Path(__file__).resolve().parents[2]


def test_properties_are_a_single_node_kraft_cluster(tmp_path: Path) -> None:
    cfg = BrokerConfig(port=19092, data_dir=tmp_path / "d", home=tmp_path / "h")

    props = server_properties(cfg)

    assert props["process.roles"] == "broker,controller"
    assert props["node.id"] == "1"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:19093"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:19092"
    assert props["controller.listener.names"] == "CONTROLLER"
    assert "CONTROLLER:PLAINTEXT" in props["listener.security.protocol.map"]
    assert props["log.dirs"] == str(tmp_path / "d" / "kraft-logs")
    for key in (
        "offsets.topic.replication.factor",
        "transaction.state.log.replication.factor",
        "transaction.state.log.min.isr",
    ):
        assert props[key] == "1"
    assert props["group.initial.rebalance.delay.ms"] == "0"
    assert props["auto.create.topics.enable"] == "false"


def test_config_defaults_follow_port_and_home(tmp_path: Path) -> None:
    cfg = BrokerConfig(port=30000, home=tmp_path)

    assert cfg.cport == 30001
    assert cfg.root == tmp_path / "broker-30000"
    assert cfg.bootstrap == "127.0.0.1:30000"
    with pytest.raises(ValueError):
        BrokerConfig(port=1, controller_port=1, home=tmp_path)


def test_missing_java_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    broker = DevBroker(BrokerConfig(port=free_port_pair(), home=tmp_path / "h"))

    with pytest.raises(MissingToolError, match=r"`java` not found.*install a JDK"):
        broker.start()
    assert not broker.status().running


def test_missing_maven_is_named_and_nothing_is_marked_fetched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_which = shutil.which
    monkeypatch.setattr(
        shutil, "which", lambda name, *a, **k: None if name == "mvn" else real_which(name)
    )
    home = tmp_path / "h"

    with pytest.raises(MissingToolError, match=r"`mvn` not found.*Kafka 3.9.1 jars.*apt-get"):
        jars.ensure_jars(home)
    assert not jars.is_fetched(home)


def test_half_fetched_jars_are_not_trusted(tmp_path: Path) -> None:
    libs = jars.libs_dir(tmp_path)
    libs.mkdir(parents=True)
    (libs / "kafka_2.13-3.9.1.jar").write_bytes(b"")

    assert not jars.is_fetched(tmp_path)


def test_packaged_pom_matches_the_repository_pom() -> None:
    repo_pom = REPO / "deploy" / "kafka" / "pom.xml"
    packaged = REPO / "streamremat" / "dev" / "kafka-pom.xml"

    assert packaged.read_bytes() == repo_pom.read_bytes()
    assert f"<kafka.version>{jars.KAFKA_VERSION}</kafka.version>" in repo_pom.read_text()


def test_cli_status_of_a_stopped_broker(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port_pair()

    code = main(["broker", "status", "--port", str(port), "--data-dir", str(tmp_path)])

    assert code == 3
    assert f"not running (bootstrap would be 127.0.0.1:{port})" in capsys.readouterr().out


def test_a_cluster_id_starting_with_a_dash_formats(tmp_path: Path) -> None:
    """Random ids are base64: about one in 64 starts with "-" (it failed CI once)."""
    cluster_id = "-ueS3jatSo2WbNQj-9Y1Cw"
    broker = DevBroker(BrokerConfig(port=free_port_pair(), data_dir=tmp_path / "kafka",
                                    cluster_id=cluster_id))
    broker.prepare()
    meta = (broker.config.log_dirs / "meta.properties").read_text()
    assert f"cluster.id={cluster_id}" in meta


def test_cli_stop_by_data_dir_names_that_broker(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``stop --data-dir X`` (no --port) is about the broker configured in X."""
    port = free_port_pair()
    DevBroker(BrokerConfig(port=port, data_dir=tmp_path / "kafka")).prepare()

    code = main(["broker", "stop", "--data-dir", str(tmp_path / "kafka")])

    assert code == 0
    assert f"Kafka broker on 127.0.0.1:{port} was not running" in capsys.readouterr().out
