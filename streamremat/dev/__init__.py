"""Developer tooling: a real Kafka dev broker without Docker, and the demo."""

from streamremat.dev.broker import BrokerConfig, BrokerStatus, DevBroker
from streamremat.dev.exceptions import (
    BrokerStartError,
    DevBrokerError,
    JarFetchError,
    MissingToolError,
    PortInUseError,
)

__all__ = [
    "BrokerConfig",
    "BrokerStartError",
    "BrokerStatus",
    "DevBroker",
    "DevBrokerError",
    "JarFetchError",
    "MissingToolError",
    "PortInUseError",
]
