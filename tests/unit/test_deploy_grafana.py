"""deploy/grafana: the dashboard is well formed and reads only metrics the sensor exports."""

from __future__ import annotations

import json
import re
import subprocess
from itertools import combinations
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from streamremat.metrics.dashboard import DASHBOARD_PATH, dashboard_queries, metric_names
from streamremat.metrics.prometheus import PrometheusSensor
from streamremat.metrics.testing import exercise_every_hook, exported_sample_names

ROOT = Path(__file__).resolve().parents[2]
GRAFANA = ROOT / "deploy" / "grafana"
ROWS = ["Overview", "Throughput and lag", "Checkpoints", "Recovery and tuner", "Rematerialization",
        "Bad input", "Health"]


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD_PATH.read_text())
    return loaded


@pytest.fixture(scope="module")
def exported() -> set[str]:
    registry = CollectorRegistry()
    exercise_every_hook(PrometheusSensor("clicks", registry=registry))
    return exported_sample_names(registry)


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in dashboard["panels"] if p["type"] != "row"]


def test_dashboard_identity(dashboard: dict[str, Any]) -> None:
    assert dashboard["uid"] == "streamremat"
    assert dashboard["title"] == "streamremat"
    assert isinstance(dashboard["schemaVersion"], int)
    assert [v["name"] for v in dashboard["templating"]["list"]] == ["app", "operator"]


def test_rows_in_order(dashboard: dict[str, Any]) -> None:
    assert [p["title"] for p in dashboard["panels"] if p["type"] == "row"] == ROWS


def test_panels_have_unique_ids_and_do_not_overlap(dashboard: dict[str, Any]) -> None:
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    boxes = []
    for p in dashboard["panels"]:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24 and g["h"] > 0, p["title"]
        boxes.append((p["title"], g["x"], g["y"], g["x"] + g["w"], g["y"] + g["h"]))
    for (a, ax0, ay0, ax1, ay1), (b, bx0, by0, bx1, by1) in combinations(boxes, 2):
        assert ax1 <= bx0 or bx1 <= ax0 or ay1 <= by0 or by1 <= ay0, f"{a!r} overlaps {b!r}"


def test_every_panel_queries_the_provisioned_datasource(dashboard: dict[str, Any]) -> None:
    provisioned = yaml.safe_load((GRAFANA / "provisioning/datasources/prometheus.yml").read_text())
    (source,) = provisioned["datasources"]
    for p in panels(dashboard):
        assert p["datasource"] == {"type": "prometheus", "uid": source["uid"]}, p["title"]
        assert p["targets"], p["title"]
        ref_ids = [t["refId"] for t in p["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), p["title"]
        for target in p["targets"]:
            assert target["expr"].strip(), p["title"]
            assert target["datasource"]["uid"] == source["uid"], p["title"]


def test_queries_read_only_metrics_the_sensor_exports(
    dashboard: dict[str, Any], exported: set[str]
) -> None:
    exprs = [(p["title"], t["expr"]) for p in panels(dashboard) for t in p["targets"]]
    exprs += [(v["name"], v["definition"]) for v in dashboard["templating"]["list"]]
    for title, expr in exprs:
        used = metric_names(expr)
        assert used, f"{title}: {expr}"
        assert used <= exported, f"{title} reads unknown metrics {used - exported}"


def test_every_exported_metric_is_on_the_dashboard(
    dashboard: dict[str, Any], exported: set[str]
) -> None:
    shown = set().union(*(metric_names(expr) for _, expr in dashboard_queries()))
    families = {
        re.sub(r"_(bucket|count|sum)$", "", n)
        for n in exported
        if n.startswith("streamremat_") and not n.endswith("_created")
    }
    shown_families = {re.sub(r"_(bucket|count|sum)$", "", n) for n in shown}
    assert families - shown_families == set()


def test_dashboard_queries_substitute_variables(dashboard: dict[str, Any], tmp_path: Path) -> None:
    queries = dashboard_queries(variables={"app": "clicks"})
    assert len(queries) == sum(len(p["targets"]) for p in panels(dashboard))
    assert {title for title, _ in queries} == {p["title"] for p in panels(dashboard)}
    for _, expr in queries:
        assert "$" not in expr
    assert 'app=~"clicks"' in queries[0][1]
    other = tmp_path / "other.json"
    other.write_text(
        json.dumps({"panels": [{"title": "t", "targets": [{"expr": 'up{c=~"${cluster}"}'}]}]})
    )
    with pytest.raises(ValueError, match=r"\$cluster"):
        dashboard_queries(other)
    assert dashboard_queries(other, {"cluster": "a"}) == [("t", 'up{c=~"a"}')]


def test_queries_are_valid_promql(tmp_path: Path, promtool: str) -> None:
    # Recording rules are the cheapest way to have promtool parse PromQL.
    rules = [
        {"record": f"dashboard:q{i}", "expr": e} for i, (_, e) in enumerate(dashboard_queries())
    ]
    path = tmp_path / "dashboard_rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_provisioning_points_at_the_mounted_dashboards() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    mounts = dict(v.split(":")[:2] for v in compose["services"]["grafana"]["volumes"])
    provider = yaml.safe_load((GRAFANA / "provisioning/dashboards/dashboards.yml").read_text())
    (dashboards,) = provider["providers"]
    assert mounts["./deploy/grafana/dashboards"] == dashboards["options"]["path"]
    assert mounts["./deploy/grafana/provisioning"] == "/etc/grafana/provisioning"
    source = yaml.safe_load((GRAFANA / "provisioning/datasources/prometheus.yml").read_text())
    assert source["datasources"][0]["url"] == "http://prometheus:9090"
    assert "prometheus" in compose["services"]


def test_rematerialization_row_shows_the_plan(
    dashboard: dict[str, Any], exported: set[str]
) -> None:
    """Every remat series sits under its row, and the forced stores are split by reason."""
    rows = [p for p in dashboard["panels"] if p["type"] == "row"]
    row = next(r for r in rows if r["title"] == "Rematerialization")
    below = min(r["gridPos"]["y"] for r in rows if r["gridPos"]["y"] > row["gridPos"]["y"])
    inside = [p for p in panels(dashboard) if row["gridPos"]["y"] < p["gridPos"]["y"] < below]
    shown = set().union(*(metric_names(t["expr"]) for p in inside for t in p["targets"]))
    remat = {re.sub(r"_total$", "", n) for n in exported if n.startswith("streamremat_remat_")
             and not n.endswith("_created")}  # fmt: skip
    assert remat and remat <= {re.sub(r"_total$", "", n) for n in shown}
    forced = [t["expr"] for p in inside for t in p["targets"]
              if "streamremat_remat_forced_stores" in t["expr"]]  # fmt: skip
    assert forced and all("by (reason)" in e for e in forced)
