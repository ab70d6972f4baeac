"""KafkaClientConfig: sources and their precedence, pass-through options, secrets kept out."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from streamremat.cli import build_parser
from streamremat.core.exceptions import ConfigError
from streamremat.runtime.client import KafkaClientConfig, Secret
from streamremat.runtime.commands import client_config_from_args
from streamremat.runtime.settings import WorkerSettings

PASSWORD = "s3cr3t-Pa55"


def _write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_properties_file_fields_and_pass_through_options(tmp_path: Path) -> None:
    path = _write(tmp_path, "client.properties", (
        "# comment\n"
        "bootstrap.servers=b1:9093,b2:9093\n"
        "security.protocol=SASL_PLAINTEXT\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.username=app\n"
        f"sasl.password={PASSWORD}\n"
        "request.timeout.ms=12345\n"
        "consumer.fetch.max.wait.ms=77\n"
        "producer.compression_type=gzip\n"
    ))
    cfg = KafkaClientConfig.resolve({}, environ={}, config_file=path)
    assert cfg.bootstrap_servers == "b1:9093,b2:9093"
    assert cfg.sasl_mechanism == "SCRAM-SHA-512"
    consumer = cfg.consumer_kwargs(fetch_max_wait_ms=20)
    assert consumer["sasl_plain_password"] == PASSWORD
    assert consumer["request_timeout_ms"] == 12345  # coerced to the option's type
    assert consumer["fetch_max_wait_ms"] == 77  # the user's option wins over ours
    assert "compression_type" not in consumer
    producer = cfg.producer_kwargs()
    assert producer["compression_type"] == "gzip"
    assert producer["request_timeout_ms"] == 12345
    assert cfg.admin_kwargs()["sasl_plain_username"] == "app"


def test_toml_file_tables_per_client(tmp_path: Path) -> None:
    path = _write(tmp_path, "client.toml", (
        'security_protocol = "SASL_PLAINTEXT"\n'
        'sasl_mechanism = "PLAIN"\n'
        'sasl_plain_username = "app"\n'
        f'sasl_plain_password = "{PASSWORD}"\n'
        "metadata_max_age_ms = 60000\n"
        "[consumer]\n"
        "fetch_max_bytes = 1048576\n"
    ))
    cfg = KafkaClientConfig.resolve({}, environ={}, config_file=path)
    assert cfg.sasl_username == "app"
    assert cfg.consumer_kwargs()["fetch_max_bytes"] == 1048576
    assert cfg.admin_kwargs()["metadata_max_age_ms"] == 60000


def test_flags_beat_environment_beat_file(tmp_path: Path) -> None:
    path = _write(tmp_path, "c.properties", "sasl.username=from-file\nsasl.mechanism=PLAIN\n"
                  "security.protocol=SASL_PLAINTEXT\nsasl.password=file-pw\n")
    env = {"STREAMREMAT_SASL_USERNAME": "from-env", "STREAMREMAT_SASL_PASSWORD": "env-pw"}
    cfg = KafkaClientConfig.resolve({}, environ=env, config_file=path)
    assert (cfg.sasl_username, cfg.connection_kwargs()["sasl_plain_password"]) == (
        "from-env", "env-pw")
    cfg = KafkaClientConfig.resolve({"sasl_username": "from-flag"}, environ=env,
                                    config_file=path)
    assert cfg.sasl_username == "from-flag"


@pytest.mark.parametrize(("text", "needle"), [
    ("isolation.level=read_uncommitted\n", "set by streamremat"),
    ("transactional.id=x\n", "set by streamremat"),
    ("fetch.max.wiat.ms=5\n", "not an aiokafka"),
    ("request.timeout.ms=soon\n", "expected a int"),
    ("security.protocol=SASL_SSL\n", "needs a user and a password"),
    ("security.protocol=TLS\n", "use one of"),
    ("ssl.cafile=/nonexistent/ca.pem\n", "not a readable file"),
])
def test_bad_settings_name_the_setting(tmp_path: Path, text: str, needle: str) -> None:
    path = _write(tmp_path, "bad.properties", text)
    with pytest.raises(ConfigError, match=needle):
        KafkaClientConfig.resolve({}, environ={}, config_file=path)


def test_secrets_never_in_repr_describe_logs_or_help(
    caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    env = {"STREAMREMAT_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
           "STREAMREMAT_SASL_MECHANISM": "SCRAM-SHA-256",
           "STREAMREMAT_SASL_USERNAME": "app", "STREAMREMAT_SASL_PASSWORD": PASSWORD}
    cfg = KafkaClientConfig.resolve({}, environ=env)
    settings = WorkerSettings(kafka=cfg)
    with caplog.at_level(logging.DEBUG):
        logging.getLogger("t").info("settings %s %r %s", settings, cfg, cfg.describe())
    for text in (repr(settings), str(cfg), cfg.describe(), caplog.text, repr(Secret(PASSWORD))):
        assert PASSWORD not in text
    assert "app" in cfg.describe()
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["worker", "--help"])
    assert PASSWORD not in capsys.readouterr().out


def test_cli_flags_reach_the_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMREMAT_SASL_PASSWORD", PASSWORD)
    monkeypatch.delenv("STREAMREMAT_BOOTSTRAP", raising=False)
    args = build_parser().parse_args([
        "loadgen", "--bootstrap", "h:1", "--security-protocol", "SASL_PLAINTEXT",
        "--sasl-mechanism", "SCRAM-SHA-512", "--sasl-username", "u",
    ])
    cfg = client_config_from_args(args, "default:9092")
    assert cfg.bootstrap_servers == "h:1"
    assert cfg.producer_kwargs()["sasl_mechanism"] == "SCRAM-SHA-512"
    assert cfg.producer_kwargs()["sasl_plain_password"] == PASSWORD


def test_authorization_errors_name_user_operation_resource_and_grant() -> None:
    from aiokafka.errors import (
        ClusterAuthorizationFailedError,
        KafkaConnectionError,
        TopicAuthorizationFailedError,
        TransactionalIdAuthorizationFailed,
    )

    from streamremat.runtime.access import access_denied

    cfg = KafkaClientConfig("h:1", "SASL_SSL", "SCRAM-SHA-512", "app", Secret(PASSWORD))
    text = access_denied(TopicAuthorizationFailedError({"out"}), cfg, "writing", "WRITE")
    assert text is not None and "User:app lacks WRITE on topic 'out'" in text
    assert "--operation Write --topic out" in text
    text = access_denied(TransactionalIdAuthorizationFailed("g.src.0"), cfg, "starting")
    assert text is not None and "WRITE on transactional id 'g.src.0'" in text
    text = access_denied(ClusterAuthorizationFailedError(), cfg, "starting")
    assert text is not None and "--operation IdempotentWrite --cluster" in text
    assert access_denied(KafkaConnectionError(), cfg, "x") is None
