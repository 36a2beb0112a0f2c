"""Every world x condition x physics backend the project knows, as mujoco_playground tests
every registered environment: build it through the gymnasium registry, reset, hold a few
control steps; the observations stay finite and inside the observation space and nothing
diverges. The lists come from the project's registries (``WORLDS``, ``CONDITIONS``, ``PHYSICS``),
so a new world, condition or backend is covered (or fails here until it is)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import r2s2r  # noqa: F401  (registers the envs)
from r2s2r.sim.physics import PHYSICS
from r2s2r.spec import WorldSpec
from r2s2r.spec.conditions import CONDITIONS
from r2s2r.spec.worlds import WORLDS, load_world

ENV_ID = "R2S2R/PickSort-v0"
# Control steps held after the reset (0.1 s at 50 Hz).
STEPS = 5
# Worlds in the MuJoCo Warp batch.
WARP_WORLDS = 2
# How far (m) a TCP held where it is may move in those steps. It stays put (0 on MuJoCo C);
# a TCP target 0.2 m away moves it 6 mm, and a diverging simulation far more or to NaN.
HOLD_DRIFT_M = 1e-3


CASES = [
    pytest.param(w, c, p, id=f"{w}-{c}-{p}")
    for w in WORLDS.names()
    for c in CONDITIONS.names()
    for p in PHYSICS.names()
]


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A user's config folder holding a grounded world (the presets come from the package):
    the nominal WorldSpec with a few values changed, as grounding writes one."""
    root = tmp_path_factory.mktemp("config") / "config"
    (root / "world").mkdir(parents=True)
    data = load_world("nominal").model_dump(mode="json")
    data["name"] = "grounded"
    data["cameras"]["left_wrist"]["fx"] *= 1.02
    data["layout"]["belt"]["pos"] = [
        p + d for p, d in zip(data["layout"]["belt"]["pos"], (0.004, -0.003, 0.002), strict=True)
    ]
    data["controller"].update(kp_pos=1800.0, delay_s=0.006)
    grounded = WorldSpec.from_dict(data, source="grounded test world")
    grounded.save(root / "world" / "grounded.yaml")
    return root


def _make(world: str, condition: str, physics: str) -> gym.Env | gym.vector.VectorEnv:
    if physics == "mujoco":
        return gym.make(ENV_ID, world=world, condition=condition, physics=physics, images=False)
    if physics == "mujoco_warp":
        pytest.importorskip("mujoco_warp")
        return gym.make_vec(
            ENV_ID,
            num_envs=WARP_WORLDS,
            vectorization_mode="vector_entry_point",
            world=world,
            condition=condition,
            images=False,
        )
    raise AssertionError(f"no way to build physics {physics!r} here: add it to _make")


def _hold(obs: dict[str, Any]) -> np.ndarray:
    """Actions holding both TCPs and both hands where they are: (54,) or (N, 54)."""
    tcp = obs["tcp_pose"]  # (2, 7) or (N, 2, 7)
    hands = obs["hand_joints"]  # (2, 20) or (N, 2, 20), open after a reset
    return np.concatenate([tcp, hands], axis=-1).reshape(*tcp.shape[:-2], -1)


def _assert_finite(obs: dict[str, Any]) -> None:
    for key, value in obs.items():
        arr = np.asarray(value)
        if arr.dtype.kind in "fiu":
            assert np.isfinite(arr).all(), key


@pytest.mark.parametrize(("world", "condition", "physics"), CASES)
def test_every_world_condition_and_backend_resets_and_holds(
    world: str, condition: str, physics: str, config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("R2S2R_CONFIG_DIR", str(config))
    env = _make(world, condition, physics)
    try:
        assert env.unwrapped.world_spec.name == world  # type: ignore[attr-defined]
        obs, info = env.reset(seed=0)
        assert env.observation_space.contains(obs)
        _assert_finite(obs)
        start = obs["tcp_pose"][..., :3].copy()
        # The float32 readings of the warp backend may stray past a bound by a rounding.
        space = env.action_space
        action = np.clip(_hold(obs), space.low, space.high)  # type: ignore[attr-defined]
        assert space.contains(action.astype(space.dtype))
        for _ in range(STEPS):
            obs, reward, terminated, truncated, info = env.step(action)
            assert env.observation_space.contains(obs)
            _assert_finite(obs)
            assert not np.any(info["unstable"]), f"diverged: {info}"
            assert not np.any(terminated) and not np.any(truncated)
        drift = np.linalg.norm(obs["tcp_pose"][..., :3] - start, axis=-1)
        assert drift.max() < HOLD_DRIFT_M, drift
    finally:
        env.close()
