"""Dev cluster node configuration (no broker is started here)."""

from __future__ import annotations

from pathlib import Path

from streamremat.dev.broker import server_properties
from streamremat.dev.cluster import ClusterConfig, DevCluster, client_properties


def test_three_nodes_form_one_quorum_on_their_own_ports(tmp_path: Path) -> None:
    cluster = DevCluster(ClusterConfig(nodes=3, port=30000, data_dir=tmp_path))
    props = [server_properties(b.config) for b in cluster.nodes()]
    assert [p["node.id"] for p in props] == ["1", "2", "3"]
    assert {p["controller.quorum.voters"] for p in props} == {
        "1@127.0.0.1:30001,2@127.0.0.1:30003,3@127.0.0.1:30005"
    }
    assert [p["listeners"] for p in props][2] == (
        "PLAINTEXT://127.0.0.1:30004,CONTROLLER://127.0.0.1:30005")
    assert len({p["log.dirs"] for p in props}) == 3
    assert {p["transaction.state.log.replication.factor"] for p in props} == {"3"}
    assert {p["transaction.state.log.min.isr"] for p in props} == {"2"}
    assert cluster.config.bootstrap == "127.0.0.1:30000,127.0.0.1:30002,127.0.0.1:30004"


def test_sasl_ssl_nodes_authorize_and_keep_passwords_out_of_repr(tmp_path: Path) -> None:
    cluster = DevCluster(ClusterConfig(nodes=3, port=30000, data_dir=tmp_path,
                                       security="sasl_ssl", users=("extra",)))
    node = cluster.node(2).config
    props = server_properties(node)
    assert props["listeners"].startswith("SASL_SSL://127.0.0.1:30002,")
    assert props["authorizer.class.name"].endswith("StandardAuthorizer")
    assert props["allow.everyone.if.no.acl.found"] == "false"
    assert "SCRAM-SHA-512" in props["sasl.enabled.mechanisms"]
    assert sum(a == "--add-scram" for a in node.format_args) == 2 * 3  # 3 users, 2 mechanisms
    for user in ("admin", "streamremat", "extra"):
        assert cluster.password(user) not in repr(node)
        assert cluster.password(user) not in repr(cluster.client(user))
    text = client_properties(cluster.client("streamremat"))
    assert "security.protocol=SASL_SSL" in text
    assert f"sasl.password={cluster.password('streamremat')}" in text
    assert Path(cluster.tls.ca_cert).is_file() and Path(cluster.tls.keystore).is_file()
