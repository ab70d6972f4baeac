"""The App run by the tuner's real-system test; topics come from the environment."""

from __future__ import annotations

import os

from streamremat import App, Count, Operator, Sum, Tumbling

SOURCE = os.environ.get("STREAMREMAT_TUNER_TEST_SOURCE", "tuner-test")

operator = Operator(
    name="tuner-check", source=SOURCE, sink=f"{SOURCE}-out", window=Tumbling(1_000),
    aggregate={"n": Count(), "total": Sum("x")},
)
app = App(f"tuner-{SOURCE}", [operator])
