"""streamremat.logging: text and json lines, extras carried in both."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from streamremat.logging import setup_logging


@pytest.fixture(autouse=True)
def _restore_root_logger() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_json_lines_carry_core_fields_and_extras() -> None:
    out = io.StringIO()
    setup_logging("info", "json", stream=out)
    log = logging.getLogger("streamremat.runtime.checkpoint")
    log.debug("hidden")
    log.info(
        "checkpoint %s", "written", extra={"operator": "counts", "partition": 3, "bytes": 5120}
    )
    (line,) = out.getvalue().splitlines()
    entry = json.loads(line)
    assert entry["level"] == "INFO"
    assert entry["logger"] == "streamremat.runtime.checkpoint"
    assert entry["msg"] == "checkpoint written"
    assert entry["ts"].endswith("+00:00")
    assert (entry["operator"], entry["partition"], entry["bytes"]) == ("counts", 3, 5120)


def test_json_keeps_exceptions_and_unserialisable_extras_on_one_line() -> None:
    out = io.StringIO()
    setup_logging(logging.WARNING, "json", stream=out)
    try:
        raise OSError("disk full")
    except OSError:
        logging.getLogger("x").exception("checkpoint failed", extra={"path": object()})
    (line,) = out.getvalue().splitlines()
    entry = json.loads(line)
    assert "OSError: disk full" in entry["exc"]
    assert entry["path"].startswith("<object object")


def test_an_extra_cannot_hide_a_core_field() -> None:
    out = io.StringIO()
    setup_logging("info", "json", stream=out)
    logging.getLogger("x").info("m", extra={"level": "fake", "ts": 0})
    entry = json.loads(out.getvalue())
    assert entry["level"] == "INFO" and entry["ts"] != 0


def test_text_appends_extras_as_key_values() -> None:
    out = io.StringIO()
    setup_logging("INFO", "text", stream=out)
    logging.getLogger("streamremat.recovery").info(
        "replayed", extra={"records": 10, "seconds": 0.5}
    )
    line = out.getvalue().rstrip("\n")
    assert line.endswith("INFO streamremat.recovery: replayed records=10 seconds=0.5")


def test_setup_twice_replaces_its_own_handler_only() -> None:
    other = logging.NullHandler()
    logging.getLogger().addHandler(other)
    first, second = io.StringIO(), io.StringIO()
    setup_logging("info", "text", stream=first)
    setup_logging("info", "json", stream=second)
    logging.getLogger("x").info("once")
    assert first.getvalue() == ""
    assert json.loads(second.getvalue())["msg"] == "once"
    assert other in logging.getLogger().handlers


def test_unknown_format_names_the_choices() -> None:
    with pytest.raises(ValueError, match="'text' or 'json'"):
        setup_logging("info", "yaml")  # type: ignore[arg-type]
