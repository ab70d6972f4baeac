"""Fetch the Apache Kafka broker jars from Maven Central, once, into a cache.

The cache is ``$STREAMREMAT_HOME/kafka-<version>/libs`` (``STREAMREMAT_HOME``
defaults to ``~/.cache/streamremat``). A marker file is written only after a
complete fetch, so an interrupted fetch is redone rather than trusted.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path

from streamremat.dev.exceptions import JarFetchError, MissingToolError

KAFKA_VERSION = "3.9.1"
_MARKER = ".fetch-complete"
_REPO_POM = Path(__file__).resolve().parents[2] / "deploy" / "kafka" / "pom.xml"


def default_home() -> Path:
    """``$STREAMREMAT_HOME`` or ``~/.cache/streamremat``."""
    env = os.environ.get("STREAMREMAT_HOME")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "streamremat"


def libs_dir(home: Path) -> Path:
    return home / f"kafka-{KAFKA_VERSION}" / "libs"


def is_fetched(home: Path) -> bool:
    return (libs_dir(home) / _MARKER).is_file()


def pom_path() -> Path:
    """The repository's ``deploy/kafka/pom.xml``, else the copy shipped in the package."""
    if _REPO_POM.is_file():
        return _REPO_POM
    return Path(str(resources.files("streamremat.dev").joinpath("kafka-pom.xml")))


def require_tool(name: str, purpose: str) -> str:
    """Path of executable ``name`` on PATH, or a MissingToolError saying what to install."""
    found = shutil.which(name)
    if found is None:
        hints = {
            "java": "install a JDK/JRE 11+ (e.g. `apt-get install openjdk-17-jre-headless`)",
            "mvn": "install Maven (e.g. `apt-get install maven`)",
        }
        hint = hints.get(name, f"install {name}")
        raise MissingToolError(f"`{name}` not found on PATH; it is needed {purpose}. Fix: {hint}.")
    return found


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Exclusive advisory lock, so concurrent starts/fetches don't race."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def ensure_jars(home: Path) -> Path:
    """Return the libs directory, fetching the jars with Maven if not cached yet."""
    target = libs_dir(home)
    if is_fetched(home):
        return target
    with file_lock(target.parent / ".fetch.lock"):
        if is_fetched(home):  # another process finished the fetch while we waited
            return target
        mvn = require_tool("mvn", f"once, to fetch the Kafka {KAFKA_VERSION} jars into {target}")
        staging = Path(tempfile.mkdtemp(prefix="libs-", dir=target.parent))
        try:
            _run_maven(mvn, staging)
            (staging / _MARKER).write_text(KAFKA_VERSION + "\n")
            shutil.rmtree(target, ignore_errors=True)
            staging.rename(target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target


def _run_maven(mvn: str, output_dir: Path) -> None:
    cmd = [
        mvn, "-q", "-B", "-f", str(pom_path()),
        "dependency:copy-dependencies",
        f"-DoutputDirectory={output_dir}",
        "-DincludeScope=runtime",
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0 or not any(output_dir.glob("kafka_*.jar")):
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-30:])
        raise JarFetchError(
            f"Maven could not fetch the Kafka jars (exit {done.returncode}); "
            f"check network access to Maven Central.\n$ {' '.join(cmd)}\n{tail}"
        )
