"""Log setup for the CLI: human text, or one JSON object per line (`--log-format json`).

Checkpoint and recovery lines carry their figures as `extra` fields, e.g.
``log.info("checkpoint written", extra={"operator": "counts", "partition": 3,
"bytes": 5120, "duration_s": 0.012})``; both formats print them.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, Final, Literal, TextIO

__all__ = ["JsonFormatter", "TextFormatter", "setup_logging"]

LogFormat = Literal["text", "json"]

# Attributes every LogRecord has; anything else on a record came from `extra`.
_RECORD_ATTRS: Final = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
    "taskName",
}


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in record.__dict__.items() if k not in _RECORD_ATTRS}


class JsonFormatter(logging.Formatter):
    """`{"ts", "level", "logger", "msg", **extra}` per line; `exc` holds a traceback."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in _extras(record).items():
            entry.setdefault(key, value)  # an extra never hides a core field
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """`time LEVEL logger: msg key=value ...`"""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        extras = _extras(record)
        if not extras:
            return text
        head, sep, tail = text.partition("\n")  # keep key=value on the message line
        pairs = " ".join(f"{k}={v}" for k, v in extras.items())
        return f"{head} {pairs}{sep}{tail}"


def setup_logging(
    level: int | str = "INFO", fmt: LogFormat = "text", stream: TextIO | None = None
) -> logging.Handler:
    """Send all logs to `stream` (stderr) in `fmt`. Calling again replaces the handler."""
    if fmt not in ("text", "json"):
        raise ValueError(f"log format {fmt!r} is not supported; use 'text' or 'json'")
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.set_name("streamremat")
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == "streamremat"]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)
    return handler
