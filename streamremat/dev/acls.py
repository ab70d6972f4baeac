"""Kafka ACLs for the secured dev cluster, created through the Kafka protocol.

aiokafka has no ACL admin call, but it has the ``CreateAcls`` request; sending
it as the super user avoids starting a JVM (``kafka-acls``) per grant.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from aiokafka.protocol.admin import CreateAclsRequest

from streamremat.runtime.client import KafkaClientConfig
from streamremat.runtime.kafka import KafkaAdminError, admin_client

__all__ = ["Acl", "create_acls", "grant_defaults"]

# Kafka's enum values (org.apache.kafka.common.resource / acl).
_RESOURCE = {"topic": 2, "group": 3, "cluster": 4, "transactional_id": 5}
_PATTERN = {"literal": 3, "prefixed": 4}
_OPERATION = {
    "all": 2, "read": 3, "write": 4, "create": 5, "delete": 6, "alter": 7, "describe": 8,
    "cluster_action": 9, "describe_configs": 10, "alter_configs": 11, "idempotent_write": 12,
}  # fmt: skip
_PERMISSION = {"deny": 2, "allow": 3}


@dataclass(frozen=True)
class Acl:
    """``user`` may (``allow``) or may not (``deny``) do ``operation`` on a resource.
    ``name`` ``"*"`` (literal) is every resource of that type."""

    user: str
    resource: str
    name: str
    operation: str
    permission: str = "allow"
    pattern: str = "literal"

    def request(self) -> CreateAclsRequest:
        return CreateAclsRequest(
            _RESOURCE[self.resource], self.name, _PATTERN[self.pattern], f"User:{self.user}",
            "*", _OPERATION[self.operation], _PERMISSION[self.permission],
        )


async def create_acls(admin_config: KafkaClientConfig, acls: Sequence[Acl]) -> None:
    """Create ``acls`` as the super user; raise ``KafkaAdminError`` on a refusal."""
    async with admin_client(admin_config) as admin:
        for acl in acls:
            response = await admin._send_request(acl.request())
            for code, message in response.creation_responses:
                if code:
                    raise KafkaAdminError(f"creating {acl} failed: error {code} {message}", code)


def app_acls(user: str) -> list[Acl]:
    """What a streamremat worker needs: every topic, group and transactional id."""
    return [
        Acl(user, "topic", "*", "all"),
        Acl(user, "group", "*", "all"),
        Acl(user, "transactional_id", "*", "all"),
        Acl(user, "cluster", "kafka-cluster", "idempotent_write"),
    ]


async def grant_defaults(admin_config: KafkaClientConfig, user: str) -> None:
    await create_acls(admin_config, app_acls(user))
