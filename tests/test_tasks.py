"""The entry scripts in ``tasks/``: Isaac Lab's launcher flags split from the scripts' own,
and each script run as a user runs it (``python tasks/X.py`` with the flags Isaac Lab users
pass) as a real subprocess. ``tasks/generate.py`` runs in the panel's tests
(``test_panel.py``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from r2s2r.data import Dataset

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tasks"))
from _launch import launcher_args, strip_launcher_flags  # noqa: E402


def run_script(name: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "source"), "MUJOCO_GL": "egl"}
    return subprocess.run(
        [sys.executable, str(ROOT / "tasks" / name), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


def test_launcher_flags_are_split_from_the_scripts_own_and_parsed() -> None:
    argv = [
        "--headless",
        "--out",
        "x",
        "--livestream",
        "2",
        "--kit_args=--ext-folder=/e",
        "--device",
        "cuda:1",
        "--viz",
        "kit",
        "--enable_cameras",
        "--episodes",
        "3",
    ]
    ours, flags = strip_launcher_flags(argv)
    # --device is r2s2r train's own option, not taken for Kit.
    assert ours == ["--out", "x", "--device", "cuda:1", "--episodes", "3"]
    assert flags == [
        "--headless",
        "--livestream",
        "2",
        "--kit_args=--ext-folder=/e",
        "--viz",
        "kit",
        "--enable_cameras",
    ]
    assert launcher_args(flags) == {
        "headless": True,
        "enable_cameras": True,
        "livestream": 2,
        "kit_args": "--ext-folder=/e",
        "visualizer": "kit",
    }
    with pytest.raises(ValueError, match="not Isaac Lab launcher flags"):
        launcher_args(["--out", "x"])


def test_train_and_evaluate_scripts_reach_their_commands_with_launcher_flags() -> None:
    train = run_script("train.py", "--headless", "--enable_cameras", "--help")
    assert train.returncode == 0, train.stderr
    assert "ignoring Isaac Lab launcher flags ['--headless', '--enable_cameras']" in train.stdout
    assert "--preset" in train.stdout and "--real" in train.stdout
    evaluate = run_script("evaluate.py", "--livestream", "2", "--help")
    assert evaluate.returncode == 0, evaluate.stderr
    assert "--policy" in evaluate.stdout and "--protocol" in evaluate.stdout
    # An error in the command's own input ends with its message and status 2.
    bad = run_script("train.py", "--headless", "--preset", "no_such_preset", "--out", "/tmp/x")
    assert bad.returncode != 0 and "no_such_preset" in bad.stdout + bad.stderr


def test_record_script_records_the_twin_under_launcher_flags(tmp_path: Path) -> None:
    out = tmp_path / "demos"
    args = ["--headless", "--enable_cameras", "--out", str(out), "--episodes", "1"]
    result = run_script("record.py", *args, "--image-size", "0", "--max-seconds", "0.6")
    assert result.returncode == 0, result.stderr
    assert "saved 1 episodes" in result.stdout
    with Dataset(out) as ds:
        assert ds.num_episodes == 1 and len(ds) == 30


def test_render_isaac_script_renders_with_mujoco_and_refuses_isaac_without_it(
    recorded_demos: Path, tmp_path: Path
) -> None:
    out = tmp_path / "views"
    args = [str(recorded_demos), "--out", str(out), "--episodes", "1", "--image-size", "32"]
    result = run_script("render_isaac.py", *args, "--renderer", "mujoco", "--headless")
    assert result.returncode == 0, result.stderr
    with Dataset(out) as ds, Dataset(recorded_demos) as src:
        assert ds.num_episodes == 1 and len(ds) == src.episode(1)["length"]
        assert {c.name: (c.height, c.width) for c in ds.cameras} == {
            "head": (32, 32),
            "left_wrist": (32, 32),
            "right_wrist": (32, 32),
        }
    usd = tmp_path / "cell.usda"
    usd.write_text("#usda 1.0\n")
    isaac = run_script("render_isaac.py", *args, "--usd", str(usd), "--headless")
    if isaac.returncode == 0:
        pytest.fail("rendered with Isaac Sim: this test expects a machine without it")
    assert isaac.returncode == 2 and "Isaac Sim is not installed" in isaac.stderr
    missing = run_script("render_isaac.py", *args, "--usd", str(tmp_path / "none.usd"))
    assert missing.returncode == 2 and "needs --usd CELL.usd" in missing.stderr
