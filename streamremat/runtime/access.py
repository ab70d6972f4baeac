"""Why the cluster refused us, in words: TLS, SASL and ACL failures name the cause and the fix.

aiokafka reports a failed TLS handshake or a wrong password only as "Unable to
bootstrap" (the cause goes to its log), and an ACL denial as an error class
whose argument is the topic, group or transactional id. ``check_connection``
opens one connection exactly as every client will and says what went wrong;
``access_denied`` turns an authorization error into the operation, the
resource and the ``kafka-acls`` grant that fixes it. Both are fatal: retrying
cannot fix a password, a certificate or an ACL.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterable

from aiokafka.conn import create_conn
from aiokafka.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    SaslAuthenticationFailed,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailed,
    UnsupportedSaslMechanismError,
)

from streamremat.runtime.client import KafkaClientConfig
from streamremat.runtime.exceptions import KafkaAccessError

__all__ = ["AUTHORIZATION_ERRORS", "access_denied", "check_connection", "connect_failure"]

AUTHORIZATION_ERRORS: tuple[type[BaseException], ...] = (
    TopicAuthorizationFailedError,
    GroupAuthorizationFailedError,
    TransactionalIdAuthorizationFailed,
    ClusterAuthorizationFailedError,
)


def _hosts(bootstrap: str) -> list[tuple[str, int]]:
    out = []
    for item in bootstrap.split(","):
        host, _, port = item.strip().rpartition(":")
        out.append((host or item.strip(), int(port) if port.isdigit() else 9092))
    return out


async def check_connection(client: KafkaClientConfig, timeout_s: float = 20.0) -> None:
    """Connect to the bootstrap servers as every client will (TLS handshake, then SASL).

    Returns once one server accepted us; otherwise raises ``KafkaAccessError``
    naming the first server's failure (a TLS or SASL failure wins over an
    unreachable server, since it is the one the user can fix)."""
    failures: list[tuple[str, int, BaseException]] = []
    for host, port in _hosts(client.bootstrap_servers):
        try:
            async with asyncio.timeout(timeout_s):
                conn = await create_conn(
                    host, port, request_timeout_ms=int(timeout_s * 1000),
                    **client.connection_kwargs(),
                )
        except Exception as exc:  # every failure is explained below
            failures.append((host, port, exc))
            continue
        conn.close()
        return
    fixable = (ssl.SSLError, SaslAuthenticationFailed)
    failures.sort(key=lambda f: not isinstance(_root(f[2]), fixable))
    host, port, error = failures[0]
    raise KafkaAccessError(connect_failure(client, host, port, error)) from error


def _root(exc: BaseException) -> BaseException:
    while exc.__cause__ is not None and not isinstance(exc, ssl.SSLError):
        exc = exc.__cause__
    return exc


def connect_failure(client: KafkaClientConfig, host: str, port: int, exc: BaseException) -> str:
    """What went wrong connecting to ``host:port`` and which setting fixes it."""
    root = _root(exc)
    where = f"{host}:{port}"
    if isinstance(root, ssl.SSLCertVerificationError):
        return (
            f"TLS: the certificate of broker {where} is not trusted ({root.verify_message}) "
            f"by the CA file {client.ssl_cafile or '(system CAs)'}: set --ssl-cafile "
            "(ssl.cafile, STREAMREMAT_SSL_CAFILE) to the CA that signed the brokers' certificates"
        )
    if isinstance(root, ssl.SSLError):
        return (
            f"TLS handshake with broker {where} failed: {root.reason or root}; check that the "
            f"listener speaks {client.security_protocol} (--security-protocol) and the client "
            "certificate settings (--ssl-certfile, --ssl-keyfile)"
        )
    if isinstance(root, SaslAuthenticationFailed):
        detail = str(root.args[0]) if root.args else "authentication failed"
        return (
            f"SASL {client.sasl_mechanism} authentication as user {client.sasl_username!r} "
            f"failed at broker {where}: {detail}; check --sasl-username, the password "
            "(STREAMREMAT_SASL_PASSWORD or sasl.password in --kafka-config) and --sasl-mechanism"
        )
    if isinstance(root, UnsupportedSaslMechanismError):
        return f"SASL at broker {where}: {root}; pick one of those with --sasl-mechanism"
    if isinstance(root, ConnectionRefusedError):
        return f"cannot reach Kafka at {where} (connection refused); check --bootstrap"
    if isinstance(root, TimeoutError):
        return (
            f"no answer from Kafka at {where} within the timeout; check --bootstrap and that "
            f"the listener speaks {client.security_protocol} (--security-protocol)"
        )
    return (
        f"cannot connect to Kafka at {where} as {client.describe()}: {root!r}; check "
        "--bootstrap and --security-protocol"
    )


def access_denied(
    exc: object, client: KafkaClientConfig, doing: str, topic_operation: str = "READ/DESCRIBE"
) -> str | None:
    """The ACL an authorization error says is missing, or None for any other error.

    ``doing`` is what the worker was doing (e.g. "writing outputs of orders[3]");
    ``topic_operation`` the operation a topic denial is about (the error does
    not say which)."""
    if not isinstance(exc, AUTHORIZATION_ERRORS):
        return None
    who = f"User:{client.sasl_username}" if client.sasl_username else "this client's principal"
    names = _names(exc.args[0] if exc.args else None)
    if isinstance(exc, TopicAuthorizationFailedError):
        resource, flag, operation = "topic", "--topic", topic_operation
    elif isinstance(exc, GroupAuthorizationFailedError):
        resource, flag, operation = "consumer group", "--group", "READ"
    elif isinstance(exc, TransactionalIdAuthorizationFailed):
        resource, flag, operation = "transactional id", "--transactional-id", "WRITE"
    else:
        resource, flag, operation = "cluster", "--cluster", "IDEMPOTENT_WRITE/CREATE"
    if resource == "cluster":
        target, grant = "'kafka-cluster'", flag
    else:
        target = ", ".join(repr(n) for n in names) or "(not named by the broker)"
        grant = " ".join(f"{flag} {n}" for n in names) or flag
    op = operation.split("/")[0].title().replace("_", "")  # kafka-acls spelling
    return (
        f"not authorized: {who} lacks {operation} on {resource} {target} while {doing} "
        f"({type(exc).__name__}); grant it, e.g. kafka-acls --add --allow-principal {who} "
        f"--operation {op} {grant}"
    )


def _names(arg: object) -> list[str]:
    if arg is None:
        return []
    if isinstance(arg, str):
        return [arg]
    if isinstance(arg, Iterable):
        return sorted(str(a) for a in arg)
    return [str(arg)]
