"""operators.clicks with 10 s windows, for the Prometheus end-to-end test: results
(and so end-to-end latencies) then flow every few seconds of the test, not once a
minute, so rate()-based panels always have an increase to show."""

from __future__ import annotations

import dataclasses

from operators.clicks import operator as clicks
from streamremat import App, Tumbling

# The load generator keys clicks by user (one partition per user), so the test reads
# them where they are: one task per source partition, as its checks expect.
operator = dataclasses.replace(clicks, window=Tumbling(10_000, grace_ms=1_000),
                               co_partitioned=True)
app = App("clicks", [operator])
