"""The demo's hint for stopping the broker it started names a command that works
where the demo ran: in a fresh clone ``streamremat`` is in ``.venv/bin``, not on
the PATH, so a bare ``streamremat broker stop`` failed there."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from streamremat.dev.broker import DEFAULT_PORT
from streamremat.dev.demo import stop_hint


def test_a_clones_venv_command_is_named_by_its_path_with_the_make_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    venv_bin = tmp_path / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    program = venv_bin / "streamremat"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # not on it, as in a fresh clone
    hint = stop_hint(DEFAULT_PORT, str(program))
    assert hint == "`make broker-stop` or `.venv/bin/streamremat broker stop`"
    # make broker-stop stops the default port only
    assert stop_hint(19_000, str(program)) == "`.venv/bin/streamremat broker stop --port 19000`"


def test_a_command_on_the_path_is_named_bare(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    program = tmp_path / "streamremat"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}/usr/bin")
    assert stop_hint(DEFAULT_PORT, str(program)).endswith("`streamremat broker stop`")


def test_python_dash_m_is_named_as_such() -> None:
    hint = stop_hint(19_000, os.path.join("somewhere", "streamremat", "__main__.py"))
    assert hint.endswith(" -m streamremat broker stop --port 19000`")
    assert os.path.basename(sys.executable) in hint
