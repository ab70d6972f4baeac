"""Bad settings are one ``error:`` line naming the setting, the value and what is
accepted, with exit code 2 (issue 10 item 9); durations take units."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from streamremat.cli import build_parser, main
from streamremat.runtime.commands import settings_from_args
from streamremat.runtime.settings import CheckpointSettings, parse_duration_s
from streamremat.tuning.config import TunerConfig
from tests.unit.cli_apps import missing_source

REPO = Path(__file__).resolve().parents[2]
APP = "tests.unit.cli_apps:missing_source"


def _error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert err.startswith("error: "), err
    return err


@pytest.mark.parametrize(
    ("variable", "value", "accepted"),
    [
        ("RTO_SECONDS", "two minutes", "500ms, 30s, 2m, 1h"),
        ("COMMIT_INTERVAL", "-1s", "500ms, 30s, 2m, 1h"),
        ("GUARANTEE", "bogus", "exactly_once, at_least_once"),
        ("ON_RETENTION_GAP", "skip", "fail, reset"),
        ("LOG_FORMAT", "xml", "text, json"),
        ("LOG_LEVEL", "loud", "DEBUG, INFO"),
        ("METRICS_PORT", "99999", "1-65535"),
        ("MAX_BATCH", "0", ">= 1"),
    ],
)
def test_bad_environment_value_is_one_error_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    variable: str, value: str, accepted: str,
) -> None:
    monkeypatch.setenv(f"STREAMREMAT_{variable}", value)
    err = _error(capsys, ["worker", APP])
    assert f"STREAMREMAT_{variable}={value!r}" in err and accepted in err, err


def test_bad_flag_value_names_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    err = _error(capsys, ["worker", APP, "--commit-interval", "soon"])
    assert "--commit-interval='soon'" in err and "500ms" in err, err


def test_a_bad_duration_breaks_neither_help_nor_other_commands(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("STREAMREMAT_RTO_SECONDS", "abc")
    with pytest.raises(SystemExit) as done:
        main(["worker", "--help"])
    assert done.value.code == 0
    assert "abc, from STREAMREMAT_RTO_SECONDS" in " ".join(capsys.readouterr().out.split())
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0


def test_durations_take_units(monkeypatch: pytest.MonkeyPatch) -> None:
    assert [parse_duration_s(t) for t in ("120", "0.5", "500ms", "30s", "2m", "1h")] == [
        120.0, 0.5, 0.5, 30.0, 120.0, 3600.0,
    ]
    for bad in ("", "2 minutes", "-1", "1d", "inf", "nan"):
        with pytest.raises(ValueError):
            parse_duration_s(bad)
    monkeypatch.setenv("STREAMREMAT_RTO_SECONDS", "2m")
    monkeypatch.setenv("STREAMREMAT_COMMIT_INTERVAL", "0.5s")
    args = build_parser().parse_args(["worker", APP, "--max-interval", "15m"])
    settings = settings_from_args(args, missing_source)
    assert settings.checkpoints.rto_s == 120.0
    assert settings.commit_interval_s == 0.5
    assert settings.checkpoints.max_interval_s == 900.0


def test_tuner_defaults_are_defined_once() -> None:
    """The worker, the CLI and docs/tuning.md show TunerConfig's defaults."""
    tuner, ck = TunerConfig(), CheckpointSettings()
    assert (ck.rto_s, ck.min_interval_s, ck.max_interval_s, ck.prior_mtbf_s) == (
        tuner.rto_s, tuner.min_interval_s, tuner.max_interval_s, tuner.prior_mtbf_s,
    )
    args = build_parser().parse_args(["worker", APP])
    settings = settings_from_args(args, missing_source)
    assert settings.checkpoints == CheckpointSettings(replicate=True)
    docs = (REPO / "docs" / "tuning.md").read_text()
    for flag, value in (("--rto-seconds", tuner.rto_s), ("--min-interval", tuner.min_interval_s),
                        ("--max-interval", tuner.max_interval_s),
                        ("--prior-mtbf", tuner.prior_mtbf_s)):
        assert f"| `{flag}` | {value:g} |" in docs, flag
    readme = (REPO / "README.md").read_text()
    expected = ", ".join(f"{v:g}" for v in (tuner.rto_s, tuner.min_interval_s,
                                            tuner.max_interval_s, tuner.prior_mtbf_s))
    assert f"`--prior-mtbf` | {expected} |" in readme


def test_metrics_port_in_use(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        port = busy.getsockname()[1]
        err = _error(capsys, ["worker", APP, "--metrics-port", str(port)])
    assert f"--metrics-port {port}" in err and "pick a free port" in err, err


def test_app_without_operators(capsys: pytest.CaptureFixture[str]) -> None:
    err = _error(capsys, ["worker", "tests.unit.cli_apps:empty"])
    assert "'empty' has no operators" in err and "app.add(operator)" in err, err


def test_state_dir_held_by_another_live_worker(tmp_path: Path) -> None:
    """A second worker on the same --state-dir is told to use its own, not to move the
    directory away (which would throw the first worker's checkpoints away)."""
    db = tmp_path / "state" / "missing.rocksdb"
    db.parent.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time, rocksdict
        db = rocksdict.Rdict({str(db)!r})
        print("open", flush=True)
        time.sleep(120)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "open"
        done = subprocess.run(
            [sys.executable, "-m", "streamremat", "worker", APP, "--state-dir",
             str(tmp_path / "state"), "--bootstrap", "127.0.0.1:1"],
            cwd=REPO, capture_output=True, text=True, timeout=60,
        )
    finally:
        holder.kill()
        holder.wait()
    assert done.returncode == 2, done.stderr
    assert "in use by another live worker" in done.stderr, done.stderr
    assert "its own --state-dir" in done.stderr and "move it away" not in done.stderr
