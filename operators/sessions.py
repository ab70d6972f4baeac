"""User sessions: activity separated by 30 minutes of silence.

Source ``clicks``: JSON values ``{"user": "alice", "url": "/cart", ...}`` with the
click time as the Kafka record timestamp. Sink ``user-sessions``: one record per
finished session,
``{"user": ..., "start_ms": ..., "end_ms": ..., "duration_ms": ..., "clicks": 4,
"pages": 3}``, where start and end are the first and last click (inclusive) and
``pages`` counts distinct URLs.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from streamremat import App, Count, DistinctCount, Operator, Session


def session_summary(user: Any, start_ms: int, end_ms: int, agg: Any) -> dict[str, Any]:
    return {
        "user": user,
        "start_ms": start_ms,
        "end_ms": end_ms,
        "duration_ms": end_ms - start_ms,
        "clicks": agg["clicks"],
        "pages": agg["pages"],
    }


operator = Operator(
    name="user-sessions",
    source="clicks",
    sink="user-sessions",
    window=Session(timedelta(minutes=30), grace_ms=timedelta(seconds=10)),
    aggregate={"clicks": Count(), "pages": DistinctCount("url")},
    key_by=lambda click: click["user"],
    output=session_summary,
)

app = App("user-sessions", [operator])
