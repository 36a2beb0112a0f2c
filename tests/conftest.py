"""Shared fixtures and the slow tests' time limit. Rendering is headless (EGL) in every test."""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("PYOPENGL_PLATFORM", "egl")

try:
    import r2s2r  # noqa: F401
except ImportError:  # Not installed: run from the source tree.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "source"))

import pytest

from r2s2r.spec import TaskSpec, WorldSpec
from r2s2r.spec.worlds import load_task, load_world

# pytest-timeout's limit for tests marked slow or long, in seconds (others: ``timeout`` in
# pyproject.toml); a test's own ``@pytest.mark.timeout`` wins over both.
SLOW_TIMEOUT_S = 1200


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        slow = item.get_closest_marker("slow") or item.get_closest_marker("long")
        if slow and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT_S))


@pytest.fixture(scope="session")
def task() -> TaskSpec:
    return load_task("pick_sort")


@pytest.fixture(scope="session")
def world() -> WorldSpec:
    return load_world("nominal")


@pytest.fixture(scope="session")
def recorded_demos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three short takes of the twin's scripted operator, recorded with 64 px views: the real
    recording path, small enough for policy tests (about 30 s on 2 cores)."""
    from r2s2r.app.record import RecordRequest, record

    out = tmp_path_factory.mktemp("demos") / "ds"
    record(RecordRequest(out=out, episodes=3, seed=1, image_size=64, max_seconds=1.5))
    return out
