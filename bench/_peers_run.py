"""bench/peers.py: running one engine and reading what it did.

An engine runs as its own process (``Run``); the harness measures its group's
committed offsets, the bytes of its internal topics and local state, and reads
its final window results for the cross-check against ``raw_job.py``.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from streamremat.runtime.kafka import (  # noqa: E402
    admin_client,
    consume_all,
    end_offsets,
    list_topics,
)

JOBS = ROOT / "bench" / "peers"
PEERS_VENV = ROOT / ".venv-peers"
MAIN_PY = sys.executable
PARTITIONS = 4
WINDOW_MS = 60_000
#: the re-keyed job's grace: more than the 10 windows the input spans
REKEY_GRACE_MS = 12 * WINDOW_MS
#: ``faust-streamremat``: a faust app with a streamremat operator (issue 13), run in the
#: main venv (it needs streamremat; faust is in the ``faust`` and ``dev`` extras)
ENGINES = ("raw", "streamremat", "quix", "faust", "faust-streamremat")
PEER_MODULES = {"quix": "quixstreams", "faust": "faust", "faust-streamremat": "faust"}
SMALL_EVENTS = 20_000

Windows = dict[tuple[str, int], tuple[int, int]]  # (key, start_ms) -> (count, sum)



def peers_python() -> Path:
    return PEERS_VENV / "bin" / "python"


def engine_python(engine: str) -> Path:
    """The interpreter of an engine's job. faust runs from ``.venv-peers`` when made,
    else from the main venv: its ``faust`` extra pins the same faust-streaming,
    rocksdict and aiokafka as ``bench/peers/requirements.txt``."""
    if engine == "faust-streamremat" or (engine == "faust" and not peers_python().exists()):
        return Path(MAIN_PY)
    return peers_python()



# -- measuring -----------------------------------------------------------------


async def committed(admin: Any, group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets on ``topic``; {} while the group has no coordinator."""
    try:
        offsets = await admin.list_consumer_group_offsets(group)
    except Exception:  # coordinator not there yet, group unknown: nothing committed
        return {}
    return {tp.partition: om.offset for tp, om in offsets.items()
            if tp.topic == topic and om.offset >= 0}


def dir_bytes(path: Path) -> int:
    total = 0
    for p in path.rglob("*"):
        with contextlib.suppress(OSError):
            if p.is_file():
                total += p.stat().st_size
    return total


async def topic_bytes(bootstrap: str, topic: str, log_dir: Path | None) -> tuple[int, int, str]:
    """(bytes, records written, method) of one topic."""
    ends = await end_offsets(bootstrap, topic)
    if log_dir is not None and log_dir.is_dir():
        size = sum(dir_bytes(d) - _index_bytes(d) for d in log_dir.glob(f"{topic}-*")
                   if re.fullmatch(re.escape(topic) + r"-\d+", d.name))
        return size, sum(ends.values()), "broker log segments"
    records = await consume_all(bootstrap, topic, isolation_level="read_uncommitted",
                                timeout_s=300)
    size = sum(len(r.key or b"") + len(r.value or b"")
               + sum(len(k) + len(v) for k, v in r.headers) for r in records)
    return size, sum(ends.values()), "record keys+values (no broker log dir)"


def _index_bytes(d: Path) -> int:
    return sum(p.stat().st_size for p in d.iterdir()
               if p.suffix in (".index", ".timeindex", ".txnindex"))


def checkpoint_topic(group: str) -> str:
    """The replica topic of a streamremat App named ``group`` (as the bench names it)."""
    return f"streamremat-{group}-checkpoints"


def state_topics(engine: str, group: str, topics: list[str]) -> list[str]:
    """The engine's internal topics: changelogs or checkpoints, and repartition topics."""
    if engine == "streamremat":
        return [t for t in topics if t in (checkpoint_topic(group),
                                           f"streamremat-{group}-win-repartition")]
    if engine == "quix":
        return [t for t in topics if t.startswith((f"changelog__{group}",
                                                   f"repartition__{group}"))]
    if engine == "faust":
        return [t for t in topics if t.startswith(f"{group}-")
                and t.endswith(("-changelog", "-repartition"))]
    if engine == "faust-streamremat":  # faust itself writes no changelog there
        return [t for t in topics if t == checkpoint_topic(group)
                or (t.startswith(f"{group}-") and t.endswith("-changelog"))]
    return []


# -- engines -------------------------------------------------------------------


@dataclass
class Run:
    engine: str
    bootstrap: str
    topic: str
    group: str
    state_dir: Path
    log_path: Path
    commit_interval: float
    checkpoint_interval: float
    rekey: bool = False
    proc: subprocess.Popen[bytes] | None = None
    logs: list[Path] = field(default_factory=list)
    #: identical copies of a result read so far (at-least-once engines only)
    duplicates: int = 0

    @property
    def output(self) -> str:
        return f"{self.group}-out"

    def command(self) -> tuple[list[str], dict[str, str], Path]:
        env = dict(os.environ, PEERS_GROUP_BY="shop" if self.rekey else "",
                   PEERS_GRACE_MS=str(REKEY_GRACE_MS if self.rekey else 0))
        if self.engine == "streamremat":
            env.update(PEERS_INPUT=self.topic, PEERS_OUTPUT=self.output, PEERS_APP=self.group)
            cmd = [
                MAIN_PY, "-m", "streamremat", "worker", "streamremat_job:app",
                "--bootstrap", self.bootstrap, "--group-id", self.group,
                "--state-dir", str(self.state_dir), "--guarantee", "exactly_once",
                "--checkpoint-policy", "fixed",
                "--checkpoint-interval", str(self.checkpoint_interval),
                "--commit-interval", str(self.commit_interval),
            ]
            return cmd, env, JOBS
        script = {"quix": "quix_job.py", "faust": "faust_job.py",
                  "faust-streamremat": "faust_streamremat_job.py"}[self.engine]
        cmd = [str(engine_python(self.engine)), str(JOBS / script), self.bootstrap, self.topic,
               self.output, self.group, str(self.state_dir), str(self.commit_interval)]
        if self.engine == "faust-streamremat":
            cmd.append(str(self.checkpoint_interval))
            env["PYTHONPATH"] = str(ROOT)
        return cmd, env, self.state_dir

    def start(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        cmd, env, cwd = self.command()
        log = self.log_path.with_suffix(f".{len(self.logs)}.log")
        self.logs.append(log)
        with log.open("wb") as f:
            self.proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=f, stderr=subprocess.STDOUT,
                                         start_new_session=True)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.proc = None

    def check_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            tail = self.logs[-1].read_text(errors="replace")[-3000:]
            raise RuntimeError(f"{self.engine} exited with {self.proc.returncode}:\n{tail}")

    async def wait_for(self, target: dict[int, int], cap_s: float) -> dict[str, Any]:
        """Poll the group's committed offsets until they reach ``target``."""
        started = time.monotonic()
        total = sum(target.values())
        async with admin_client(self.bootstrap) as admin:
            return await self._poll(admin, target, cap_s, started, total)

    async def _poll(self, admin: Any, target: dict[int, int], cap_s: float, started: float,
                    total: int) -> dict[str, Any]:
        first: tuple[float, int] | None = None
        last: tuple[float, int] = (started, 0)
        while True:
            self.check_alive()
            now_c = await committed(admin, self.group, self.topic)
            now = time.monotonic()
            done = sum(min(now_c.get(p, 0), end) for p, end in target.items())
            if done > 0 and first is None:
                first = (now, done)
            if done != last[1]:
                last = (now, done)
            if all(now_c.get(p, 0) >= end for p, end in target.items()):
                return {"done": done, "total": total, "capped": False, "first": first,
                        "last": last, "started": started}
            if now - started > cap_s:
                return {"done": done, "total": total, "capped": True, "first": first,
                        "last": last, "started": started}
            await asyncio.sleep(0.1)


def throughput_of(w: dict[str, Any]) -> float | None:
    first, last = w["first"], w["last"]
    if first is None:
        return None
    if last[0] <= first[0]:
        # Everything committed at once (a small run): the rate since the process
        # started, start-up included, is all that can be said.
        elapsed = float(last[0] - w["started"])
        return float(last[1]) / elapsed if elapsed > 0 else None
    return float(last[1] - first[1]) / float(last[0] - first[0])


# -- results -------------------------------------------------------------------


async def engine_windows(run: Run) -> Windows:
    """The final window results an engine produced so far."""
    if run.engine == "faust":
        return await faust_windows(run)
    out: Windows = {}
    # at-least-once (docs/faust.md): a copy is allowed if byte-identical
    copies = run.engine == "faust-streamremat"
    seen: dict[tuple[str, int], bytes | None] = {}
    for r in await consume_all(run.bootstrap, run.output, isolation_level="read_committed",
                               timeout_s=120):
        v = json.loads(r.value or b"null")
        key = _plain_key((r.key or b"").decode())
        if run.engine in ("streamremat", "faust-streamremat"):
            start, count, total = v["start_ms"], v["value"]["count"], v["value"]["sum"]
        else:  # quix
            start, count, total = v["start"], v["count"], v["sum"]
        if (key, start) in out:
            if not copies or seen[(key, start)] != r.value:
                raise AssertionError(f"{run.engine}: window {key} {start} emitted twice")
            run.duplicates += 1
            continue
        out[(key, start)] = (count, total)
        seen[(key, start)] = r.value
    return out


async def faust_windows(run: Run) -> Windows:
    """faust emits nothing on close: the last value per window key in its changelog."""
    out: Windows = {}
    topics = state_topics("faust", run.group, await list_topics(run.bootstrap))
    for topic in topics:
        for r in await consume_all(run.bootstrap, topic, isolation_level="read_committed",
                                   timeout_s=120):
            k = json.loads(r.key or b"null")
            # faust windowed keys: [key, [start_s, end_s]], the key as str(bytes): "b'...'"
            key, (start_s, _end) = k
            if isinstance(key, str) and key[:2] in ("b'", 'b"'):
                key = _plain_key(ast.literal_eval(key).decode())
            if r.value is None:
                out.pop((key, round(start_s * 1000)), None)
                continue
            count, total = json.loads(r.value)
            out[(key, round(start_s * 1000))] = (count, total)
    return out


def _plain_key(key: str) -> str:
    """Keys as the reference writes them: a JSON string key (streamremat's ``key_by``
    encoding) is compared by its text."""
    if key[:1] == '"':
        with contextlib.suppress(ValueError):
            return str(json.loads(key))
    return key


def compare(reference: Windows, got: Windows, engine: str,
            before_ms: int | None = None) -> dict[str, Any]:
    """``before_ms`` (re-keyed job): only windows starting before it count, both ways:
    near the end of the input, which windows closed depends on each repartition
    partition's stream time."""
    if before_ms is not None:
        reference = {k: v for k, v in reference.items() if k[1] < before_ms}
        got = {k: v for k, v in got.items() if k[1] < before_ms}
    missing = [k for k in reference if k not in got]
    wrong = [k for k in reference if k in got and got[k] != reference[k]]
    extra = [k for k in got if k not in reference]
    # faust keeps every window (no event-time close): extra = still-open windows, by design
    equal = not missing and not wrong and (engine == "faust" or not extra)
    return {"equal": equal, "reference_windows": len(reference), "missing": len(missing),
            "different": len(wrong), "extra": len(extra),
            "example": [[*k, list(got.get(k, ())), list(reference[k])]
                        for k in (wrong or missing)[:2]]}


def raw_reference(bootstrap: str, topic: str, with_windows: bool,
                  rekey: bool = False) -> dict[str, Any]:
    cmd = [MAIN_PY, str(JOBS / "raw_job.py"), bootstrap, topic]
    if with_windows:
        cmd.append("--windows")
    if rekey:
        cmd += ["--group-by", "shop", "--grace-ms", str(REKEY_GRACE_MS)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def replayed_records(run: Run) -> int | None:
    """streamremat only: records replayed by the restarted worker (from its log)."""
    if run.engine not in ("streamremat", "faust-streamremat") or len(run.logs) < 2:
        return None
    text = run.logs[-1].read_text(errors="replace")
    found = re.findall(r"replayed (\d+) records", text)
    return sum(int(x) for x in found) if found else 0
