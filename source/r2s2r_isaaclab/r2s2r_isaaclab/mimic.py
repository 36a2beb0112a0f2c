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
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from r2s2r.geometry.rotations import mat_to_quat
from r2s2r.sim.embodiment import TCP_POSE_DIM
from r2s2r_isaaclab.annotate import bin_poses, held, make_pose, tcp_targets
from r2s2r_isaaclab.env import PickSortIsaacEnv


class PickSortMimicEnv(PickSortIsaacEnv):
    """``PickSortIsaacEnv`` with Isaac Lab Mimic's six methods (``ManagerBasedRLMimicEnv``)."""

    def __init__(self, cfg: Any, render_mode: str | None = None, **kwargs: Any) -> None:
        super().__init__(cfg, render_mode, **kwargs)
        if self.cell.action_mode != "tcp":
            raise ValueError("the Mimic env needs TCP actions (cfg.action_mode='tcp')")
        self.eef_names = self.embodiment.sides

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

    def step(self, actions: Any) -> Any:
        if isinstance(actions, torch.Tensor):
            actions = actions.detach().cpu().numpy()
        return super().step(np.asarray(actions, dtype=np.float64).reshape(self.num_envs, -1))

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
