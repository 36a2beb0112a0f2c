"""Tasks of tests/test_scaleout.py, in a module of their own: a worker process (or Ray
worker) that runs them imports this and r2s2r.scaleout only, not the tests' heavy imports."""

from __future__ import annotations

import os
from pathlib import Path


def marker(root: str) -> Path:
    return Path(root)


def square_or_die_once(root: Path, i: int) -> tuple[int, int]:
    """i * i; task 2 kills its own worker process the first time it runs."""
    if i == 2 and not (root / "died").exists():
        (root / "died").touch()
        os._exit(1)
    return i * i, os.getpid()


def fails(root: Path, i: int) -> int:
    if i == 1:
        raise ValueError("task one is broken")
    return i


def always_die(root: Path, i: int) -> int:
    os._exit(1)
