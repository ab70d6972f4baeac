"""The App the demo runs: ``operators.clicks`` on topics named for this demo run.

The worker imports it as ``streamremat.dev.demo_app:app``; the run's topic suffix
comes from ``STREAMREMAT_DEMO_RUN`` so every demo starts from empty topics.
"""

from __future__ import annotations

import dataclasses
import os

from operators.clicks import operator as clicks
from streamremat import App

RUN = os.environ.get("STREAMREMAT_DEMO_RUN", "local")

# The demo's clicks are keyed by user and partitioned by that key (dev/demo.py), so
# the operator reads them where they are instead of through a repartition topic.
operator = dataclasses.replace(
    clicks, source=f"demo-{RUN}-clicks", sink=f"demo-{RUN}-clicks-per-user-minute",
    co_partitioned=True,
)
app = App(f"demo-{RUN}", [operator])
