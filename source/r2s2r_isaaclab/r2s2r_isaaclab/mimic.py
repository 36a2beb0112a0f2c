"""The Mimic variant (``Isaac-R2S2R-PickSort-<World>-Mimic-v0``): the Isaac Lab env with the
six methods Isaac Lab Mimic's annotate and generate tools call.

The end effectors are the two arms (``left``, ``right``); an arm's pose is its TCP in the cell
frame, as a 4x4 matrix, which is exactly what a TCP action commands (position + quaternion
w, x, y, z); its "gripper" action is its hand's joint targets. The objects Mimic moves
subtasks with are ``object`` (the presented object) and ``bin`` (its bin); every bin is also
there under its own name. The subtask signal ``grasp`` is 1 once the object is held off the
belt (``r2s2r_isaaclab.annotate.held``: ``GRASP_LIFT`` above its resting height and within
``GRASP_REACH`` of an arm's TCP).

The methods take and return torch tensors on ``env.device`` as Isaac Lab Mimic expects; the
env itself steps with numpy actions (the core's contract) and converts a tensor action.

What Isaac Lab Mimic's generation loop (``isaaclab_mimic.datagen.generation``,
``DataGenerator.generate``) asks of an env beyond those six, this env has as well:
``reset(env_ids=...)`` of some worlds, ``reset_to(state, env_ids, seed, is_relative)``,
``scene.get_state(is_relative)`` (``r2s2r_isaaclab.scene_state.CellScene``, which restores a
world exactly), Isaac Lab's own ``RecorderManager`` built from ``cfg.recorders`` and fed at
the same points of ``reset`` / ``step`` as Isaac Lab's envs feed it, ``obs_buf`` from Isaac
Lab's own ``ObservationManager`` over ``cfg.observations``, and ``sim.is_stopped()``. With
``cfg.terminations`` None, as Mimic's ``setup_env_config`` sets it, episodes end only by a
reset. ``cfg.reset_instances`` fixes what resets otherwise draw (object, spawn, belt speed).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from isaaclab.envs import ManagerBasedRLMimicEnv
from isaaclab.managers import ObservationManager, RecorderManager, RecorderTermCfg

from r2s2r.behavior.instance import TaskInstance
from r2s2r.geometry.rotations import mat_to_quat
from r2s2r.sim.embodiment import TCP_POSE_DIM
from r2s2r.spec import TaskSpec
from r2s2r_isaaclab.annotate import bin_poses, held, make_pose, tcp_targets
from r2s2r_isaaclab.env import PickSortIsaacEnv
from r2s2r_isaaclab.scene_state import CellScene, env_indices


class SimRun:
    """``env.sim`` as Isaac Lab's managers and Mimic's loop ask about it: whether the simulation
    runs. The env steps its own physics (``NewtonPhysics``), not a ``SimulationContext``."""

    def __init__(self) -> None:
        self.stopped = False

    def is_playing(self) -> bool:
        return not self.stopped

    def is_stopped(self) -> bool:
        return self.stopped


class PickSortMimicEnv(PickSortIsaacEnv, ManagerBasedRLMimicEnv):
    """``PickSortIsaacEnv`` with Isaac Lab Mimic's six methods (``ManagerBasedRLMimicEnv``).

    A ``ManagerBasedRLMimicEnv`` subclass as an interface only: Mimic's scripts
    (``generate_dataset.py``, ``annotate_demos.py``) refuse an env that is not an instance of
    it, and annotate's ``--auto`` looks for ``get_subtask_term_signals`` overridden on it. Its
    ``__init__`` (a ``SimulationContext`` and an ``InteractiveScene`` from a USD stage, through
    Kit's paths) never runs: ours comes first in the MRO and does not call up to it. So do
    ``step``, ``reset``, ``reset_to``, ``close`` (gymnasium's ``VectorEnv``'s, which calls
    ``close_extras``), ``render`` (``VectorEnv``'s: not implemented, there is no viewer),
    ``__del__``, ``num_envs``, ``device``, ``unwrapped`` and ``metadata``. Of what is left
    inherited, ``physics_dt``, ``step_dt``, ``max_episode_length(_s)`` and ``is_vector_env``
    hold for this env (they read the config), ``get_subtask_start_signals`` and
    ``get_navigation_state`` are Mimic's optional methods, not implemented here, and
    ``_init_sim``, ``_reset_idx``, ``_configure_gym_env_spaces`` and ``_collect_io_descriptors``
    are called only by methods overridden here. What needs managers or a simulation context
    this env does not have is overridden with an error that says so.
    """

    # The vector env's attribute, set in its __init__ (ManagerBasedEnv's is a read-only
    # property, its InteractiveScene's count, which would refuse the assignment).
    num_envs: int = 0

    def __init__(self, cfg: Any, render_mode: str | None = None, **kwargs: Any) -> None:
        # The config's own mistakes first, before the physics is built.
        recording = cfg.recorders is not None and any(
            isinstance(v, RecorderTermCfg) for v in vars(cfg.recorders).values()
        )
        if recording and cfg.terminations is not None:
            raise ValueError(
                "cfg.recorders: recording needs cfg.terminations = None (as Isaac Lab Mimic's "
                "setup_env_config sets it): this env restarts an ended episode at the next step, "
                "which would split a recorded step across two episodes"
            )
        task, _ = cfg.specs()
        self._instances = [
            task_instance(c, task, f"reset_instances[{i}]")
            for i, c in enumerate(cfg.reset_instances)
        ]
        self._resets = 0  # Resets so far that took an instance from cfg.reset_instances.
        super().__init__(cfg, render_mode, **kwargs)
        if self.cell.action_mode != "tcp":
            raise ValueError("the Mimic env needs TCP actions (cfg.action_mode='tcp')")
        self.eef_names = self.embodiment.sides
        # The core's Scene, with Isaac Lab's get_state / reset_to.
        self.cell_scene = CellScene.of(self.scene, self.cell, self.device)
        self.scene = self.cell_scene
        self.sim = SimRun()
        # The action being stepped, (N, A), as recorded (mdp.PreStepActionsRecorder).
        self.actions = torch.zeros(self.num_envs, self.contract.action_dim, device=self.device)
        self.last_obs = self._obs()
        self.observation_manager = ObservationManager(cfg.observations, self)
        self.obs_buf = self.observation_manager.compute()
        self.recorder_manager = RecorderManager(cfg.recorders, self)

    # ------------------------------------------------------------------ helpers
    def _ids(self, env_ids: Sequence[int] | None) -> np.ndarray:
        return np.arange(self.num_envs) if env_ids is None else np.asarray(env_ids, dtype=int)

    def _tensor(self, x: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(np.asarray(x, dtype=np.float32), device=self.device)

    def _side(self, eef_name: str) -> int:
        if eef_name not in self.eef_names:
            raise KeyError(f"eef_name {eef_name!r}: the end effectors are {list(self.eef_names)}")
        return self.eef_names.index(eef_name)

    def _split(self, action: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(..., A) actions -> arm commands (..., S, 7) and hand targets (..., S, H)."""
        per_arm = self.embodiment.action_per_arm("tcp")
        a = action.reshape(*action.shape[:-1], len(self.eef_names), per_arm)
        return a[..., :TCP_POSE_DIM], a[..., TCP_POSE_DIM:]

    # ------------------------------------------------------------------ Isaac Lab's env loop
    def step(self, actions: Any) -> Any:
        """The core's step with ``actions`` (N, A) (a tensor or an array), fed to the recorders
        before and after as Isaac Lab's envs feed them."""
        a = torch.as_tensor(actions).detach().reshape(self.num_envs, -1)
        self.actions = a.clone().to(self.device)
        self.recorder_manager.record_pre_step()
        out = super().step(np.asarray(a.cpu(), dtype=np.float64))
        if self.cfg.terminations is None:
            # No termination terms: the episode goes on until a reset (Mimic's generator
            # resets the env itself).
            out[2][:] = False
            out[3][:] = False
            self._autoreset[:] = False
        self._observed(out[0])
        self.recorder_manager.record_post_step()
        return out

    def reset(
        self,
        env_ids: Sequence[int] | torch.Tensor | None = None,
        *,
        seed: int | Sequence[int] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """New episodes in ``env_ids`` (default: every world, seeded as the core's vector env
        is); ``seed`` with ``env_ids`` gives world ``i`` the generator ``default_rng(seed + i)``."""
        if env_ids is None:
            if seed is not None:
                self._resets = 0
            obs, info = super().reset(seed=seed, options=options)
        else:
            if seed is not None and not isinstance(seed, int | np.integer):
                raise ValueError(f"reset: seed with env_ids must be one int, got {seed!r}")
            ids = env_indices(env_ids, self.num_envs)
            self._reseed(ids, seed)
            self._reset_worlds(ids)
            self._autoreset[ids] = False
            obs, info = self._obs(), self._info()
        self._observed(obs)
        return obs, info

    def reset_to(
        self,
        state: dict[str, Any],
        env_ids: Sequence[int] | torch.Tensor | None = None,
        seed: int | None = None,
        is_relative: bool = False,
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Put the worlds ``env_ids`` (default: all) into ``state`` (``scene.get_state``'s
        layout, one row per world in ``env_ids``), recorded as a reset. The appearance is the
        world's current one (a state holds no appearance)."""
        ids = env_indices(env_ids, self.num_envs)
        rec, listed = self.recorder_manager, ids.tolist()
        rec.record_pre_reset(listed)
        self._reseed(ids, seed)
        self.cell_scene.reset_to(state, ids, is_relative)
        self._autoreset[ids] = False
        rec.reset(listed)
        rec.record_post_reset(listed)
        obs = self._obs()
        self._observed(obs)
        return obs, self._info()

    def _reset_worlds(self, worlds: np.ndarray) -> None:
        listed = [int(w) for w in worlds]
        rec = self.recorder_manager
        # Isaac Lab's order: a finished episode is exported before the reset, the new one's
        # initial state recorded after it.
        rec.record_pre_reset(listed)
        if not self._instances:
            super()._reset_worlds(worlds)
        else:
            for w in listed:
                start = self._instances[self._resets % len(self._instances)]
                self._resets += 1
                self.cell.reset(np.array([w]), [self._rngs[w]], **start.reset_options())
                self.appearance.draw(self._rngs[w], w)
            self._appearance_dirty = True
        rec.reset(listed)
        rec.record_post_reset(listed)

    def _reseed(self, ids: np.ndarray, seed: int | None) -> None:
        if seed is not None:
            for w in ids:
                self._rngs[w] = np.random.default_rng(int(seed) + int(w))

    def _observed(self, obs: dict[str, Any]) -> None:
        self.last_obs = obs
        self.obs_buf = self.observation_manager.compute(update_history=True)

    def close_extras(self, **kwargs: Any) -> None:
        super().close_extras(**kwargs)
        if not self.sim.stopped:
            self.recorder_manager.close()
            self.sim.stopped = True

    # ------------------------------------------------------------------ ManagerBasedEnv's, not here
    def __del__(self) -> None:
        """Nothing: ManagerBasedEnv's finalizer closes its simulation context; this env is
        closed by ``close()``, and its recorder manager closes its files when collected."""

    @staticmethod
    def seed(seed: int = -1) -> int:
        """Not supported: ManagerBasedEnv seeds the global generators its events draw from; this
        env draws from one generator per world, seeded by ``reset(seed=...)``."""
        raise NotImplementedError(
            "PickSortMimicEnv.seed: seed the worlds with reset(seed=...) (world i draws from "
            "numpy's default_rng(seed + i))"
        )

    def load_managers(self) -> None:
        """Not supported: the managers this env has are built in ``__init__``."""
        raise NotImplementedError(
            "PickSortMimicEnv.load_managers: the observation and recorder managers are built in "
            "__init__; there are no action, event, command, reward, termination or curriculum "
            "managers (the core's cell does their work)"
        )

    def setup_manager_visualizers(self) -> None:
        """Not supported: no visualizers (no simulation context)."""
        raise NotImplementedError(
            "PickSortMimicEnv.setup_manager_visualizers: this env has no simulation context "
            "and no visualizers"
        )

    @property
    def get_IO_descriptors(self) -> Any:
        """Not supported (an ``AttributeError``, so that ``hasattr`` says False)."""
        raise AttributeError(
            "PickSortMimicEnv.get_IO_descriptors: IO descriptors need an action manager and "
            "Isaac Lab articulations, which this env does not have"
        )

    def export_IO_descriptors(self, output_dir: str | None = None) -> None:
        """Not supported (see ``get_IO_descriptors``)."""
        raise NotImplementedError(
            "PickSortMimicEnv.export_IO_descriptors: IO descriptors need an action manager and "
            "Isaac Lab articulations, which this env does not have"
        )

    # ------------------------------------------------------------------ Mimic's six methods
    def get_robot_eef_pose(
        self, eef_name: str, env_ids: Sequence[int] | None = None
    ) -> torch.Tensor:
        """The arm's TCP pose in the cell frame, (len(env_ids), 4, 4)."""
        ids, side = self._ids(env_ids), self._side(eef_name)
        pos, mat = self.physics.site_poses(self.cell.idx.tcp_sites)
        pose = np.zeros((len(ids), 4, 4))
        pose[:, :3, :3] = mat[ids, side]
        pose[:, :3, 3] = pos[ids, side]
        pose[:, 3, 3] = 1.0
        return self._tensor(pose)

    def target_eef_pose_to_action(
        self,
        target_eef_pose_dict: dict[str, torch.Tensor],
        gripper_action_dict: dict[str, torch.Tensor],
        action_noise_dict: dict[str, float] | None = None,
        env_id: int = 0,
    ) -> torch.Tensor:
        """The TCP action (action_dim,) that commands each arm to its target pose (4, 4) and
        its hand to its joint targets (H,); noise (a scale per arm) perturbs the position."""
        parts = []
        for eef in self.eef_names:
            target = np.asarray(target_eef_pose_dict[eef].detach().cpu(), dtype=np.float64)
            pos = target[:3, 3].copy()
            quat = mat_to_quat(target[:3, :3])
            if action_noise_dict is not None and action_noise_dict.get(eef):
                pos += np.random.default_rng().normal(0.0, float(action_noise_dict[eef]), 3)
            hand = np.asarray(gripper_action_dict[eef].detach().cpu(), dtype=np.float64)
            parts.append(np.concatenate([pos, quat, hand.reshape(-1)]))
        return self._tensor(np.concatenate(parts))

    def action_to_target_eef_pose(self, action: torch.Tensor) -> dict[str, torch.Tensor]:
        """The target TCP pose (N, 4, 4) each arm's part of ``action`` (N, A) commands."""
        a = np.asarray(action.detach().cpu(), dtype=np.float64)
        arms = len(self.eef_names)
        poses = tcp_targets(a, arms, self.embodiment.action_per_arm("tcp"))
        return {eef: self._tensor(poses[..., i, :, :]) for i, eef in enumerate(self.eef_names)}

    def actions_to_gripper_actions(self, actions: torch.Tensor) -> dict[str, torch.Tensor]:
        """Each hand's joint targets from actions (..., A): (..., H) per arm."""
        _, hand = self._split(np.asarray(actions.detach().cpu(), dtype=np.float64))
        return {eef: self._tensor(hand[..., i, :]) for i, eef in enumerate(self.eef_names)}

    def get_object_poses(self, env_ids: Sequence[int] | None = None) -> dict[str, torch.Tensor]:
        """Poses (len(env_ids), 4, 4): ``object`` (the presented object), ``bin`` (its bin)
        and every bin by name."""
        ids = self._ids(env_ids)
        cell = self.cell
        pos, quat, _ = cell.object_states()
        out = {"object": self._tensor(make_pose(pos[ids, 0], quat[ids, 0]))}
        bins = bin_poses(self.world_spec, cell.bin_names)
        for name, pose in bins.items():
            out[name] = self._tensor(np.broadcast_to(pose, (len(ids), 4, 4)).copy())
        assigned = [cell.bin_names[cell.assigned_bin[cell.chosen[w, 0]]] for w in ids]
        out["bin"] = self._tensor(np.stack([bins[n] for n in assigned]))
        return out

    def get_subtask_term_signals(
        self, env_ids: Sequence[int] | None = None
    ) -> dict[str, torch.Tensor]:
        """``grasp``: (len(env_ids),) 1 where the presented object is held off the belt."""
        ids = self._ids(env_ids)
        pos, _, _ = self.cell.object_states()
        obj = pos[ids, 0]  # (n, 3)
        tcp, _ = self.physics.site_poses(self.cell.idx.tcp_sites)
        rest = np.array([self.task_spec.object_named(n).rest_height for n in self._names(ids)])
        grasp = self.cell.spawned[ids, 0] & held(
            obj, tcp[ids], rest, self.world_spec.layout.belt.pos[2]
        )
        return {"grasp": self._tensor(grasp.astype(np.float32))}

    def _names(self, ids: np.ndarray) -> list[str]:
        cell = self.cell
        return [cell.objects[cell.chosen[w, 0]].name for w in ids]

    def serialize(self) -> dict[str, Any]:
        """What Isaac Lab Mimic stores about the env in a generated dataset."""
        return {"env_name": self.cfg.world, "condition": self.cfg.condition, "type": 2}


def task_instance(cfg: Any, task: TaskSpec, where: str = "reset_instances[0]") -> TaskInstance:
    """The core's ``TaskInstance`` a ``TaskInstanceCfg`` names, checked on ``task``; ``where``
    names the config entry in errors."""
    names = [o.name for o in task.all_objects]
    if cfg.object_name not in names:
        raise ValueError(
            f"{where}.object_name: one of the task's objects {names}, got {cfg.object_name!r}"
        )
    if task.spawn.count != 1:
        raise ValueError(
            f"{where}: the task spawns {task.spawn.count} objects per episode; an instance "
            "fixes one"
        )
    speed = cfg.belt_speed
    if not isinstance(speed, int | float) or speed <= 0:
        raise ValueError(f"{where}.belt_speed: a speed above 0 m/s, got {speed!r}")
    for field in ("lateral", "yaw"):
        if not isinstance(getattr(cfg, field), int | float):
            raise ValueError(f"{where}.{field}: a number, got {getattr(cfg, field)!r}")
    return TaskInstance(cfg.object_name, float(cfg.lateral), float(cfg.yaw), float(speed))
