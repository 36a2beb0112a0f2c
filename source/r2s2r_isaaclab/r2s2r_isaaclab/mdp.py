"""The Mimic env's MDP terms, as Isaac Lab's managers call them (``func(env)``): observations,
the success check, and the recorder of the stepped actions.

Observations are flat per env, so that Isaac Lab's ``ObservationManager`` can concatenate
them; the recorders store them as ``obs/<term>``, the keys ``r2s2r_isaaclab.hdf5`` reads
(``tcp_pose``, ``arm_joints``, ``hand_joints``, ``object``). The env is
``r2s2r_isaaclab.mimic.PickSortMimicEnv``; these read what it holds (``last_obs``, ``cell``,
``actions``) and compute nothing the core does not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch
from isaaclab.managers import RecorderTermCfg
from isaaclab.managers.recorder_manager import RecorderTerm
from isaaclab.utils import configclass

if TYPE_CHECKING:
    from r2s2r_isaaclab.mimic import PickSortMimicEnv


def _flat(env: PickSortMimicEnv, key: str) -> torch.Tensor:
    x = np.asarray(env.last_obs[key], dtype=np.float32)
    return torch.as_tensor(x.reshape(env.num_envs, -1), device=env.device)


def tcp_pose(env: PickSortMimicEnv) -> torch.Tensor:
    """Each arm's TCP pose (position, wxyz quaternion) in the cell frame, (N, S*7)."""
    return _flat(env, "tcp_pose")


def arm_joints(env: PickSortMimicEnv) -> torch.Tensor:
    """Each arm's joint positions, (N, S*J)."""
    return _flat(env, "arm_joints")


def hand_joints(env: PickSortMimicEnv) -> torch.Tensor:
    """Each hand's joint positions, (N, S*H)."""
    return _flat(env, "hand_joints")


def object_pose(env: PickSortMimicEnv) -> torch.Tensor:
    """The presented object's pose (position, wxyz quaternion) in the cell frame, (N, 7): the
    core's ``environment_state``."""
    pos, quat, _ = env.cell.object_states()
    pose = np.concatenate([pos[:, 0], quat[:, 0]], axis=-1).astype(np.float32)
    return torch.as_tensor(pose, device=env.device)


def object_sorted(env: PickSortMimicEnv) -> torch.Tensor:
    """The task's success, (N,) bool: every presented object at rest in its own bin (the core
    cell's judgement, ``Cell.success``)."""
    return torch.as_tensor(env.cell.success.copy(), device=env.device)


class PreStepActionsRecorder(RecorderTerm):
    """Records ``actions``: the action each step applies, (N, A), as the caller gave it (the env
    has no action manager, whose ``action`` Isaac Lab's own term reads)."""

    def record_pre_step(self) -> tuple[str | None, torch.Tensor | dict | None]:
        return "actions", self._env.actions


@configclass
class PreStepActionsRecorderCfg(RecorderTermCfg):
    """Configuration of ``PreStepActionsRecorder``."""

    class_type: type = PreStepActionsRecorder
