"""deploy/prometheus: promtool accepts the config and rules, and the rule tests pass."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import CollectorRegistry

from streamremat.metrics.dashboard import metric_names
from streamremat.metrics.prometheus import PrometheusSensor
from streamremat.metrics.testing import exercise_every_hook, exported_sample_names

PROMETHEUS_DIR = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
ALERTS = {
    "StreamrematRtoAtRisk",
    "StreamrematRtoInfeasible",
    "StreamrematCheckpointsFailing",
    "StreamrematCheckpointStale",
    "StreamrematReplayStalled",
    "StreamrematDeadLettersRising",
    "StreamrematLagGrowing",
    "StreamrematRecomputeBeyondRto",
}


def run_promtool(promtool: str, *args: str) -> None:
    result = subprocess.run(
        [promtool, *args], cwd=PROMETHEUS_DIR, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, f"promtool {' '.join(args)}:\n{result.stdout}{result.stderr}"


def load(name: str) -> Any:
    return yaml.safe_load((PROMETHEUS_DIR / name).read_text())


def alert_rules() -> list[dict[str, Any]]:
    return [rule for group in load("rules.yml")["groups"] for rule in group["rules"]]


def test_config_is_valid(promtool: str) -> None:
    run_promtool(promtool, "check", "config", "prometheus.yml")


def test_rules_are_valid(promtool: str) -> None:
    run_promtool(promtool, "check", "rules", "rules.yml")


def test_rule_unit_tests_pass(promtool: str) -> None:
    run_promtool(promtool, "test", "rules", "rules_test.yml")


def test_config_loads_the_rules_and_scrapes_workers_and_itself() -> None:
    config = load("prometheus.yml")
    assert config["rule_files"] == ["rules.yml"]
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert jobs["prometheus"]["static_configs"][0]["targets"] == ["localhost:9090"]
    (workers,) = jobs["streamremat-worker"]["dns_sd_configs"]
    assert (workers["names"], workers["port"]) == (["worker"], 9100)


def test_the_expected_alerts_exist_with_for_severity_and_annotations() -> None:
    rules = alert_rules()
    assert {rule["alert"] for rule in rules} == ALERTS
    for rule in rules:
        assert rule["for"], rule["alert"]
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        assert rule["annotations"]["summary"].strip(), rule["alert"]
        assert rule["annotations"]["description"].strip(), rule["alert"]


def test_every_alert_is_tested_firing_and_quiet() -> None:
    cases = [case for test in load("rules_test.yml")["tests"] for case in test["alert_rule_test"]]
    fired = {case["alertname"] for case in cases if case["exp_alerts"]}
    quiet = {case["alertname"] for case in cases if not case["exp_alerts"]}
    assert fired == ALERTS
    assert quiet == ALERTS


def test_rules_read_only_metrics_the_sensor_exports() -> None:
    registry = CollectorRegistry()
    exercise_every_hook(PrometheusSensor("clicks", registry=registry))
    exported = exported_sample_names(registry)
    for rule in alert_rules():
        used = metric_names(rule["expr"])
        assert used, rule["alert"]
        assert used <= exported, f"{rule['alert']} reads unknown metrics {used - exported}"
