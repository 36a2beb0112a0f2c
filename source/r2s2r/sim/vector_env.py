"""The pick-and-sort cell as a gymnasium ``VectorEnv``: N worlds stepped together by MuJoCo Warp."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from r2s2r.geometry.rotations import mat_to_quat
from r2s2r.sim.appearance import Appearance
from r2s2r.sim.cell import (
    ACTION_PER_ARM,
    ARM_DOF,
    HAND_DOF,
    ActionMode,
    Cell,
    Condition,
    set_action_mode,
)
from r2s2r.sim.env import EMBODIMENT_IDS, action_space, observation_space
from r2s2r.sim.physics import make_physics
from r2s2r.sim.render import RENDERERS, Renderer, make_renderer
from r2s2r.sim.scene import build_scene
from r2s2r.spec import TaskSpec, WorldSpec
from r2s2r.spec.worlds import load_task, load_world


class PickSortVectorEnv(gym.vector.VectorEnv[dict[str, Any], np.ndarray, np.ndarray]):
    """``num_envs`` pick-and-sort cells on the batched MuJoCo Warp backend.

    Observations, actions and rewards are those of ``PickSortEnv`` with a leading world
    dimension (the instruction is a tuple of strings). Worlds that ended at one step are reset
    at the next one, whose action they ignore (gymnasium's ``AutoresetMode.NEXT_STEP``).

    Seeding: ``reset(seed=s)`` gives world ``i`` the generator ``np.random.default_rng(s + i)``
    (a list of seeds gives world ``i`` ``default_rng(seed[i])``); each world keeps drawing its
    later episodes from that generator, so a seeded run is deterministic.

    Images (``images=True``) come from the renderer named ``renderer`` (``render.RENDERERS``):
    ``"mujoco"`` renders one world at a time with the CPU rasterizer from a host copy of each
    world's state (correct but slow); ``"mujoco_warp"`` renders all worlds in one batch on the
    physics device with MuJoCo Warp's ray tracer (``WarpSceneRenderer``: same cameras,
    different shading, no motion blur).
    """

    metadata = {"render_modes": [], "autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(
        self,
        num_envs: int,
        world: str | Path | WorldSpec = "nominal",
        task: str | Path | TaskSpec = "pick_sort",
        condition: Condition = "nominal",
        action_mode: ActionMode = "tcp",
        images: bool = False,
        device: str | None = None,
        randomize_appearance: bool = False,
        renderer: str = "mujoco",
    ) -> None:
        if renderer not in RENDERERS:
            raise ValueError(f"renderer: {RENDERERS.unknown(renderer)}")
        self.num_envs = num_envs
        self.world_spec = load_world(world)
        self.task_spec = load_task(task)
        self.scene = build_scene(self.task_spec, self.world_spec)
        set_action_mode(self.scene.model, action_mode)
        self.physics = make_physics("mujoco_warp", self.scene.model, num_envs, device)
        self.cell = Cell(self.scene, self.physics, condition, action_mode)
        self.appearance = Appearance(self.scene, condition, randomize_appearance, num_envs)
        self.images = images
        self.renderer_backend = renderer
        self._renderer: Renderer | None = None
        # Whether an appearance was drawn since the renderer last received one.
        self._appearance_dirty = True
        if images:
            # Fail at construction rather than at the first reset (e.g. on motion blur).
            self.renderer()
        self.single_observation_space = observation_space(
            self.world_spec.render.obs_size, False, images
        )
        self.single_action_space = action_space(action_mode)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self._rngs = [np.random.default_rng() for _ in range(num_envs)]
        self._autoreset = np.zeros(num_envs, dtype=bool)

    def reset(
        self,
        *,
        seed: int | Sequence[int] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Start new episodes in every world (``seed``: see the class docstring)."""
        if seed is None:
            self._rngs = [np.random.default_rng() for _ in range(self.num_envs)]
        elif isinstance(seed, int | np.integer):
            self._rngs = [np.random.default_rng(int(seed) + i) for i in range(self.num_envs)]
        else:
            if len(seed) != self.num_envs:
                raise ValueError(f"reset: got {len(seed)} seeds for {self.num_envs} worlds")
            self._rngs = [np.random.default_rng(s) for s in seed]
        self._reset_worlds(np.arange(self.num_envs))
        self._autoreset[:] = False
        return self._obs(), self._info()

    def _reset_worlds(self, worlds: np.ndarray) -> None:
        self.cell.reset(worlds, [self._rngs[w] for w in worlds])
        for w in worlds:
            self.appearance.draw(self._rngs[w], int(w))
        self._appearance_dirty = True

    def step(
        self, actions: np.ndarray
    ) -> tuple[dict[str, Any], np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every world with ``actions`` (N, 54); worlds done last step are reset instead."""
        actions = np.asarray(actions, dtype=np.float64)
        if actions.shape != self.action_space.shape:
            raise ValueError(
                f"step: actions must have shape {self.action_space.shape}, got {actions.shape}"
            )
        restart = np.flatnonzero(self._autoreset)
        if len(restart):
            # The restarting worlds' actions are ignored; hold their home pose this step.
            actions = actions.copy()
            actions[restart] = self._hold_action(restart)
        self.cell.step(actions)
        # Worlds that restart this step are stepped with the others (the batch moves
        # together) and then reset, so they return the first observation of the new episode.
        if len(restart):
            self._reset_worlds(restart)
        cell = self.cell
        terminated = cell.terminated.copy()
        truncated = cell.truncated & ~terminated
        rewards = (cell.success & terminated).astype(np.float64)
        terminated[restart] = False
        truncated[restart] = False
        rewards[restart] = 0.0
        self._autoreset = terminated | truncated
        return self._obs(), rewards, terminated, truncated, self._info()

    def _hold_action(self, worlds: np.ndarray) -> np.ndarray:
        """Actions that hold ``worlds`` at their current pose (they are reset right after)."""
        idx = self.cell.idx
        qpos, _ = self.physics.state()
        hold = np.zeros((len(worlds), 2, ACTION_PER_ARM))
        hold[..., -HAND_DOF:] = qpos[worlds][:, idx.hand_qadr]
        if self.cell.action_mode == "tcp":
            pos, mat = self.physics.site_poses(idx.tcp_sites)
            hold[..., :3] = pos[worlds]
            hold[..., 3:7] = mat_to_quat(mat[worlds])
        else:
            hold[..., :ARM_DOF] = qpos[worlds][:, idx.arm_qadr]
        return hold.reshape(len(worlds), -1)

    # ----------------------------------------------------------------- observations
    def renderer(self) -> Renderer:
        """The renderer of the images (``renderer``), built on first use."""
        if self._renderer is None:
            self._renderer = make_renderer(self.renderer_backend, self.physics, self.world_spec)
        return self._renderer

    def _images(self) -> dict[str, np.ndarray]:
        """Every world's views {camera: (N, H, W, 3) uint8} from the chosen renderer."""
        renderer = self.renderer()
        if self._appearance_dirty:
            renderer.set_appearance(self.appearance)
            self._appearance_dirty = False
        return renderer.render()

    def _obs(self) -> dict[str, Any]:
        qpos, _ = self.physics.state()
        pos, mat = self.physics.site_poses(self.cell.idx.tcp_sites)
        idx = self.cell.idx
        obs: dict[str, Any] = {
            "tcp_pose": np.concatenate([pos, mat_to_quat(mat)], axis=-1),
            "arm_joints": qpos[:, idx.arm_qadr],
            "hand_joints": qpos[:, idx.hand_qadr],
            "instruction": tuple(self.cell.instruction(w) for w in range(self.num_envs)),
            "embodiment_id": np.full(self.num_envs, EMBODIMENT_IDS["rizon4s_wuji2_bimanual"]),
        }
        if self.images:
            obs["images"] = self._images()
        return obs

    def _info(self) -> dict[str, Any]:
        cell = self.cell
        pos, _, _ = cell.object_states()
        return {
            "success": cell.success.copy(),
            "unstable": cell.unstable.copy(),  # the physics diverged (truncates the episode)
            "time": cell.time.astype(np.float64),
            "belt_speed": cell.belt_speed.copy(),
            "status": cell.status.copy(),  # (N, S) codes, see cell.STATUS_NAMES
            "spawned": cell.spawned.copy(),
            "object_index": cell.chosen.copy(),  # (N, S) index into task.all_objects
            "object_pos": pos,
        }

    def close_extras(self, **kwargs: Any) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None
