"""streamremat side of bench/peers.py: Tumbling(60 s), count and sum of ``amount`` per key.

Run as ``python -m streamremat worker streamremat_job:app`` from this directory; the
topics and the app name come from the environment (PEERS_INPUT, PEERS_OUTPUT, PEERS_APP).
With PEERS_GROUP_BY (the re-keyed job), per that value field instead, through the
repartition topic, with a grace of PEERS_GRACE_MS.
"""

from __future__ import annotations

import os

from streamremat import App, Count, Operator, Sum, Tumbling

FIELD = os.environ.get("PEERS_GROUP_BY") or None

operator = Operator(
    name="win",
    source=os.environ["PEERS_INPUT"],
    sink=os.environ["PEERS_OUTPUT"],
    window=Tumbling(60_000, grace_ms=int(os.environ.get("PEERS_GRACE_MS") or 0)),
    aggregate={"count": Count(), "sum": Sum("amount")},
    key_by=(lambda value: value[FIELD]) if FIELD else None,
)

app = App(os.environ["PEERS_APP"], [operator])
