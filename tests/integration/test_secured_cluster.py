"""The worker on a 3-node SASL_SSL cluster with ACLs (``secure_cluster``).

* It runs an App with the README's example ``--kafka-config`` and its output is
  exactly the brute-force reference's; what it created is replicated 3 times
  with ``min.insync.replicas`` 2.
* A wrong password, an untrusted CA and a user without WRITE on the sink each
  stop it with exit code 2 and a message naming the cause, and it commits
  nothing (no group offset, nothing readable in the sink).
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from streamremat.dev.acls import Acl, app_acls, create_acls
from streamremat.dev.certs import make_ca
from streamremat.dev.cluster import DevCluster
from streamremat.runtime.kafka import (
    TopicSpec,
    admin_client,
    consume_all,
    create_topics,
    delete_topics,
    topic_config,
)
from tests.fault.checks import (
    assert_same_results,
    committed_offsets,
    read_results,
    read_source,
    reference_results,
    wait_caught_up,
)
from tests.fault.harness import APP_SPEC, FaultEnv, Feeder

README = Path(__file__).resolve().parents[2] / "README.md"
PARTITIONS = 3


def readme_config(cluster: DevCluster, path: Path, user: str = "streamremat",
                  password: str | None = None, cafile: Path | None = None) -> Path:
    """The README's example properties, pointed at this cluster."""
    text = README.read_text().split("## Connecting to a secured cluster", 1)[1]
    block = text.split("```properties\n", 1)[1].split("```", 1)[0]
    values = {
        "bootstrap.servers": cluster.config.bootstrap,
        "sasl.username": user,
        "sasl.password": password if password is not None else cluster.password(user),
        "ssl.cafile": str(cafile or cluster.tls.ca_cert),
    }
    for key, value in values.items():
        block, n = re.subn(rf"(?m)^{re.escape(key)}=.*$", f"{key}={value}", block)
        assert n == 1, f"README example has no {key}= line"
    path.write_text(block)
    return path


async def _env(cluster: DevCluster, tmp_path: Path, config: Path) -> FaultEnv:
    admin = cluster.client("admin")
    source = f"sec-{uuid.uuid4().hex[:8]}"
    await create_topics(admin, [TopicSpec(source, PARTITIONS, {"retention.ms": "-1"})])
    return FaultEnv(bootstrap=admin, source=source, partitions=PARTITIONS,
                    app_name=f"sec-{uuid.uuid4().hex[:8]}", workdir=tmp_path, kafka_config=config)


async def test_worker_on_sasl_ssl_cluster_matches_reference(
    secure_cluster: DevCluster, tmp_path: Path
) -> None:
    config = readme_config(secure_cluster, tmp_path / "secured.properties")
    env = await _env(secure_cluster, tmp_path, config)
    try:
        feeder = Feeder(secure_cluster.client("streamremat"), env.source, PARTITIONS, seed=12,
                        step_ms=10)
        await feeder.produce(total=3000, chunk=1000, interval_s=0)
        worker = env.worker("a")
        worker.start()
        await wait_caught_up(env, [worker], timeout_s=180)
        code, _ = await worker.stop()
        assert code == 0, env.dump_logs()

        expected = reference_results(await read_source(env))
        assert sum(expected.values()) > 100
        assert_same_results(await read_results(env), expected, env.dump_logs())
        log = worker.log_text()
        assert secure_cluster.password("streamremat") not in log

        # `tune` reads the replica through the same config (its state dir is empty).
        tune = subprocess.run(
            [sys.executable, "-m", "streamremat", "tune", APP_SPEC, "--kafka-config", str(config),
             "--state-dir", str(tmp_path / "empty")],
            env=env.worker_env(), capture_output=True, text=True, timeout=120, check=False,
        )
        assert tune.returncode == 0, tune.stderr
        assert f"sums:{env.source}:0" in tune.stdout, tune.stdout
        assert "read from the replica topic" in tune.stdout, tune.stdout

        async with admin_client(env.bootstrap) as admin:
            described = await admin.describe_topics([env.sink, env.checkpoint_topic])
        for topic in described:
            assert {len(p["replicas"]) for p in topic["partitions"]} == {3}, topic
            config_now = await topic_config(env.bootstrap, topic["topic"])
            assert config_now["min.insync.replicas"] == "2"
    finally:
        await env.cleanup()
        await delete_topics(env.bootstrap, [env.source])


async def _wrong_password(cluster: DevCluster, tmp_path: Path) -> Path:
    return readme_config(cluster, tmp_path / "c.properties", password="not-the-password")


async def _wrong_ca(cluster: DevCluster, tmp_path: Path) -> Path:
    other_ca, _ = make_ca(tmp_path / "other-ca", "some-other-ca")
    return readme_config(cluster, tmp_path / "c.properties", cafile=other_ca)


async def _no_write(cluster: DevCluster, tmp_path: Path) -> Path:
    return readme_config(cluster, tmp_path / "c.properties", user="nowrite")


async def _no_group(cluster: DevCluster, tmp_path: Path) -> Path:
    return readme_config(cluster, tmp_path / "c.properties", user="nogroup")


@pytest.mark.parametrize(("case", "make_config", "message"), [
    ("wrong password", _wrong_password,
     r"SASL SCRAM-SHA-512 authentication as user 'streamremat' failed at broker 127\.0\.0\.1:\d+"),
    ("wrong CA", _wrong_ca,
     r"TLS: the certificate of broker 127\.0\.0\.1:\d+ is not trusted .* --ssl-cafile"),
    ("no WRITE on the sink", _no_write,
     r"not authorized: User:nowrite lacks WRITE on topic '{sink}' while writing"),
    ("no READ on the group", _no_group,
     r"not authorized: User:nogroup lacks READ on consumer group '{group}'"),
])
async def test_access_errors_are_clear_fatal_and_commit_nothing(
    secure_cluster: DevCluster, tmp_path: Path, case: str, make_config: object, message: str
) -> None:
    config = await make_config(secure_cluster, tmp_path)  # type: ignore[operator]
    env = await _env(secure_cluster, tmp_path, config)
    admin = secure_cluster.client("admin")
    try:
        await create_topics(admin, [TopicSpec(env.sink, PARTITIONS)])
        if case == "no WRITE on the sink":
            await create_acls(admin, [
                *app_acls("nowrite"), Acl("nowrite", "topic", env.sink, "write", "deny"),
            ])
        if case == "no READ on the group":
            await create_acls(admin, [a for a in app_acls("nogroup") if a.resource != "group"])
        await Feeder(admin, env.source, PARTITIONS, seed=3, step_ms=10).produce(600, 600, 0)
        worker = env.worker("a")
        worker.start()
        await worker.wait_for(lambda w: not w.running, 120, "the worker to give up")
        assert worker.proc is not None and worker.proc.returncode == 2, env.dump_logs()
        log = worker.log_text()
        assert re.search(message.format(sink=re.escape(env.sink), group=re.escape(env.group)),
                         log), log
        assert "not-the-password" not in log
        assert "never retrieved" not in log, log  # e.g. the denied sends' futures
        if case in ("wrong password", "wrong CA"):  # `tune` says the same, exits 2
            tune = subprocess.run(
                [sys.executable, "-m", "streamremat", "tune", APP_SPEC, "--kafka-config",
                 str(config), "--state-dir", str(tmp_path / "empty")],
                env=env.worker_env(), capture_output=True, text=True, timeout=120, check=False,
            )
            assert tune.returncode == 2 and re.search(message, tune.stderr), tune.stderr
        # A partition may prove its ownership before going live (a commit of its
        # start offset, 0 here): nothing it read may ever be committed.
        assert set((await committed_offsets(env)).values()) <= {0}
        sink = await consume_all(admin, env.sink, isolation_level="read_committed")
        assert sink == []
    finally:
        await env.cleanup()
        await delete_topics(admin, [env.source, env.sink])


async def test_every_sasl_mechanism_and_a_client_certificate_connect(
    secure_cluster: DevCluster,
) -> None:
    tls = secure_cluster.tls
    clients = [secure_cluster.client("streamremat", m)
               for m in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")]
    clients.append(secure_cluster.client(ssl_certfile=str(tls.client_cert),
                                         ssl_keyfile=str(tls.client_key)))
    for client in clients:
        async with admin_client(client) as admin:
            assert len((await admin.describe_cluster())["brokers"]) == 3, client.describe()


async def test_loadgen_produces_through_the_config_file(
    secure_cluster: DevCluster, tmp_path: Path
) -> None:
    config = readme_config(secure_cluster, tmp_path / "secured.properties")
    topic = f"sec-load-{uuid.uuid4().hex[:8]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMREMAT_")}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "streamremat", "loadgen", "--kafka-config", str(config),
             "--topic", topic, "--partitions", "2", "--events", "500", "--rate", "0"],
            env=env, capture_output=True, text=True, timeout=120, check=False,
        )
        assert done.returncode == 0, done.stderr
        records = await consume_all(secure_cluster.client(), topic,
                                    isolation_level="read_uncommitted")
        assert len(records) == 500
    finally:
        await delete_topics(secure_cluster.client("admin"), [topic])


def test_demo_runs_on_the_secured_cluster_through_the_config_file(
    secure_cluster: DevCluster, tmp_path: Path
) -> None:
    """The demo's own clients and its worker connect with the worker's settings."""
    config = readme_config(secure_cluster, tmp_path / "secured.properties")
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMREMAT_")}
    done = subprocess.run(
        [sys.executable, "-m", "streamremat", "demo", "--kafka-config", str(config),
         "--events", "4000", "--users", "100"],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "dev broker" not in done.stdout  # none started: the config names the cluster
    assert "OK: " in done.stdout, done.stdout


async def test_existing_topic_with_fewer_replicas_is_named_in_a_warning(
    secure_cluster: DevCluster, caplog: pytest.LogCaptureFixture
) -> None:
    admin = secure_cluster.client("admin")
    low, fresh = (f"sec-rf-{uuid.uuid4().hex[:8]}" for _ in range(2))
    try:
        await create_topics(admin, [TopicSpec(low, 1, replication_factor=1)])
        with caplog.at_level(logging.WARNING, logger="streamremat.kafka"):
            created = await create_topics(admin, [TopicSpec(low, 1), TopicSpec(fresh, 1)])
        assert created == [fresh]
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any(f"{low!r} exists with replication factor 1, below the 3 asked" in w
                   for w in warnings), warnings
        assert not any(fresh in w for w in warnings)
        assert (await topic_config(admin, fresh))["min.insync.replicas"] == "2"
    finally:
        await delete_topics(admin, [low, fresh])
