"""``R2S2R/PickSort-v0``: the pick-and-sort cell as a gymnasium env (one world, CPU MuJoCo)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import mujoco
import numpy as np

from r2s2r.geometry.rotations import mat_to_quat
from r2s2r.sim.appearance import Appearance
from r2s2r.sim.cell import STATUS_NAMES, Cell
from r2s2r.sim.contract import Contract
from r2s2r.sim.embodiment import ActionMode, Embodiment
from r2s2r.sim.physics import PhysicsName, make_physics
from r2s2r.sim.render import Renderer, make_renderer
from r2s2r.sim.scene import build_scene
from r2s2r.spec import TaskSpec, WorldSpec
from r2s2r.spec.conditions import apply_condition
from r2s2r.spec.world import CAMERA_NAMES
from r2s2r.spec.worlds import load_task, load_world


class PickSortEnv(gym.Env[dict[str, Any], np.ndarray]):
    """Bimanual dexterous pick-and-sort from a moving belt.

    Observations and actions follow the env's ``contract`` (``r2s2r.sim.contract``). Actions
    (50 Hz), per arm [left, right]: a TCP pose target in the cell frame (x, y, z, qw, qx, qy,
    qz) and the hand-joint targets, or with ``action_mode="joint"`` the arm-joint targets and
    the hand-joint targets. With ``env_state`` the observation carries the presented object's
    pose (``environment_state``).

    ``info`` holds the cell's common keys (``Cell.common_info``: success, unstable, time,
    belt_speed, object_pos/quat/lin_vel) as Python scalars and the arrays of the one world,
    plus what this env adds: ``object_names``, ``assigned_bins``, ``condition``,
    ``object_spawned`` and ``object_status`` (status names).
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 50}

    def __init__(
        self,
        world: str | Path | WorldSpec = "nominal",
        task: str | Path | TaskSpec = "pick_sort",
        condition: str = "nominal",
        physics: PhysicsName = "mujoco",
        action_mode: ActionMode = "tcp",
        images: bool = True,
        depth: bool = False,
        randomize_appearance: bool = False,
        render_mode: str | None = None,
        env_state: bool = False,
    ) -> None:
        # The specs as the condition (a name in ``r2s2r.spec.conditions.CONDITIONS``) has them.
        self.task_spec, self.world_spec = apply_condition(
            condition, load_task(task), load_world(world)
        )
        self.condition = condition
        self.scene = build_scene(self.task_spec, self.world_spec, action_mode=action_mode)
        self.physics = make_physics(physics, self.scene.model, 1)
        self.cell = Cell(self.scene, self.physics)
        self.contract = Contract.of(self.scene.embodiment, action_mode)
        self.images, self.depth, self.env_state = images, depth, env_state
        self.render_mode = render_mode
        self.appearance = Appearance(self.scene, randomize_appearance)
        self._renderer: Renderer | None = None
        self.observation_space = self.contract.observation_space(
            self.world_spec.render.obs_size, images, depth, env_state
        )
        self.action_space = self.contract.action_space()

    @property
    def embodiment(self) -> Embodiment:
        return self.scene.embodiment

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
            "condition": self.condition,
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
        cell = self.cell
        qpos = self.physics.state()[0][0]
        pos, mat = self.physics.site_poses(cell.idx.tcp_sites)
        images = depth = env_state = None
        if self.images:
            images = {c: v[0] for c, v in self.renderer().render().items()}
        if self.depth:
            depth = self.renderer().render_depth()[0]
        if self.env_state:
            obj_pos, obj_quat, _ = cell.object_states()
            env_state = np.concatenate([obj_pos[0, 0], obj_quat[0, 0]])
        return self.contract.observation(
            np.concatenate([pos[0], mat_to_quat(mat[0])], axis=-1),
            qpos.take(cell.idx.arm_qadr),
            qpos.take(cell.idx.hand_qadr),
            self._instruction,
            images,
            depth,
            env_state,
        )

    def _info(self) -> dict[str, Any]:
        """The cell's common info of the one world (objects: one row per spawn slot), and
        the objects' names, bins, spawn flags and status names."""
        cell = self.cell
        common = cell.common_info()
        return {
            **self._static_info,
            "object_pos": common["object_pos"][0],
            "object_quat": common["object_quat"][0],
            "object_lin_vel": common["object_lin_vel"][0],
            "object_spawned": cell.spawned[0].copy(),
            "object_status": [STATUS_NAMES[s] for s in cell.status[0]],
            "success": bool(common["success"][0]),
            "unstable": bool(common["unstable"][0]),
            "time": float(common["time"][0]),
            "belt_speed": float(common["belt_speed"][0]),
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
