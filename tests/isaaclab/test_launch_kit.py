"""``tasks/_launch.py`` against the real Isaac Lab 3.0 (``make test-isaaclab``, in
``.venv-isaaclab``): the launcher arguments the render script hands to
``isaaclab.app.launch_simulation`` make Isaac Lab decide that Kit is needed, and without
Isaac Sim its Kit launcher stops with its own message (Isaac Sim cannot be installed here)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# ``isaaclab.app``, not ``isaaclab``: with tests/ on the path this folder is itself a
# namespace package named ``isaaclab``.
pytest.importorskip("isaaclab.app", reason="Isaac Lab runs in .venv-isaaclab (make test-isaaclab)")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tasks"))
from _launch import launcher_args, strip_launcher_flags  # noqa: E402


def test_the_render_scripts_launch_arguments_require_kit() -> None:
    from isaaclab.app.sim_launcher import validate_launch

    _, flags = strip_launcher_flags(["DATASET", "--out", "x", "--livestream", "2"])
    args = {"headless": True, "enable_cameras": True, **launcher_args(flags), "require_kit": True}
    _, kit_sources = validate_launch(None, args)
    # --livestream adds a Kit visualizer of its own.
    assert "the caller's explicit Kit requirement" in kit_sources


def test_without_isaac_sim_the_kit_launch_stops_with_isaac_labs_message() -> None:
    import importlib.util

    from isaaclab.app import launch_simulation

    if importlib.util.find_spec("isaacsim") is not None:
        pytest.skip("Isaac Sim is installed here")
    with (
        pytest.raises(SystemExit),
        launch_simulation(None, {"headless": True, "require_kit": True}),
    ):
        pass
