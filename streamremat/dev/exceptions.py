"""Errors raised by the dev broker tooling. Each message names the fix."""

from __future__ import annotations


class DevBrokerError(Exception):
    """Base class for dev broker errors."""


class MissingToolError(DevBrokerError):
    """A program the dev broker needs (``java``, ``mvn``) is not installed."""


class JarFetchError(DevBrokerError):
    """Maven could not fetch the Kafka jars."""


class BrokerStartError(DevBrokerError):
    """The broker process did not come up; the message carries the log tail."""


class PortInUseError(DevBrokerError):
    """Another process (not our broker) holds the port."""
