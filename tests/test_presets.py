"""Presets ship inside the package; the user's config folder overrides them."""

from __future__ import annotations

import fnmatch
import json
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
import yaml

from r2s2r.paths import find_config, presets_dir, user_config_dir
from r2s2r.spec import SpecError
from r2s2r.spec.worlds import TASKS, WORLDS, load_task, load_world

REPO = Path(__file__).resolve().parents[1]
PRESETS = Path(str(presets_dir()))


def test_presets_load_from_the_package_without_a_user_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("R2S2R_CONFIG_DIR", str(tmp_path))
    assert user_config_dir() == tmp_path
    assert find_config("world", "nominal") == presets_dir() / "world" / "nominal.yaml"
    assert load_world("nominal").name == "nominal" and load_task("pick_sort").name == "pick_sort"
    assert WORLDS.names() == ("nominal", "grounded") and TASKS.names() == ("pick_sort",)
    # Grounding's output is never packaged: it is read from the user's folder only.
    with pytest.raises(SpecError, match=f"{tmp_path / 'world' / 'grounded.yaml'} is missing"):
        load_world("grounded")


def test_the_user_config_overrides_the_packaged_presets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "world").mkdir()
    data = yaml.safe_load((PRESETS / "world" / "nominal.yaml").read_text())
    data["name"] = "my_cad"
    (tmp_path / "world" / "nominal.yaml").write_text(yaml.safe_dump(data))
    data["name"] = "grounded"
    (tmp_path / "world" / "grounded.yaml").write_text(yaml.safe_dump(data))
    monkeypatch.setenv("R2S2R_CONFIG_DIR", str(tmp_path))
    assert load_world("nominal").name == "my_cad"
    assert load_world("grounded").name == "grounded"
    assert load_task("pick_sort") == TASKS.get("pick_sort")()  # Not overridden: packaged.
    # Without $R2S2R_CONFIG_DIR the user's folder is config/ in the working directory.
    monkeypatch.delenv("R2S2R_CONFIG_DIR")
    assert user_config_dir() == Path("config")


def test_a_wrong_name_gets_the_nearest_names() -> None:
    with pytest.raises(SpecError, match=r"unknown world 'nomnal'; did you mean 'nominal'\?"):
        load_world("nomnal")
    with pytest.raises(SpecError, match="unknown task 'pick_srot'; did you mean 'pick_sort'"):
        load_task("pick_srot")
    # A path is a path: a missing file says so rather than looking for a name.
    with pytest.raises(SpecError, match="no such WorldSpec file"):
        load_world("absent.yaml")


def test_package_data_covers_every_preset() -> None:
    patterns = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]["r2s2r"]
    files = [p.relative_to(PRESETS.parent).as_posix() for p in PRESETS.rglob("*") if p.is_file()]
    assert {"presets/task/pick_sort.yaml", "presets/world/nominal.yaml"} <= set(files)
    assert [f for f in files if not any(fnmatch.fnmatch(f, p) for p in patterns)] == []


@pytest.mark.slow
def test_a_built_wheel_ships_the_presets(tmp_path: Path) -> None:
    """Builds the wheel (pip fetches the build backend unless it is cached), then loads the
    presets from the unpacked package with an empty user config folder."""
    tree = tmp_path / "tree"
    for name in ("pyproject.toml", "README.md"):
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / name, tree / name)
    junk = shutil.ignore_patterns("__pycache__", "*.egg-info")
    shutil.copytree(REPO / "source", tree / "source", ignore=junk)
    shutil.copytree(REPO / "tools", tree / "tools", ignore=junk)
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(tree)],
        check=True,
    )
    (wheel,) = wheels.glob("r2s2r-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {"r2s2r/presets/task/pick_sort.yaml", "r2s2r/presets/world/nominal.yaml"} <= set(names)
    # The Studio (tools/) ships in the same wheel, with its entry point.
    assert "r2s2r_studio/window.py" in names
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "r2s2r-studio = r2s2r_studio.main:main" in zipfile.ZipFile(wheel).read(entry).decode()
    # The Isaac Lab extension beside the core in source/ is its own package.
    assert not [n for n in names if n.startswith("r2s2r_isaaclab")]
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    (tmp_path / "empty").mkdir()
    script = (
        "import json; from r2s2r.paths import find_config; "
        "from r2s2r.spec.worlds import load_task, load_world; "
        "print(json.dumps([str(find_config('world', 'nominal')), load_world('nominal').name, "
        "load_task('pick_sort').name]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        env={"PYTHONPATH": str(site), "R2S2R_CONFIG_DIR": str(tmp_path / "empty")},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found, world, task = json.loads(out)
    assert Path(found).is_relative_to(site) and (world, task) == ("nominal", "pick_sort")
