"""Apps for the CLI tests: one with no operators, one with a source nobody created."""

from __future__ import annotations

from streamremat import App, Count, Operator, Tumbling

empty = App("empty")

missing_source = App("missing", [Operator(
    name="counts", source="streamremat-no-such-topic", sink="streamremat-no-such-topic-out",
    window=Tumbling(1_000), aggregate=Count(),
)])
