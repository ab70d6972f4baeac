"""streamremat side of bench/peers.py: Tumbling(60 s), count and sum of ``amount`` per key.

Run as ``python -m streamremat worker streamremat_job:app`` from this directory; the
topics and the app name come from the environment (PEERS_INPUT, PEERS_OUTPUT, PEERS_APP).
"""

from __future__ import annotations

import os

from streamremat import App, Count, Operator, Sum, Tumbling

operator = Operator(
    name="win",
    source=os.environ["PEERS_INPUT"],
    sink=os.environ["PEERS_OUTPUT"],
    window=Tumbling(60_000),
    aggregate={"count": Count(), "sum": Sum("amount")},
)

app = App(os.environ["PEERS_APP"], [operator])
