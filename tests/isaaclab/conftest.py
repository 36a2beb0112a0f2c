"""Fixtures of the tests that need Isaac Lab (run by `make test-isaaclab` in .venv-isaaclab).

The user's config folder is a temporary one holding a grounded world (the nominal world with
the belt and wrist focal lengths moved the way grounding moves them), so that both world
variants build; the recorded demo is the core's scripted picker on the core's MuJoCo cell.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("isaaclab", reason="needs Isaac Lab: make isaaclab-setup; make test-isaaclab")

_ROOT = Path(__file__).resolve().parents[2]
_found = importlib.util.find_spec("r2s2r_isaaclab")
if _found is None or _found.origin is None:
    # Not installed (or only source/r2s2r_isaaclab, the project folder, seen as a namespace
    # package): run from the source tree.
    sys.path.insert(0, str(_ROOT / "source" / "r2s2r_isaaclab"))
    sys.modules.pop("r2s2r_isaaclab", None)

from r2s2r.paths import CONFIG_DIR_ENV  # noqa: E402
from r2s2r.spec.worlds import load_world, world_at  # noqa: E402

# Where the grounded world of these tests differs from the nominal one.
BELT_SHIFT = (0.024, -0.018, 0.014)
WRIST_FX = 252.0


@pytest.fixture(scope="session", autouse=True)
def grounded_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("config")
    nominal = load_world("nominal")
    belt = nominal.layout.belt
    moved = belt.replace(pos=tuple(p + d for p, d in zip(belt.pos, BELT_SHIFT, strict=True)))
    cams = {
        name: cam.replace(fx=WRIST_FX, fy=WRIST_FX) if cam.model == "fisheye" else cam
        for name, cam in nominal.cameras.items()
    }
    grounded = nominal.replace(
        name="grounded", layout=nominal.layout.replace(belt=moved), cameras=cams
    )
    (root / "world").mkdir()
    grounded.save(root / "world" / "grounded.yaml")
    old = os.environ.get(CONFIG_DIR_ENV)
    os.environ[CONFIG_DIR_ENV] = str(root)
    yield root
    if old is None:
        os.environ.pop(CONFIG_DIR_ENV, None)
    else:
        os.environ[CONFIG_DIR_ENV] = old


@dataclass(frozen=True)
class Demo:
    """A recorded demo: its dataset and what the core's env saw."""

    root: Path
    actions: np.ndarray  # (T, A)
    tcp: np.ndarray  # (T, S, 7) after each step
    object_pos: np.ndarray  # (T, 3) the presented object after each step
    objects: list[str]
    spawn: tuple[float, np.ndarray, np.ndarray]
    success: bool


@pytest.fixture(scope="session")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Demo:
    """The scripted picker's episode 0 in the core's MuJoCo cell, recorded with 64 px views
    and the object's pose into an r2s2r dataset (lossless video)."""
    from r2s2r.data.config import CameraCfg, DatasetCfg, VideoCfg
    from r2s2r.data.writer import DatasetWriter
    from r2s2r.sim.env import PickSortEnv
    from r2s2r.sim.scripted import ScriptedPicker

    world = world_at(64)
    env = PickSortEnv(world=world, images=True, env_state=True)
    obs, info = env.reset(seed=0)
    picker = ScriptedPicker(env)
    picker.reset(obs, info)
    cell = env.cell
    spawn = (float(cell.belt_speed[0]), cell.spawn_xy[0, :, 1].copy(), cell.spawn_yaw[0].copy())
    cams = tuple(CameraCfg(name=n, height=64, width=64) for n in env.contract.cameras)
    cfg = DatasetCfg(cameras=cams, env_state=True, video=VideoCfg(lossless=True))
    root = tmp_path_factory.mktemp("demo") / "ds"
    actions, tcp, object_pos = [], [], []
    with DatasetWriter(root, cfg) as writer:
        while True:
            action = picker.act(obs, info)
            writer.add_frame(
                obs["images"], env.contract.state(obs), action, env_state=obs["environment_state"]
            )
            obs, _, terminated, truncated, info = env.step(action)
            actions.append(action)
            tcp.append(obs["tcp_pose"].copy())
            object_pos.append(info["object_pos"][0].copy())
            if terminated or truncated:
                break
        writer.save_episode(
            env._instruction,
            bool(info["success"]),
            {
                "world": "nominal",
                "behavior": "scripted",
                "seed": 0,
                "belt_speed": spawn[0],
                "object_ids": [str(info["object_names"][0])],
            },  # fmt: skip
        )
    env.close()
    return Demo(
        root,
        np.array(actions),
        np.array(tcp),
        np.array(object_pos),
        list(info["object_names"]),
        spawn,
        bool(info["success"]),
    )


@pytest.fixture(scope="session")
def core_python() -> Path:
    """The core venv's interpreter (``make setup``'s .venv, or $R2S2R_CORE_PYTHON), which
    runs MuJoCo 4; the test is skipped without one."""
    env = os.environ.get("R2S2R_CORE_PYTHON")
    path = Path(env) if env else _ROOT / ".venv" / "bin" / "python"
    if not path.is_file():
        pytest.skip("no core venv (.venv from make setup, or set R2S2R_CORE_PYTHON)")
    return path
