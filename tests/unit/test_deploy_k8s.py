"""deploy/k8s: every manifest is valid against the Kubernetes API schemas
(kubernetes-validate ships them: no network), and what the manifests tell the
worker is what the worker understands (flags, STREAMREMAT_* variables, the
--kafka-config file, probe paths, ports, and the names they refer to)."""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import latest_version

from streamremat.cli import build_parser
from streamremat.runtime.client import KafkaClientConfig
from streamremat.runtime.commands import load_app, settings_from_args

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
#: an old minor release and the newest one the installed kubernetes-validate ships
KUBERNETES = ("1.28.0", latest_version())

Doc = dict[str, Any]


def _docs() -> list[tuple[str, Doc]]:
    out = []
    for path in sorted(K8S.glob("*.yaml")):
        out.extend((path.name, d) for d in yaml.safe_load_all(path.read_text()) if d)
    return out


DOCS = _docs()


def _one(kind: str, name: str | None = None) -> Doc:
    found = [d for _, d in DOCS if d["kind"] == kind
             and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


@pytest.fixture(scope="module")
def sts() -> Doc:
    return _one("StatefulSet")


@pytest.fixture(scope="module")
def container(sts: Doc) -> Doc:
    (only,) = sts["spec"]["template"]["spec"]["containers"]
    c: Doc = only
    return c


def test_the_deployment_has_every_piece() -> None:
    kinds = sorted(d["kind"] for _, d in DOCS)
    assert kinds == ["ConfigMap", "PodDisruptionBudget", "Secret", "Secret", "Service",
                     "StatefulSet"]


@pytest.mark.parametrize("version", KUBERNETES)
@pytest.mark.parametrize("name, doc", DOCS, ids=[f"{n}:{d['kind']}" for n, d in DOCS])
def test_manifest_is_valid_against_the_api_schema(name: str, doc: Doc, version: str) -> None:
    """Strict: an unknown or misspelled field fails too."""
    kubernetes_validate.validate(doc, version, strict=True)


def test_the_validator_rejects_a_broken_statefulset(sts: Doc) -> None:
    """Guards against a validator that passes everything (e.g. schemas missing)."""
    typo = copy.deepcopy(sts)
    typo["spec"]["replica"] = typo["spec"].pop("replicas")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(typo, KUBERNETES[-1], strict=True)
    wrong_type = copy.deepcopy(sts)
    wrong_type["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "x"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(wrong_type, KUBERNETES[-1], strict=True)


def _env_of(container: Doc) -> Iterator[tuple[str, str]]:
    """The container's environment as the pod would see it, from the manifests."""
    for var in container["env"]:
        if "value" in var:
            yield var["name"], var["value"]
            continue
        ref = var["valueFrom"]
        if "configMapKeyRef" in ref:
            data = _one("ConfigMap", ref["configMapKeyRef"]["name"])["data"]
            yield var["name"], data[ref["configMapKeyRef"]["key"]]
        else:
            secret = _one("Secret", ref["secretKeyRef"]["name"])
            yield var["name"], secret["stringData"][ref["secretKeyRef"]["key"]]


def _mounted_files(sts: Doc, container: Doc, tmp_path: Path) -> dict[str, Path]:
    """Write each mounted ConfigMap/Secret key under ``tmp_path``, as the kubelet
    would at its mount path (paths inside the files rewritten to the local copies);
    return mount path -> local path."""
    volumes = {v["name"]: v for v in sts["spec"]["template"]["spec"]["volumes"]}
    files: dict[str, Path] = {}
    for mount in container["volumeMounts"]:
        volume = volumes.get(mount["name"])
        if volume is None:
            continue  # the state volume (a claim template)
        if "configMap" in volume:
            data = _one("ConfigMap", volume["configMap"]["name"])["data"]
        else:
            data = _one("Secret", volume["secret"]["secretName"])["stringData"]
        if "subPath" in mount:
            entries = {mount["mountPath"]: data[mount["subPath"]]}
        else:
            entries = {f"{mount['mountPath']}/{k}": v for k, v in data.items()}
        for at, text in entries.items():
            local = tmp_path / at.lstrip("/")
            local.parent.mkdir(parents=True, exist_ok=True)
            local.write_text(text)
            files[at] = local
    for local in files.values():
        text = local.read_text()
        for at, other in files.items():
            text = text.replace(at, str(other))
        local.write_text(text)
    return files


def test_worker_understands_its_arguments_and_environment(
    sts: Doc, container: Doc, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker's real CLI parses the manifest's args with the manifest's environment
    and mounted files: state on the claim, metrics on the probed port, SASL over TLS
    with the secret's credentials and the mounted certificates."""
    files = _mounted_files(sts, container, tmp_path)
    for name in [n for n in os.environ if n.startswith("STREAMREMAT_")]:
        monkeypatch.delenv(name)
    env = dict(_env_of(container))
    assert all(name.startswith("STREAMREMAT_") for name in env), env
    for name, value in env.items():
        monkeypatch.setenv(name, str(files.get(value, value)))
    args = list(container["args"])
    config_at = args.index("--kafka-config") + 1
    args[config_at] = str(files[args[config_at]])
    parsed = build_parser().parse_args(args)
    app = load_app(parsed.app)
    settings = settings_from_args(parsed, app)

    claims = {c["metadata"]["name"] for c in sts["spec"]["volumeClaimTemplates"]}
    state_mounts = [m["mountPath"] for m in container["volumeMounts"] if m["name"] in claims]
    assert len(state_mounts) == 1 and settings.state_dir.startswith(state_mounts[0] + "/")
    (port,) = container["ports"]
    assert settings.metrics_port == port["containerPort"]

    kafka: KafkaClientConfig = settings.kafka
    credentials = _one("Secret", "streamremat-kafka-credentials")["stringData"]
    assert kafka.security_protocol == "SASL_SSL"
    assert kafka.sasl_mechanism and kafka.sasl_mechanism.startswith("SCRAM-")
    assert kafka.sasl_username == credentials["username"]
    assert kafka.sasl_password is not None
    assert kafka.sasl_password.reveal() == credentials["password"]
    assert "REPLACE" not in kafka.describe() and credentials["password"] not in repr(kafka)
    tls = _one("Secret", "streamremat-kafka-tls")["stringData"]
    for path, key in ((kafka.ssl_cafile, "ca.crt"), (kafka.ssl_certfile, "tls.crt"),
                      (kafka.ssl_keyfile, "tls.key")):
        assert path is not None and Path(path).read_text() == tls[key], (path, key)
    # The file's other options are aiokafka options (else resolve refuses them).
    assert kafka.options == {"request_timeout_ms": 40_000}


def test_probes_use_the_worker_health_endpoints(container: Doc) -> None:
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "metrics"}
    assert [p["name"] for p in container["ports"]] == ["metrics"]


def test_prometheus_scrapes_the_metrics_port(sts: Doc, container: Doc) -> None:
    annotations = sts["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert int(annotations["prometheus.io/port"]) == container["ports"][0]["containerPort"]
    assert annotations["prometheus.io/path"] == "/metrics"
    service = _one("Service")
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"


def test_selectors_and_names_match(sts: Doc) -> None:
    labels = sts["spec"]["template"]["metadata"]["labels"]
    assert sts["spec"]["selector"]["matchLabels"].items() <= labels.items()
    pdb, service = _one("PodDisruptionBudget"), _one("Service")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert service["spec"]["selector"].items() <= labels.items()
    assert sts["spec"]["serviceName"] == service["metadata"]["name"]
    assert service["spec"]["clusterIP"] == "None"  # headless: one endpoint per pod


def test_shutdown_has_time_to_commit_and_checkpoint(sts: Doc, container: Doc) -> None:
    """SIGTERM commits and checkpoints every task within the worker's shutdown
    timeout; the pod must not be killed before that."""
    args = build_parser().parse_args(container["args"][:2])
    grace = sts["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    settings = settings_from_args(args, load_app(args.app))
    assert grace > settings.shutdown_timeout_s
