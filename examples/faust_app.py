"""A faust app with a streamremat operator: per key, a 60 s tumbling count + sum of
``amount``, final results to ``payments-per-minute`` (see docs/faust.md).

Run it like any faust app::

    pip install 'streamremat[faust]'
    python examples/faust_app.py worker -l info

Environment: ``KAFKA`` (default 127.0.0.1:9092), ``STATE_DIR`` (default
.streamremat/state), ``METRICS_PORT`` (default 9108; Prometheus scrapes it).
The rest of the faust app (agents, web views, timers) is untouched.
"""

from __future__ import annotations

import os

import faust

from streamremat import App, Count, Operator, Sum, Tumbling
from streamremat.integrations.faust import attach

KAFKA = os.environ.get("KAFKA", "127.0.0.1:9092")

app = faust.App("payments", broker=f"streamremat://{KAFKA}", web_port=6066)

per_minute = Operator(
    name="per_minute",
    source="payments",
    sink="payments-per-minute",
    window=Tumbling(60_000),
    aggregate={"n": Count(), "total": Sum("amount")},
)
attach(app, App("payments", [per_minute]),
       state_dir=os.environ.get("STATE_DIR", ".streamremat/state"),
       metrics_port=int(os.environ.get("METRICS_PORT", "9108")))

# Any other faust code lives on beside it, e.g. a plain agent on the results.
results = app.topic("payments-per-minute", value_serializer="json")


@app.agent(results)
async def big_spenders(stream: faust.StreamT) -> None:
    async for value in stream:
        if value["value"]["total"] > 10_000:
            print("big spender:", value)


if __name__ == "__main__":
    app.main()
