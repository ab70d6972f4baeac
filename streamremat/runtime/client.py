"""How every Kafka client streamremat opens connects: one frozen ``KafkaClientConfig``.

The worker's consumer, its transactional producers, its admin client, the
checkpoint replica, ``streamremat tune`` and ``loadgen`` all build their
aiokafka keyword arguments here (``consumer_kwargs``, ``producer_kwargs``,
``admin_kwargs``), so security (SASL PLAIN/SCRAM, TLS with optional client
certificates) and any other aiokafka option reach every one of them.

Sources, first wins: command-line flags, ``STREAMREMAT_*`` environment
variables, the ``--kafka-config`` file (Java properties or TOML). Secrets are
``Secret`` objects: their ``repr`` and ``str`` are masked, so they never reach
a log line, a metric label or ``--help``.
"""

from __future__ import annotations

import inspect
import os
import ssl
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Final

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.helpers import create_ssl_context

from streamremat.core.exceptions import ConfigError

__all__ = [
    "CLIENT_KINDS",
    "KafkaClientConfig",
    "Secret",
    "load_kafka_config_file",
]

PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS: Final = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
CLIENT_KINDS: Final = ("consumer", "producer", "admin")

_CONSTRUCTORS: Final[dict[str, Any]] = {
    "consumer": AIOKafkaConsumer,
    "producer": AIOKafkaProducer,
    "admin": AIOKafkaAdminClient,
}

# Options the worker sets itself because exactly-once and recovery depend on them.
_RESERVED: Final = frozenset({
    "loop", "ssl_context", "group_id", "enable_auto_commit", "isolation_level",
    "auto_offset_reset", "transactional_id", "acks", "enable_idempotence",
    "key_serializer", "value_serializer", "key_deserializer", "value_deserializer",
})  # fmt: skip

# Names of our own fields, and the aiokafka/librdkafka spellings accepted for them.
_ALIASES: Final = {
    "sasl_plain_username": "sasl_username",
    "sasl_plain_password": "sasl_password",
    "ssl_ca_location": "ssl_cafile",
    "ssl_certificate_location": "ssl_certfile",
    "ssl_key_location": "ssl_keyfile",
    "ssl_password": "ssl_key_password",
}
_FIELDS: Final = (
    "bootstrap_servers", "security_protocol", "sasl_mechanism", "sasl_username",
    "sasl_password", "ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_key_password",
    "ssl_check_hostname",
)  # fmt: skip
_SECRETS: Final = frozenset({"sasl_password", "ssl_key_password"})


class Secret:
    """A password that never prints: ``repr``/``str`` show ``***``; ``reveal()`` gives it."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


def _accepted(kind: str) -> dict[str, inspect.Parameter]:
    return dict(inspect.signature(_CONSTRUCTORS[kind].__init__).parameters)


@dataclass(frozen=True)
class KafkaClientConfig:
    """Connection and security settings shared by every client.

    ``options`` go to every client whose constructor takes them; ``per_client``
    (``consumer``/``producer``/``admin``) to that kind only. Both win over the
    worker's own tuning defaults, never over the settings in ``_RESERVED``.
    """

    bootstrap_servers: str = "127.0.0.1:9092"
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: Secret | None = field(default=None, repr=False)
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_key_password: Secret | None = field(default=None, repr=False)
    ssl_check_hostname: bool = True
    options: Mapping[str, Any] = field(default_factory=dict)
    per_client: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        protocol = self.security_protocol.upper()
        object.__setattr__(self, "security_protocol", protocol)
        if protocol not in PROTOCOLS:
            raise ConfigError(
                f"security_protocol {self.security_protocol!r}: use one of {', '.join(PROTOCOLS)}"
            )
        if protocol.startswith("SASL"):
            mechanism = (self.sasl_mechanism or "PLAIN").upper()
            object.__setattr__(self, "sasl_mechanism", mechanism)
            if mechanism not in MECHANISMS:
                raise ConfigError(
                    f"sasl_mechanism {self.sasl_mechanism!r}: use one of {', '.join(MECHANISMS)}"
                )
            if not self.sasl_username or self.sasl_password is None:
                raise ConfigError(
                    f"security_protocol {protocol} needs a user and a password: set "
                    "--sasl-username and STREAMREMAT_SASL_PASSWORD (or sasl.username and "
                    "sasl.password in --kafka-config)"
                )
        for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
            path = getattr(self, name)
            if path is not None and not Path(path).is_file():
                raise ConfigError(f"{name} {path!r} is not a readable file")
        if self.ssl_keyfile and not self.ssl_certfile:
            raise ConfigError("ssl_keyfile needs ssl_certfile (the client certificate)")
        _check_options(self.options, self.per_client)

    # -- what clients are built from -------------------------------------------

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @cached_property
    def ssl_context(self) -> ssl.SSLContext | None:
        """Server verification against ``ssl_cafile`` (else the system CAs), plus the
        client certificate when one is given. Built once, shared by every client."""
        if not self.uses_tls:
            return None
        try:
            context: ssl.SSLContext = create_ssl_context(
                cafile=self.ssl_cafile,
                certfile=self.ssl_certfile,
                keyfile=self.ssl_keyfile,
                password=self.ssl_key_password.reveal() if self.ssl_key_password else None,
            )
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(
                f"TLS setup failed (ssl_cafile={self.ssl_cafile!r}, ssl_certfile="
                f"{self.ssl_certfile!r}, ssl_keyfile={self.ssl_keyfile!r}): {exc}"
            ) from exc
        context.check_hostname = self.ssl_check_hostname
        return context

    def connection_kwargs(self) -> dict[str, Any]:
        """What every aiokafka client (and a bare ``create_conn``) needs to connect."""
        kwargs: dict[str, Any] = {"security_protocol": self.security_protocol}
        if self.uses_tls:
            kwargs["ssl_context"] = self.ssl_context
        if self.security_protocol.startswith("SASL"):
            assert self.sasl_password is not None  # checked in __post_init__
            kwargs["sasl_mechanism"] = self.sasl_mechanism
            kwargs["sasl_plain_username"] = self.sasl_username
            kwargs["sasl_plain_password"] = self.sasl_password.reveal()
        return kwargs

    def kwargs(self, kind: str, **defaults: Any) -> dict[str, Any]:
        """Constructor kwargs of a ``kind`` client: bootstrap and security, then the
        caller's ``defaults``, then the user's options for that kind."""
        accepted = _accepted(kind)
        out: dict[str, Any] = {"bootstrap_servers": self.bootstrap_servers}
        out.update(self.connection_kwargs())
        out.update(defaults)
        out.update({k: v for k, v in self.options.items() if k in accepted})
        out.update(self.per_client.get(kind, {}))
        return out

    def consumer_kwargs(self, **defaults: Any) -> dict[str, Any]:
        return self.kwargs("consumer", **defaults)

    def producer_kwargs(self, **defaults: Any) -> dict[str, Any]:
        return self.kwargs("producer", **defaults)

    def admin_kwargs(self, **defaults: Any) -> dict[str, Any]:
        return self.kwargs("admin", **defaults)

    def describe(self) -> str:
        """A one-line, secret-free summary for logs and errors."""
        parts = [self.bootstrap_servers, self.security_protocol]
        if self.security_protocol.startswith("SASL"):
            parts.append(f"{self.sasl_mechanism} as {self.sasl_username!r}")
        if self.uses_tls:
            parts.append(f"CA {self.ssl_cafile or 'system'}")
            if self.ssl_certfile:
                parts.append(f"client cert {self.ssl_certfile}")
        return ", ".join(parts)

    # -- building one ------------------------------------------------------------

    @classmethod
    def of(cls, target: str | KafkaClientConfig) -> KafkaClientConfig:
        """A bootstrap string (plaintext, no options) or a config as it is."""
        return target if isinstance(target, KafkaClientConfig) else cls(bootstrap_servers=target)

    @classmethod
    def resolve(
        cls,
        flags: Mapping[str, Any],
        *,
        environ: Mapping[str, str] | None = None,
        config_file: str | None = None,
        default_bootstrap: str = "127.0.0.1:9092",
    ) -> KafkaClientConfig:
        """Merge flags (``None`` = not given), ``STREAMREMAT_<FIELD>`` variables and the
        config file (``config_file`` or ``$STREAMREMAT_KAFKA_CONFIG``), first wins."""
        env = os.environ if environ is None else environ
        path = config_file or env.get("STREAMREMAT_KAFKA_CONFIG")
        values: dict[str, Any] = {}
        options: dict[str, Any] = {}
        per_client: dict[str, dict[str, Any]] = {}
        if path:
            values, options, per_client = _split(load_kafka_config_file(path), path)
        for name in _FIELDS:
            raw = env.get(f"STREAMREMAT_{name.upper()}")
            if raw not in (None, ""):
                values[name] = raw
            if flags.get(name) is not None:
                values[name] = flags[name]
        values.setdefault("bootstrap_servers", default_bootstrap)
        for name in _SECRETS:
            if isinstance(values.get(name), str):
                values[name] = Secret(values[name])
        if isinstance(values.get("ssl_check_hostname"), str):
            values["ssl_check_hostname"] = _parse_bool("ssl_check_hostname",
                                                       values["ssl_check_hostname"])
        return cls(**values, options=options, per_client=per_client)


def load_kafka_config_file(path: str) -> dict[str, Any]:
    """A ``.toml`` file (tables ``[consumer]``, ``[producer]``, ``[admin]`` for one kind
    of client) or a Java properties file (``consumer.fetch.max.bytes=...``)."""
    file = Path(path)
    try:
        text = file.read_text()
    except OSError as exc:
        raise ConfigError(f"--kafka-config {path!r} cannot be read: {exc}") from exc
    if file.suffix.lower() == ".toml":
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"--kafka-config {path!r} is not valid TOML: {exc}") from exc
    return _parse_properties(text, path)


def _parse_properties(text: str, path: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        sep = min((i for i in (line.find("="), line.find(":")) if i > 0), default=-1)
        if sep < 0:
            raise ConfigError(f"--kafka-config {path}:{number}: expected key=value, got {raw!r}")
        key, value = line[:sep].strip(), line[sep + 1 :].strip()
        kind, _, rest = key.partition(".")
        if kind in CLIENT_KINDS and rest:
            out.setdefault(kind, {})[rest] = value
        else:
            out[key] = value
    return out


def _norm(key: str) -> str:
    name = key.strip().lower().replace(".", "_").replace("-", "_")
    return _ALIASES.get(name, name)


def _split(
    raw: Mapping[str, Any], path: str
) -> tuple[dict[str, Any], dict[str, Any], dict[str, dict[str, Any]]]:
    """Our fields, options for every client, options per kind of client."""
    values: dict[str, Any] = {}
    options: dict[str, Any] = {}
    per_client: dict[str, dict[str, Any]] = {}
    for key, value in raw.items():
        if key in CLIENT_KINDS and isinstance(value, Mapping):
            accepted = _accepted(key)
            per_client[key] = {
                _norm(k): _coerce(_norm(k), v, accepted.get(_norm(k))) for k, v in value.items()
            }
            continue
        name = _norm(key)
        if name in _FIELDS:
            values[name] = value
        else:
            param = next((_accepted(k).get(name) for k in CLIENT_KINDS if name in _accepted(k)),
                         None)
            options[name] = _coerce(name, value, param)
    return values, options, per_client


def _coerce(name: str, value: Any, param: inspect.Parameter | None) -> Any:
    """Properties values are strings: give them the type of the option's default."""
    if not isinstance(value, str) or param is None:
        return value
    default = param.default
    try:
        if isinstance(default, bool):
            return _parse_bool(name, value)
        if isinstance(default, int):
            return int(value)
        if isinstance(default, float):
            return float(value)
    except ValueError:
        raise ConfigError(
            f"kafka option {name}={value!r}: expected a {type(default).__name__}"
        ) from None
    return value


def _parse_bool(name: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise ConfigError(f"{name}={value!r}: expected true or false")


def _check_options(
    options: Mapping[str, Any], per_client: Mapping[str, Mapping[str, Any]]
) -> None:
    """Refuse reserved and unknown options by name, so a typo is not silently ignored."""
    for kind, opts in [("any", options), *per_client.items()]:
        for name in opts:
            if name in _RESERVED:
                raise ConfigError(
                    f"kafka option {name!r} is set by streamremat itself (exactly-once and "
                    "recovery depend on it); remove it from --kafka-config"
                )
            kinds = CLIENT_KINDS if kind == "any" else (kind,)
            if kind not in ("any", *CLIENT_KINDS):
                raise ConfigError(f"--kafka-config section {kind!r}: use consumer, producer "
                                  "or admin")
            if not any(name in _accepted(k) for k in kinds):
                raise ConfigError(
                    f"kafka option {name!r} is not an aiokafka {'/'.join(kinds)} option; "
                    "check the spelling (aiokafka names, dots or underscores)"
                )
