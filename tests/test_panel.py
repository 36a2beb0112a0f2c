"""The Isaac Sim panel's Kit-free state (``exts/r2s2r.panel/r2s2r_panel/state.py``): a world
YAML's parameters beside the nominal world's, a headless generation launched as a real
process and followed to its end (then resumed), a dataset's episodes and frames, and the
render job's command line and progress."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pytest

from r2s2r.data import Dataset
from r2s2r.rig.twin.truth import true_world
from r2s2r.spec import SpecError
from r2s2r.spec.worlds import load_world

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "exts" / "r2s2r.panel"))
import r2s2r_panel  # noqa: E402
from r2s2r_panel.state import PanelState, flatten  # noqa: E402


@pytest.fixture(scope="module")
def grounded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A WorldSpec YAML like the one grounding writes: the twin's hidden world (its cameras,
    belt and arm placement, controller and hand gains differ from nominal)."""
    path = tmp_path_factory.mktemp("world") / "grounded.yaml"
    true_world(load_world("nominal"), np.random.default_rng(0), hand_dof=20).save(path)
    return path


def test_the_panel_package_imports_without_kit() -> None:
    assert not hasattr(r2s2r_panel, "R2s2rPanelExtension")  # Kit-only, not loaded here.


def test_a_world_yaml_shows_its_parameters_beside_nominal(grounded: Path) -> None:
    state = PanelState()
    assert "nominal" in state.world_choices() and "grounded" in state.world_choices()
    assert {"nominal", "red_light", "all_shifts"} <= set(state.condition_choices())
    state.select(str(grounded), "red_light")
    rows = state.load_world()
    by_key = {r.key: r for r in rows}
    saved = flatten(load_world(grounded).model_dump(mode="json"))
    nominal = flatten(load_world("nominal").model_dump(mode="json"))
    fx = "cameras.left_wrist.fx"
    assert fx in by_key, sorted(by_key)[:20]
    assert by_key[fx].value == saved[fx] and by_key[fx].nominal == nominal[fx]
    assert by_key[fx].differs
    diffs = {r.key for r in state.differences()}
    assert any(k.startswith("layout.belt") for k in diffs)
    # The condition applies to both columns: both lights are red, unlike the nominal world's.
    rgb = by_key["lighting.rgb"]
    assert rgb.value == rgb.nominal != nominal["lighting.rgb"]
    with pytest.raises(SpecError, match="condition"):
        state.select("nominal", "purple_light")
    with pytest.raises(SpecError, match="WorldSpec YAML"):
        state.select("no_such_world", "nominal")


def wait_for(state: PanelState, kind: str, timeout: float = 240.0) -> list:
    seen = []
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        status = state.status(kind)
        assert status is not None
        seen.append(status)
        if not status.running:
            return seen
        time.sleep(0.5)
    state.cancel(kind)
    pytest.fail(f"the {kind} job did not end in {timeout} s: {seen[-1]}")


def test_generation_runs_headless_in_its_own_process_and_is_followed(tmp_path: Path) -> None:
    state = PanelState()
    state.select("nominal", "nominal")
    out = tmp_path / "gen"
    cmd = state.generation_command(out, 1, behavior="planned", max_attempts=2)
    assert cmd[1].endswith("tasks/generate.py") and "--headless" in cmd
    world_yaml = Path(cmd[cmd.index("--world") + 1])
    assert load_world(world_yaml) == state.loaded
    job = state.start_generation(out, 1, behavior="planned", max_attempts=2)
    with pytest.raises(RuntimeError, match="a generate job is running"):
        state.start_generation(out, 1, behavior="planned", max_attempts=2)
    seen = wait_for(state, "generate")
    final = seen[-1]
    assert final.returncode == 0, final.log_tail
    # One of the two attempts it may make succeeds (most of the nominal world's planned
    # attempts do; which one is up to the physics).
    attempts = int(final.message.removeprefix("attempted="))
    assert (final.done, final.total) == (1, 1) and final.message == f"attempted={attempts}"
    assert attempts in (1, 2)
    assert final.fraction == 1.0 and any(f"kept 1 of {attempts}" in ln for ln in final.log_tail)
    assert job.log.is_file()
    # Browsing what it made.
    (row,) = state.episodes(out)
    assert row.success and row.behavior == "planned" and row.world == world_yaml.stem
    assert row.length > 100 and row.objects
    # Starting the finished job again resumes it: nothing more to do.
    state.start_generation(out, 1, behavior="planned", max_attempts=2)
    again = wait_for(state, "generate")[-1]
    assert again.returncode == 0 and again.done == 1
    assert again.message == f"attempted={attempts}"


def test_episodes_and_frames_of_a_dataset(recorded_demos: Path) -> None:
    rows = PanelState.episodes(recorded_demos)
    with Dataset(recorded_demos) as ds:
        assert [r.index for r in rows] == list(range(ds.num_episodes))
        assert [r.length for r in rows] == [ds.episode(i)["length"] for i in range(3)]
        img = PanelState.preview(recorded_demos, 1, "left_wrist", 10)
        want = ds.image("observation.images.left_wrist", ds.episode(1)["dataset_from_index"] + 10)
    np.testing.assert_array_equal(img, want)
    assert rows[0].world == "twin" and rows[0].behavior == "teleop" and rows[0].seconds == 1.5
    with pytest.raises(ValueError, match="no camera 'top'"):
        PanelState.preview(recorded_demos, 0, "top")
    with pytest.raises(ValueError, match="episode 9 is not in"):
        PanelState.preview(recorded_demos, 9)


def test_render_job_runs_the_render_script_and_is_followed(
    recorded_demos: Path, tmp_path: Path
) -> None:
    state = PanelState()
    out = tmp_path / "rtx"
    cmd = state.render_command(recorded_demos, out, tmp_path / "cell.usd")
    assert cmd[1].endswith("tasks/render_isaac.py") and cmd[-2:] == [
        "--headless",
        "--enable_cameras",
    ]
    assert cmd[cmd.index("--renderer") + 1] == "isaac"
    assert cmd[cmd.index("--usd") + 1] == str(tmp_path / "cell.usd")
    # Isaac Sim is not here: the same job with MuJoCo's renderer, followed to its end.
    state.start_render(recorded_demos, out, None, image_size=32, renderer="mujoco")
    final = wait_for(state, "render")[-1]
    assert final.returncode == 0, final.log_tail
    assert (final.done, final.total) == (3, 3)
    # And the Isaac job fails with the reason in its log.
    state.start_render(recorded_demos, tmp_path / "isaac", tmp_path / "cell.usd")
    failed = wait_for(state, "render")[-1]
    assert failed.failed and any("needs --usd" in line for line in failed.log_tail)
