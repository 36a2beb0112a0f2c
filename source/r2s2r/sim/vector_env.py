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
from r2s2r.sim.cell import Cell
from r2s2r.sim.contract import Contract
from r2s2r.sim.embodiment import ActionMode, Embodiment
from r2s2r.sim.physics import PhysicsFactory, PhysicsName, make_physics
from r2s2r.sim.render import RENDERERS, Renderer, make_renderer
from r2s2r.sim.scene import build_scene
from r2s2r.spec import TaskSpec, WorldSpec
from r2s2r.spec.conditions import apply_condition
from r2s2r.spec.worlds import load_task, load_world


class PickSortVectorEnv(gym.vector.VectorEnv[dict[str, Any], np.ndarray, np.ndarray]):
    """``num_envs`` pick-and-sort cells on the batched MuJoCo Warp backend.

    Observations, actions and rewards are those of ``PickSortEnv`` with a leading world
    dimension, built by the same ``contract`` (the instruction is a tuple of strings; no depth
    view). Worlds that ended at one step are reset at the next one, whose action they ignore
    (gymnasium's ``AutoresetMode.NEXT_STEP``).

    ``info`` holds the cell's common keys (``Cell.common_info``) as arrays with a leading world
    dimension, plus what this env adds: ``status`` (codes, see ``cell.STATUS_NAMES``),
    ``spawned`` and ``object_index`` (into ``task.all_objects``), each (N, S).

    Seeding: ``reset(seed=s)`` gives world ``i`` the generator ``np.random.default_rng(s + i)``
    (a list of seeds gives world ``i`` ``default_rng(seed[i])``); each world keeps drawing its
    later episodes from that generator, so a seeded run is deterministic.

    Images (``images=True``) come from the renderer named ``renderer`` (``render.RENDERERS``):
    ``"mujoco"`` renders one world at a time with the CPU rasterizer from a host copy of each
    world's state (correct but slow); ``"mujoco_warp"`` renders all worlds in one batch on the
    physics device with MuJoCo Warp's ray tracer (``WarpSceneRenderer``: same cameras,
    different shading, no motion blur).

    ``physics`` is a backend name (``physics.PHYSICS``) or a factory that builds one over the
    scene's model (the Isaac Lab extension passes its Newton backend this way).
    """

    metadata = {"render_modes": [], "autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(
        self,
        num_envs: int,
        world: str | Path | WorldSpec = "nominal",
        task: str | Path | TaskSpec = "pick_sort",
        condition: str = "nominal",
        action_mode: ActionMode = "tcp",
        images: bool = False,
        device: str | None = None,
        randomize_appearance: bool = False,
        renderer: str = "mujoco",
        env_state: bool = False,
        physics: PhysicsName | PhysicsFactory = "mujoco_warp",
    ) -> None:
        if renderer not in RENDERERS:
            raise ValueError(f"renderer: {RENDERERS.unknown(renderer)}")
        self.num_envs = num_envs
        self.task_spec, self.world_spec = apply_condition(
            condition, load_task(task), load_world(world)
        )
        self.condition = condition
        self.scene = build_scene(self.task_spec, self.world_spec, action_mode=action_mode)
        if isinstance(physics, str):
            self.physics = make_physics(physics, self.scene.model, num_envs, device)
        else:
            self.physics = physics(self.scene.model, num_envs, device)
        self.cell = Cell(self.scene, self.physics)
        self.contract = Contract.of(self.scene.embodiment, action_mode)
        self.appearance = Appearance(self.scene, randomize_appearance, num_envs)
        self.images, self.env_state = images, env_state
        self.renderer_backend = renderer
        self._renderer: Renderer | None = None
        # Whether an appearance was drawn since the renderer last received one.
        self._appearance_dirty = True
        if images:
            # Fail at construction rather than at the first reset (e.g. on motion blur).
            self.renderer()
        self.single_observation_space = self.contract.observation_space(
            self.world_spec.render.obs_size, images, environment_state=env_state
        )
        self.single_action_space = self.contract.action_space()
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self._rngs = [np.random.default_rng() for _ in range(num_envs)]
        self._autoreset = np.zeros(num_envs, dtype=bool)

    @property
    def embodiment(self) -> Embodiment:
        return self.scene.embodiment

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
        """Step every world with ``actions`` (N, action_dim); worlds done last step are reset
        instead."""
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
        hand = qpos[worlds][:, idx.hand_qadr]
        if self.cell.action_mode == "tcp":
            pos, mat = self.physics.site_poses(idx.tcp_sites)
            arm = np.concatenate([pos[worlds], mat_to_quat(mat[worlds])], axis=-1)
        else:
            arm = qpos[worlds][:, idx.arm_qadr]
        return self.contract.join_action(arm, hand)

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
        cell = self.cell
        qpos, _ = self.physics.state()
        pos, mat = self.physics.site_poses(cell.idx.tcp_sites)
        env_state = None
        if self.env_state:
            obj_pos, obj_quat, _ = cell.object_states()
            env_state = np.concatenate([obj_pos[:, 0], obj_quat[:, 0]], axis=-1)
        return self.contract.observation(
            np.concatenate([pos, mat_to_quat(mat)], axis=-1),
            qpos[:, cell.idx.arm_qadr],
            qpos[:, cell.idx.hand_qadr],
            tuple(cell.instruction(w) for w in range(self.num_envs)),
            self._images() if self.images else None,
            environment_state=env_state,
        )

    def _info(self) -> dict[str, Any]:
        cell = self.cell
        return {
            **cell.common_info(),
            "status": cell.status.copy(),  # (N, S) codes, see cell.STATUS_NAMES
            "spawned": cell.spawned.copy(),
            "object_index": cell.chosen.copy(),  # (N, S) index into task.all_objects
        }

    def close_extras(self, **kwargs: Any) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None
