"""``R2S2R/PickSort-v0``: the pick-and-sort cell as a gymnasium env (one world, CPU MuJoCo)."""

from __future__ import annotations

import string
from pathlib import Path
from typing import Any

import gymnasium as gym
import mujoco
import numpy as np
from gymnasium import spaces

from r2s2r.geometry.rotations import mat_to_quat
from r2s2r.sim import robots
from r2s2r.sim.appearance import Appearance
from r2s2r.sim.cell import (
    ACTION_PER_ARM,
    ARM_DOF,
    HAND_DOF,
    STATUS_NAMES,
    ActionMode,
    Cell,
    Condition,
    set_action_mode,
)
from r2s2r.sim.physics import PhysicsName, make_physics
from r2s2r.sim.render import Renderer, make_renderer
from r2s2r.sim.scene import build_scene
from r2s2r.spec import TaskSpec, WorldSpec
from r2s2r.spec.world import CAMERA_NAMES
from r2s2r.spec.worlds import load_task, load_world

# Embodiment ids shared with the policy's per-embodiment projectors.
EMBODIMENT_IDS = {"rizon4s_wuji2_bimanual": 0}


def observation_space(size: tuple[int, int], depth: bool, images: bool) -> spaces.Dict:
    w, h = size
    obs: dict[str, spaces.Space[Any]] = {
        "tcp_pose": spaces.Box(-np.inf, np.inf, (2, 7), np.float64),
        "arm_joints": spaces.Box(-np.inf, np.inf, (2, ARM_DOF), np.float64),
        "hand_joints": spaces.Box(-np.inf, np.inf, (2, HAND_DOF), np.float64),
        "instruction": spaces.Text(max_length=256, charset=string.printable),
        "embodiment_id": spaces.Discrete(len(EMBODIMENT_IDS)),
    }
    if images:
        obs["images"] = spaces.Dict(
            {c: spaces.Box(0, 255, (h, w, 3), np.uint8) for c in CAMERA_NAMES}
        )
    if depth:
        obs["head_depth"] = spaces.Box(0.0, np.inf, (h, w), np.float32)
    return spaces.Dict(obs)


def action_space(mode: ActionMode) -> spaces.Box:
    """Per arm: TCP pos (3) + quat wxyz (4) + 20 hand joints, or 7 arm + 20 hand joints."""
    hand_lo = robots.WUJI_HAND_JOINT_RANGES[:, 0]
    hand_hi = robots.WUJI_HAND_JOINT_RANGES[:, 1]
    if mode == "tcp":
        lo = np.concatenate([[-2.0] * 3, [-1.0] * 4, hand_lo])
        hi = np.concatenate([[2.0] * 3, [1.0] * 4, hand_hi])
    else:
        lo = np.concatenate([robots.RIZON4S_JOINT_RANGES[:, 0], hand_lo])
        hi = np.concatenate([robots.RIZON4S_JOINT_RANGES[:, 1], hand_hi])
    return spaces.Box(np.tile(lo, 2), np.tile(hi, 2), (2 * ACTION_PER_ARM,), np.float64)


class PickSortEnv(gym.Env[dict[str, Any], np.ndarray]):
    """Bimanual dexterous pick-and-sort from a moving belt.

    Actions (50 Hz), per arm [left, right]: a TCP pose target in the cell frame (x, y, z,
    qw, qx, qy, qz) and 20 hand-joint targets, or with ``action_mode="joint"`` 7 arm-joint
    targets and 20 hand-joint targets.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 50}

    def __init__(
        self,
        world: str | Path | WorldSpec = "nominal",
        task: str | Path | TaskSpec = "pick_sort",
        condition: Condition = "nominal",
        physics: PhysicsName = "mujoco",
        action_mode: ActionMode = "tcp",
        images: bool = True,
        depth: bool = False,
        randomize_appearance: bool = False,
        render_mode: str | None = None,
    ) -> None:
        self.world_spec = load_world(world)
        self.task_spec = load_task(task)
        self.scene = build_scene(self.task_spec, self.world_spec)
        set_action_mode(self.scene.model, action_mode)
        self.physics = make_physics(physics, self.scene.model, 1)
        self.cell = Cell(self.scene, self.physics, condition, action_mode)
        self.images, self.depth = images, depth
        self.render_mode = render_mode
        self.appearance = Appearance(self.scene, condition, randomize_appearance)
        self._renderer: Renderer | None = None
        self.observation_space = observation_space(self.world_spec.render.obs_size, depth, images)
        self.action_space = action_space(action_mode)

    @property
    def model(self) -> mujoco.MjModel:
        return self.scene.model

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Start an episode. ``options`` may fix what is otherwise drawn: ``objects`` (one
        name per spawn slot), ``spawn`` (belt speed, lateral offsets, yaws) and ``scales``
        (a size factor per spawn slot); see ``Cell.reset``."""
        super().reset(seed=seed)
        cell = self.cell
        opts = options or {}
        unknown = set(opts) - {"objects", "spawn", "scales"}
        if unknown:
            raise ValueError(
                f"reset options: unknown {sorted(unknown)}; known: objects, spawn, scales"
            )
        cell.reset(
            np.array([0]),
            [self.np_random],
            opts.get("objects"),
            opts.get("spawn"),
            opts.get("scales"),
        )
        self.appearance.draw(self.np_random)
        self.appearance.apply(self.scene.model, 0)
        chosen = cell.chosen[0]
        # What does not change within an episode is computed once here.
        self._instruction = cell.instruction(0)
        self._static_info = {
            "object_names": [cell.objects[i].name for i in chosen],
            "assigned_bins": [cell.bin_names[cell.assigned_bin[i]] for i in chosen],
            "belt_speed": float(cell.belt_speed[0]),
            "condition": cell.condition,
        }
        return self._obs(), self._info()

    def step(self, action: np.ndarray) -> tuple[dict[str, Any], float, bool, bool, dict]:
        self.cell.step(np.asarray(action)[None])
        success = bool(self.cell.success[0])
        terminated = bool(self.cell.terminated[0])
        return (
            self._obs(),
            float(success and terminated),
            terminated,
            bool(self.cell.truncated[0]) and not terminated,
            self._info(),
        )

    def renderer(self) -> Renderer:
        if self._renderer is None:
            self._renderer = make_renderer("mujoco", self.physics, self.world_spec, self.depth)
        return self._renderer

    def _obs(self) -> dict[str, Any]:
        qpos = self.physics.state()[0][0]
        pos, mat = self.physics.site_poses(self.cell.idx.tcp_sites)
        obs: dict[str, Any] = {
            "tcp_pose": np.concatenate([pos[0], mat_to_quat(mat[0])], axis=-1),
            "arm_joints": qpos.take(self.cell.idx.arm_qadr),
            "hand_joints": qpos.take(self.cell.idx.hand_qadr),
            "instruction": self._instruction,
            "embodiment_id": EMBODIMENT_IDS["rizon4s_wuji2_bimanual"],
        }
        if self.images:
            obs["images"] = {c: v[0] for c, v in self.renderer().render().items()}
        if self.depth:
            obs["head_depth"] = self.renderer().render_depth()[0]
        return obs

    def _info(self) -> dict[str, Any]:
        """Object states of the episode's objects (one row per spawn slot), bins and success."""
        cell = self.cell
        pos, quat, vel = cell.object_states()
        return {
            **self._static_info,
            "object_pos": pos[0],
            "object_quat": quat[0],
            "object_lin_vel": vel[0],
            "object_spawned": cell.spawned[0].copy(),
            "object_status": [STATUS_NAMES[s] for s in cell.status[0]],
            "success": bool(cell.success[0]),
            "unstable": bool(cell.unstable[0]),
            "time": float(cell.time[0]),
        }

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        views = self.renderer().render()
        return np.concatenate([views[c][0] for c in CAMERA_NAMES], axis=1)

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None
