"""The App the fault tests run in worker subprocesses (``tests.fault.apps:app``).

Topic and app names come from the environment, read at import time, so every
test gives its workers fresh topics, a fresh consumer group and a fresh
checkpoint topic. The aggregation depends on the values (a sum), not only on
how many records there are, so a lost, duplicated or reordered record shows.
"""

from __future__ import annotations

import os

from streamremat import App, Count, Operator, Sum, Tumbling

SOURCE = os.environ.get("STREAMREMAT_FAULT_SOURCE", "fault-source")
SINK = os.environ.get("STREAMREMAT_FAULT_SINK", f"{SOURCE}-out")
APP_NAME = os.environ.get("STREAMREMAT_FAULT_APP", "fault")
OPERATOR = "sums"
WINDOW_MS = 1_000


def make_operator(source: str = SOURCE, sink: str = SINK) -> Operator:
    """The operator, also used in-process for the failure-free expectation."""
    return Operator(
        name=OPERATOR,
        source=source,
        sink=sink,
        window=Tumbling(WINDOW_MS),
        aggregate={"n": Count(), "total": Sum("x")},
    )


operator = make_operator()
app = App(APP_NAME, [operator])
