"""The README's operator example runs as written (it asserts its own result)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_example_runs() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    example = next(b for b in blocks if "TestDriver" in b)
    namespace: dict[str, object] = {}
    exec(compile(example, str(README), "exec"), namespace)
    assert "driver" in namespace


def test_quickstart_is_two_commands() -> None:
    text = README.read_text()
    quickstart = text.split("## Quickstart", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    commands = [line for line in quickstart.splitlines() if line.strip()]
    assert [c.split("#")[0].strip() for c in commands] == ["make demo", "make test"]
