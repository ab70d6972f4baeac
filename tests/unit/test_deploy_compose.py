"""docker-compose.yml and the worker image: well formed, and every file they use exists."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SERVICES = {"kafka", "topics", "worker", "loadgen", "prometheus", "grafana"}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return loaded


def bind_mounts(service: dict[str, Any]) -> dict[str, str]:
    mounts = (v.split(":") for v in service.get("volumes", []))
    return {host: container for host, container, *_ in mounts if host.startswith(".")}


def test_services(compose: dict[str, Any]) -> None:
    assert set(compose["services"]) == SERVICES


def test_kafka_image_matches_the_dev_broker_version(compose: dict[str, Any]) -> None:
    pom = (ROOT / "deploy/kafka/pom.xml").read_text()
    match = re.search(r"<kafka.version>([^<]+)</kafka.version>", pom)
    assert match is not None
    expected = f"apache/kafka:{match.group(1)}"
    assert compose["services"]["kafka"]["image"] == expected
    assert compose["services"]["topics"]["image"] == expected
    env = compose["services"]["kafka"]["environment"]
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"  # KRaft, no ZooKeeper
    assert len(env["CLUSTER_ID"]) == 22  # a base64 UUID, as kafka-storage expects


def test_worker_and_loadgen_build_the_package_image(compose: dict[str, Any]) -> None:
    worker, loadgen = compose["services"]["worker"], compose["services"]["loadgen"]
    for service in (worker, loadgen):
        build = service["build"]
        assert (ROOT / build["context"]).is_dir()
        assert (ROOT / build["context"] / build["dockerfile"]).is_file()
        assert service["environment"]["STREAMREMAT_BOOTSTRAP"] == "kafka:9092"
    assert worker["command"][:2] == ["worker", "operators.clicks:app"]
    assert loadgen["command"][0] == "loadgen"


def test_dockerfile_copies_only_existing_paths(compose: dict[str, Any]) -> None:
    build = compose["services"]["worker"]["build"]
    dockerfile = (ROOT / build["context"] / build["dockerfile"]).read_text()
    copies = re.findall(r"^COPY\s+(.+)$", dockerfile, flags=re.MULTILINE)
    assert copies
    for line in copies:
        *sources, _dest = [part for part in line.split() if not part.startswith("--")]
        for source in sources:
            assert (ROOT / build["context"] / source).exists(), f"COPY {source}: missing"
    assert 'ENTRYPOINT ["streamremat"]' in dockerfile


def test_metrics_port_agrees_across_image_compose_and_prometheus(compose: dict[str, Any]) -> None:
    port = int(compose["services"]["worker"]["environment"]["STREAMREMAT_METRICS_PORT"])
    assert str(port) in compose["services"]["worker"]["expose"]
    dockerfile = (ROOT / "deploy/worker.Dockerfile").read_text()
    assert f"EXPOSE {port}" in dockerfile
    scrape = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())
    (job,) = [j for j in scrape["scrape_configs"] if j["job_name"] == "streamremat-worker"]
    assert job["dns_sd_configs"][0] == {
        "names": ["worker"], "type": "A", "port": port, "refresh_interval": "10s"
    }  # fmt: skip


def test_prometheus_and_grafana_mount_existing_files(compose: dict[str, Any]) -> None:
    prometheus, grafana = compose["services"]["prometheus"], compose["services"]["grafana"]
    for service in (prometheus, grafana):
        for host in bind_mounts(service):
            assert (ROOT / host).exists(), f"{host} is mounted but missing"
    assert bind_mounts(prometheus) == {"./deploy/prometheus": "/etc/prometheus"}
    assert "--config.file=/etc/prometheus/prometheus.yml" in prometheus["command"]
    assert "9090:9090" in prometheus["ports"]
    assert "3000:3000" in grafana["ports"]
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home == "/var/lib/grafana/dashboards/streamremat.json"
    assert (ROOT / "deploy/grafana/dashboards/streamremat.json").is_file()


def test_topics_are_created_before_the_workers_start(compose: dict[str, Any]) -> None:
    script = compose["services"]["topics"]["command"][0]
    assert "--topic clicks " in script
    assert "cleanup.policy=compact" in script  # the checkpoint replica topic
    for name in ("worker", "loadgen"):
        depends = compose["services"][name]["depends_on"]
        assert depends["topics"]["condition"] == "service_completed_successfully"
        assert depends["kafka"]["condition"] == "service_healthy"


def _compose_command() -> list[str]:
    """Docker's compose plugin where it is, else Debian's ``docker-compose`` (1.29),
    which checks a file against the same compose-spec schema without a Docker engine
    (``.ci/ensure-tools`` installs it). Neither: a failure, never a skip."""
    docker = shutil.which("docker")
    if docker is not None:
        probe = subprocess.run([docker, "compose", "version"], capture_output=True, timeout=30)
        if probe.returncode == 0:
            return [docker, "compose"]
    legacy = shutil.which("docker-compose")
    assert legacy is not None, (
        "no compose to check docker-compose.yml with: install Docker's compose plugin or "
        "Debian's docker-compose (apt-get install -y --no-install-recommends docker-compose)")
    return [legacy]


def _compose_config(folder: Path) -> subprocess.CompletedProcess[str]:
    """``compose config -q`` on ``folder``'s docker-compose.yml (a schema check)."""
    return subprocess.run(
        [*_compose_command(), "-f", str(folder / "docker-compose.yml"), "config", "-q"],
        cwd=folder, capture_output=True, text=True, timeout=60,
    )


def test_docker_compose_config_accepts_the_file() -> None:
    result = _compose_config(ROOT)
    assert result.returncode == 0, result.stderr


def test_docker_compose_config_refuses_a_broken_file(tmp_path: Path) -> None:
    """The check above can fail: a condition compose does not know is refused."""
    broken = (ROOT / "docker-compose.yml").read_text().replace(
        "service_completed_successfully", "service_finished_maybe")
    (tmp_path / "docker-compose.yml").write_text(broken)
    result = _compose_config(tmp_path)
    assert result.returncode != 0
    assert "service_finished_maybe" in result.stderr + result.stdout


def _created_topics(script: str) -> dict[str, str]:
    """`create --topic NAME ...` lines of the topics service: name -> the rest of the line."""
    return {
        m.group(1): m.group(2)
        for m in re.finditer(r"^\s*create --topic (\S+)(.*)$", script, flags=re.MULTILINE)
    }


def test_topics_match_the_clicks_app(compose: dict[str, Any]) -> None:
    from operators.clicks import app

    worker = compose["services"]["worker"]["command"]
    assert worker[1] == "operators.clicks:app"
    (op,) = app.operators.values()
    topics = _created_topics(compose["services"]["topics"]["command"][0])
    assert set(topics) == {op.source, op.sink, op.dead_letter_topic, app.checkpoint_topic}
    assert "cleanup.policy=compact" in topics[app.checkpoint_topic]
    parts = {name: int(re.search(r"--partitions (\d+)", rest).group(1))  # type: ignore[union-attr]
             for name, rest in topics.items()}  # fmt: skip
    assert len(set(parts.values())) == 1  # sinks get the source's partition count


def test_loadgen_command_parses_and_feeds_the_worker_source(compose: dict[str, Any]) -> None:
    from operators.clicks import app
    from streamremat.cli import build_parser

    service = compose["services"]["loadgen"]
    args = build_parser().parse_args(service["command"])
    assert args.command == "loadgen"
    (op,) = app.operators.values()
    assert args.topic == op.source and args.kind == "clicks"
    assert args.rate > 0 and args.events is None  # a steady, unbounded stream
    assert 0 < args.bad_ratio < 0.1 and 0 < args.late_ratio < 0.1


def test_worker_command_parses(compose: dict[str, Any]) -> None:
    from streamremat.cli import build_parser

    args = build_parser().parse_args(compose["services"]["worker"]["command"])
    assert args.command == "worker" and args.app == "operators.clicks:app"
