""".ci/ensure-tools, which `make test` runs first: the tools the suite needs are
installed (root with apt-get, as CI) or the run fails saying how; never a silent
skip of the Prometheus or compose tests. Runs the real script with a PATH of
stand-ins."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / ".ci" / "ensure-tools"
BASH = shutil.which("bash") or "/bin/bash"
CHMOD = shutil.which("chmod") or "/bin/chmod"


def _stub(bin_dir: Path, name: str, body: str = "exit 0") -> None:
    path = bin_dir / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


def _run(bin_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([BASH, str(SCRIPT)], env={"PATH": str(bin_dir)},
                          capture_output=True, text=True, timeout=60)


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    """A PATH with Java, Maven and docker-compose but no Prometheus, run by uid 1000."""
    d = tmp_path / "bin"
    d.mkdir()
    for name in ("java", "mvn", "docker-compose"):
        _stub(d, name)
    _stub(d, "id", "echo 1000")
    return d


def _with_prometheus(bin_dir: Path) -> None:
    for name in ("prometheus", "promtool"):
        _stub(bin_dir, name)


def _root_with_apt(bin_dir: Path, installs: str) -> Path:
    """Run as root with an apt-get stand-in that logs its calls (the returned file)
    and, on install, puts stand-ins of ``installs`` (command names) on the PATH."""
    log = bin_dir.parent / "apt.log"
    _stub(bin_dir, "id", "echo 0")
    _stub(bin_dir, "apt-get", f'echo "$@" >> {log}\n'
          f'case "$*" in *install*) for t in {installs}; do '
          f'printf "#!/bin/sh\\n" > {bin_dir}/$t; {CHMOD} +x {bin_dir}/$t; done;; esac')
    return log


def test_all_tools_present_is_quiet(bin_dir: Path) -> None:
    _with_prometheus(bin_dir)
    done = _run(bin_dir)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_missing_prometheus_fails_saying_how(bin_dir: Path) -> None:
    done = _run(bin_dir)
    assert done.returncode == 1
    assert "apt-get install -y --no-install-recommends prometheus" in done.stderr, done.stderr


def test_root_with_apt_installs_debian_prometheus(bin_dir: Path) -> None:
    """As on CI: apt-get update, then install the package, and the run goes on."""
    log = _root_with_apt(bin_dir, "prometheus promtool")
    done = _run(bin_dir)
    assert done.returncode == 0, done.stderr
    calls = log.read_text().splitlines()
    assert calls[0] == "update -qq"
    assert calls[1].split()[-1] == "prometheus" and "install" in calls[1].split()
    assert "installing Debian's prometheus for the tests" in done.stderr


def test_missing_java_fails_naming_it(bin_dir: Path) -> None:
    _with_prometheus(bin_dir)
    (bin_dir / "java").unlink()
    done = _run(bin_dir)
    assert done.returncode == 1
    assert "'java'" in done.stderr and "openjdk" in done.stderr, done.stderr


def test_missing_compose_fails_saying_how(bin_dir: Path) -> None:
    _with_prometheus(bin_dir)
    (bin_dir / "docker-compose").unlink()
    done = _run(bin_dir)
    assert done.returncode == 1
    assert "apt-get install -y --no-install-recommends docker-compose" in done.stderr, done.stderr


def test_dockers_compose_plugin_is_enough(bin_dir: Path) -> None:
    _with_prometheus(bin_dir)
    (bin_dir / "docker-compose").unlink()
    _stub(bin_dir, "docker", '[ "$1 $2" = "compose version" ]')
    done = _run(bin_dir)
    assert (done.returncode, done.stderr) == (0, "")


def test_root_with_apt_installs_both_packages(bin_dir: Path) -> None:
    (bin_dir / "docker-compose").unlink()
    log = _root_with_apt(bin_dir, "prometheus promtool docker-compose")
    done = _run(bin_dir)
    assert done.returncode == 0, done.stderr
    install = log.read_text().splitlines()[1].split()
    assert "install" in install and install[-2:] == ["prometheus", "docker-compose"], install
