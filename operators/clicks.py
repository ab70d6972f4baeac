"""Clicks per user per minute.

Source ``clicks``: JSON values ``{"user": "alice", "url": "/cart", ...}`` with the
click time as the Kafka record timestamp. Sink ``clicks-per-user-minute``: one record
per user and minute with at least one click,
``{"user": "alice", "start_ms": ..., "end_ms": ..., "clicks": 3}``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from streamremat import App, Count, Operator, Tumbling


def per_user_minute(user: Any, start_ms: int, end_ms: int, clicks: Any) -> dict[str, Any]:
    return {"user": user, "start_ms": start_ms, "end_ms": end_ms, "clicks": clicks}


operator = Operator(
    name="clicks-per-user-minute",
    source="clicks",
    sink="clicks-per-user-minute",
    window=Tumbling(timedelta(minutes=1), grace_ms=timedelta(seconds=5)),
    aggregate=Count(),
    key_by=lambda click: click["user"],
    output=per_user_minute,
)

app = App("clicks", [operator])
