"""The documentation's Python examples run as written: the README's, and each page of
``docs/extending/`` (every ``python`` block of a page, in order, as one script in a fresh
interpreter, so a later block may use what an earlier one defined and what a page registers
never leaks into another page or into this process's registries)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXTENDING = ROOT / "docs" / "extending"
# A fenced block that opens with ```python at the start of a line; its body up to the fence.
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.M | re.S)


def python_blocks(page: Path) -> list[str]:
    return PYTHON_BLOCK.findall(page.read_text())


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(EXTENDING.glob("*.md"))]


def run_page(page: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    # A script file rather than ``python -c``: the twin's view workers are spawned, and a
    # spawned process imports its parent's main module (a page's code runs under
    # ``if __name__ == "__main__":`` for that reason).
    script = tmp_path / f"{page.stem}.py"
    body = "\n\n".join(python_blocks(page))
    indented = "".join(f"    {line}\n" if line.strip() else "\n" for line in body.splitlines())
    script.write_text(f"def main():\n{indented}\n\nif __name__ == '__main__':\n    main()\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "source"), "MUJOCO_GL": "egl"}
    return subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=400,
    )


def test_the_pages_with_examples_are_the_ones_expected() -> None:
    with_code = {p.name for p in pages() if python_blocks(p)}
    expected = {"README.md", "world.md", "condition.md", "behavior.md", "planner.md"}
    expected |= {"policy.md", "robot.md"}
    assert with_code == expected


@pytest.mark.parametrize("page", [p for p in pages() if python_blocks(p)], ids=lambda p: p.stem)
def test_a_pages_examples_run(page: Path, tmp_path: Path) -> None:
    result = run_page(page, tmp_path)
    assert result.returncode == 0, (
        f"{page.relative_to(ROOT)}: its python blocks failed\n{result.stdout}\n{result.stderr}"
    )
