"""Shared fixtures: one real Kafka broker per test session, fresh topics per test.

``kafka_bootstrap`` uses ``$STREAMREMAT_BOOTSTRAP`` when set; otherwise it starts
the dev broker on free ports with a data dir under pytest's temp dir, and stops
it at the end of the session. With ``CI=true`` a broker that cannot start fails
the run; elsewhere the Kafka tests are skipped with the reason.
"""

from __future__ import annotations

import os
import re
import time
import uuid
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from streamremat.dev.broker import BrokerConfig, DevBroker, free_port_pair
from streamremat.dev.cluster import ClusterConfig, DevCluster, free_port_run
from streamremat.dev.exceptions import DevBrokerError
from streamremat.dev.sync import run_sync
from streamremat.runtime.kafka import TopicSpec, create_topics, delete_topics

TESTS_DIR = Path(__file__).resolve().parent
#: The session broker keeps every record unless a topic sets its own retention
#: (``STREAMREMAT_BOOTSTRAP``: a broker of yours needs the same).
TEST_BROKER_OVERRIDES = {"log.retention.ms": "-1"}
#: ``time.monotonic()`` when the session broker answered (``broker_up_since``).
_broker_up_since: list[float] = []
_KAFKA_DIRS = {"integration": ("kafka",), "fault": ("kafka", "fault")}

NewTopic = Callable[..., str]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark Kafka tests; run async tests in the session event loop.

    Async fixtures default to the session loop (pyproject); tests must run in
    that same loop, or an aiokafka client made by a fixture fails in the test
    with "attached to a different loop". An explicit ``loop_scope`` wins.
    """
    for item in items:
        if _uses_default_loop(item):
            item.add_marker(pytest.mark.asyncio(loop_scope="session"), append=False)
        try:
            top = item.path.resolve().relative_to(TESTS_DIR).parts[0]
        except ValueError:
            continue
        for marker in _KAFKA_DIRS.get(top, ()):
            item.add_marker(marker)


def _uses_default_loop(item: pytest.Item) -> bool:
    markers = list(item.iter_markers("asyncio"))
    return bool(markers) and not any(
        m.kwargs.get("loop_scope") or m.kwargs.get("scope") for m in markers
    )


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    external = os.environ.get("STREAMREMAT_BOOTSTRAP")
    if external:
        yield external
        return
    port = int(os.environ.get("STREAMREMAT_TEST_PORT") or free_port_pair())
    data_dir = tmp_path_factory.getbasetemp() / f"kafka-{port}"
    # Tests stamp records anywhere from 1970 to now: the broker's time retention
    # (168 h, checked every 5 s) would delete them between produce and read-back
    # (CI read 0 of 300 records once). Retention tests set it on their topics.
    broker = DevBroker(BrokerConfig(port=port, data_dir=data_dir, stop_with_parent=True,
                                    overrides=TEST_BROKER_OVERRIDES))
    try:
        status = broker.start()
    except (DevBrokerError, OSError) as exc:
        message = f"could not start the Kafka dev broker: {exc}"
        if _in_ci():
            pytest.fail(message, pytrace=False)
        pytest.skip(message + " (set STREAMREMAT_BOOTSTRAP to use another broker)")
    _broker_up_since.append(time.monotonic() if status.started_now else 0.0)
    try:
        yield status.bootstrap
    finally:
        if status.started_now:
            broker.stop()


@pytest.fixture
def broker_up_since(kafka_bootstrap: str) -> float:
    """When the session broker started (``time.monotonic()``; 0 when it was already
    running, or is not ours): its log cleaner first runs 30 s after its start."""
    return _broker_up_since[0] if _broker_up_since else 0.0


@pytest.fixture(scope="session")
def secure_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    """A 3-node SASL_SSL cluster with ACLs (``dev/cluster.py``), started on first use.

    Users: ``admin`` (super user), ``streamremat`` (every topic, group and
    transactional id), ``nowrite`` and ``nogroup`` (no ACL until a test grants some).
    ``STREAMREMAT_TEST_CLUSTER_PORT`` / ``_DIR`` reuse a cluster of your own,
    started with those users; it is left running."""
    own = os.environ.get("STREAMREMAT_TEST_CLUSTER_PORT")
    port = int(own or free_port_run(6))
    data_dir = Path(os.environ.get("STREAMREMAT_TEST_CLUSTER_DIR")
                    or tmp_path_factory.getbasetemp() / f"cluster-{port}")
    cluster = DevCluster(ClusterConfig(
        nodes=3, port=port, data_dir=data_dir, security="sasl_ssl", users=("nowrite", "nogroup"),
        stop_with_parent=not own,  # a node a fault test restarts must outlive this session
    ))
    was_running = cluster.running()
    try:
        cluster.start()
    except (DevBrokerError, OSError) as exc:
        message = f"could not start the 3-node SASL_SSL dev cluster: {exc}"
        if _in_ci():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    try:
        yield cluster
    finally:
        if not was_running:
            cluster.stop()


@pytest.fixture
def new_topic(kafka_bootstrap: str, request: pytest.FixtureRequest) -> Iterator[NewTopic]:
    """Factory: ``new_topic(partitions=1, config=None) -> name`` of a fresh, unique topic.

    Works from sync and async tests; topics are deleted after the test.
    """
    created: list[str] = []
    stem = re.sub(r"[^a-zA-Z0-9._-]+", "-", request.node.name)[:80]

    def make(partitions: int = 1, config: Mapping[str, str] | None = None) -> str:
        name = f"{stem}-{uuid.uuid4().hex[:8]}"
        spec = TopicSpec(name, partitions=partitions, config=dict(config or {}))
        run_sync(create_topics(kafka_bootstrap, [spec]))
        created.append(name)
        return name

    yield make
    if created:
        try:
            run_sync(delete_topics(kafka_bootstrap, created))
        except Exception as exc:  # e.g. a fault test stopped the broker: not this test's failure
            warnings.warn(f"could not delete test topics {created}: {exc}", stacklevel=1)
