"""The Apps ``bench/rematerialize.py`` runs in worker subprocesses
(``bench._remat_app:app``); topic, app name, job and mode come from the
environment, so every run gets fresh topics, group and checkpoints.

* ``quantiles``: exact p50/p99 of ``x`` per key per 10-minute tumbling window;
* ``sessions``: ``Collect`` of ``x`` per user session (30-minute gap).

``REMAT_BENCH_MODE`` is passed as the operator's ``rematerialize=`` when the
engine has that option; ``MODE_APPLIED`` says whether it did.
"""

from __future__ import annotations

import dataclasses
import os
from datetime import timedelta

from streamremat import App, Collect, Operator, Quantiles, Session, Tumbling

SOURCE = os.environ.get("REMAT_BENCH_SOURCE", "remat-bench")
APP_NAME = os.environ.get("REMAT_BENCH_APP", "remat-bench")
JOB = os.environ.get("REMAT_BENCH_JOB", "quantiles")
MODE = os.environ.get("REMAT_BENCH_MODE", "store")

JOBS = {
    "quantiles": (Tumbling(timedelta(minutes=10)), {"p": Quantiles("x", [0.5, 0.99])}),
    "sessions": (Session(timedelta(minutes=30)), {"items": Collect("x")}),
}

MODE_APPLIED = "rematerialize" in {f.name for f in dataclasses.fields(Operator)}

window, aggregate = JOBS[JOB]
_extra = {"rematerialize": MODE} if MODE_APPLIED else {}
operator = Operator(name=JOB, source=SOURCE, sink=f"{SOURCE}-out", window=window,
                    aggregate=aggregate, **_extra)
app = App(APP_NAME, [operator])
