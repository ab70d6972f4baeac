"""Metrics: the `Sensor` hook interface the runtime calls, and its Prometheus implementation."""

from streamremat.metrics.prometheus import PrometheusSensor
from streamremat.metrics.sensor import LatencyBatch, Sensor, TunerReading, read_tuner_decision

__all__ = ["LatencyBatch", "PrometheusSensor", "Sensor", "TunerReading", "read_tuner_decision"]
