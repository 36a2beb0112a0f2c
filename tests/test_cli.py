"""The r2s2r command line: entry points, the bench's JSON contract, clear failures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from r2s2r import __version__
from r2s2r.cli import app, headless_gl_default

runner = CliRunner()


def test_python_m_r2s2r_lists_the_subcommands() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "r2s2r", "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert "sim" in out and "version" in out
    assert runner.invoke(app, ["version"]).output.strip() == __version__


_GL_VARS = ("DISPLAY", "WAYLAND_DISPLAY", "MUJOCO_GL", "PYOPENGL_PLATFORM")


def test_importing_r2s2r_leaves_the_environment_alone() -> None:
    """No display and no MUJOCO_GL: the case where an import once chose EGL for the process.
    The command still can choose: importing it loads no mujoco, which reads MUJOCO_GL once."""
    env = {k: v for k, v in os.environ.items() if k not in _GL_VARS}
    code = (
        "import json, os, sys; before = dict(os.environ); import r2s2r, r2s2r.cli; "
        "print(json.dumps([before == dict(os.environ), sorted(set(os.environ) ^ set(before)), "
        "'mujoco' in sys.modules]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    ).stdout
    assert json.loads(out) == [True, [], False]


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({}, {"MUJOCO_GL": "egl", "PYOPENGL_PLATFORM": "egl"}),
        ({"MUJOCO_GL": "osmesa"}, {"MUJOCO_GL": "osmesa", "PYOPENGL_PLATFORM": "osmesa"}),
        ({"DISPLAY": ":0"}, {"DISPLAY": ":0"}),
        ({"WAYLAND_DISPLAY": "wayland-0"}, {"WAYLAND_DISPLAY": "wayland-0"}),
    ],
)
def test_the_command_renders_through_egl_without_a_display(
    given: dict[str, str], expected: dict[str, str]
) -> None:
    environ = {"HOME": "/home/x", **given}
    headless_gl_default(environ)
    assert environ == {"HOME": "/home/x", **expected}


def test_bench_json_has_the_documented_keys() -> None:
    result = runner.invoke(app, ["sim", "bench", "--json", "--seconds", "0.3", "--warp-sizes", ""])
    assert result.exit_code == 0, result.output
    figures = json.loads(result.output)
    for key in (
        "raw_steps_per_s",
        "env_physics_steps_per_s",
        "env_over_raw",
        "raw_renders_per_s",
        "env_renders_per_s",
        "render_over_raw",
        "fisheye_remap_ms",
        "machine",
    ):
        assert key in figures
    assert figures["raw_steps_per_s"] > 0 and figures["env_renders_per_s"] > 0
    assert figures["env_over_raw"] == pytest.approx(
        figures["env_physics_steps_per_s"] / figures["raw_steps_per_s"]
    )


def test_view_without_a_display_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    result = runner.invoke(app, ["sim", "view"])
    assert result.exit_code == 2
    assert "needs one" in result.output


def test_bad_input_fails_with_a_message_not_a_traceback(tmp_path) -> None:  # type: ignore[no-untyped-def]
    for args, message in (
        (["--condition", "foggy"], "unknown condition 'foggy'"),
        (["--condition", "red_lihgt"], "did you mean 'red_light'"),
        (["--world", "nomnal"], "did you mean 'nominal'"),
        (["--world", str(tmp_path / "absent.yaml")], "does not exist"),
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "r2s2r", "sim", "demo", "--out", str(tmp_path), *args],
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 2
        assert message in proc.stderr and "Traceback" not in proc.stderr
    proc = subprocess.run(
        [sys.executable, "-m", "r2s2r", "generate", "--out", str(tmp_path), "--planner", "cpuu"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "unknown planner 'cpuu'; did you mean 'cpu'?" in proc.stderr


def test_missing_warp_extra_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    import r2s2r.sim.warp_physics  # noqa: F401  (so that teardown restores it)

    monkeypatch.setitem(sys.modules, "mujoco_warp", None)  # Makes `import mujoco_warp` fail.
    monkeypatch.delitem(sys.modules, "r2s2r.sim.warp_physics")
    with pytest.raises(ImportError, match=r"pip install 'r2s2r\[warp\]'"):
        importlib.import_module("r2s2r.sim.warp_physics")


def test_export_writes_a_loadable_mjcf(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import mujoco

    from r2s2r.sim.scene import build_scene
    from r2s2r.spec.worlds import load_task, load_world

    out = tmp_path / "cell.xml"
    result = runner.invoke(app, ["sim", "export", "--out", str(out)])
    assert result.exit_code == 0, result.output
    exported = mujoco.MjModel.from_xml_path(str(out))
    built = build_scene(load_task("pick_sort"), load_world("nominal")).model
    assert (exported.nq, exported.nu, exported.ngeom, exported.ncam) == (
        built.nq,
        built.nu,
        built.ngeom,
        built.ncam,
    )
    data = mujoco.MjData(exported)
    mujoco.mj_step(exported, data, nstep=10)


def test_a_mujoco_3_export_drops_only_what_3x_refuses_and_simulates_the_same(
    tmp_path: Path,
) -> None:
    """``--mujoco 3``: no geom castshadow and no actuator input (MuJoCo 3.x's schema refuses
    both; tests/isaaclab loads the file in MuJoCo 3.12), the light's castshadow kept; in this
    MuJoCo the two files step the same."""
    import xml.etree.ElementTree as ET

    import mujoco
    import numpy as np

    four, three = tmp_path / "cell4.xml", tmp_path / "cell3.xml"
    for path, version in ((four, "4"), (three, "3")):
        result = runner.invoke(app, ["sim", "export", "--out", str(path), "--mujoco", version])
        assert result.exit_code == 0, result.output
    root = ET.parse(three).getroot()
    assert not [g for g in root.iter("geom") if "castshadow" in g.attrib]
    assert not [a for a in root.iter("general") if "input" in a.attrib]
    assert [light for light in root.iter("light") if "castshadow" in light.attrib]
    assert "castshadow" in {k for g in ET.parse(four).getroot().iter("geom") for k in g.attrib}
    models = [mujoco.MjModel.from_xml_path(str(p)) for p in (four, three)]
    datas = [mujoco.MjData(m) for m in models]
    rng = np.random.default_rng(0)
    low, high = models[0].actuator_ctrlrange.T
    for step in range(200):
        if step % 50 == 0:
            ctrl = rng.uniform(low, high)
        for model, data in zip(models, datas, strict=True):
            data.ctrl[:] = ctrl
            mujoco.mj_step(model, data)
    np.testing.assert_array_equal(datas[0].qpos, datas[1].qpos)
    result = runner.invoke(app, ["sim", "export", "--out", str(three), "--mujoco", "2"])
    assert result.exit_code != 0
