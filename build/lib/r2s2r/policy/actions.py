"""The action representation inside the policy (``ActionCodec``), numpy only.

At the boundary an action is the contract's: per arm a TCP pose target (x y z qw qx qy qz,
cell frame) or joint targets, then the hand's joint targets. Inside the model, per arm:

- ``tcp`` mode: position (3), rotation as the first two columns of its matrix (6D, which is
  continuous, unlike a quaternion), hand joints (H). ``absolute``: the target in the cell
  frame. ``relative``: the position minus the current TCP position (in the cell frame) and
  the rotation ``R_now^T R_target`` (the target's orientation in the current TCP frame).
- ``joint`` mode: the arm's joints (``relative``: minus the current joints), hand joints (H).

Hand joints stay absolute in both representations.
"""

from __future__ import annotations

import numpy as np

from r2s2r.geometry.rotations import mat_to_quat, quat_to_mat
from r2s2r.policy.base import PolicyError
from r2s2r.policy.config import ActionRepr
from r2s2r.sim.contract import Contract

# Rotation in 6D: the first two columns of the rotation matrix.
ROT6D_DIM = 6


def mat_to_rot6d(m: np.ndarray) -> np.ndarray:
    """Rotation matrices (..., 3, 3) -> 6D (..., 6): column 0 then column 1."""
    return np.concatenate([m[..., :, 0], m[..., :, 1]], axis=-1)


def rot6d_to_mat(r: np.ndarray) -> np.ndarray:
    """6D (..., 6) -> rotation matrices (..., 3, 3) by Gram-Schmidt on the two columns."""
    a1, a2 = r[..., :3], r[..., 3:6]
    b1 = a1 / np.maximum(np.linalg.norm(a1, axis=-1, keepdims=True), 1e-12)
    a2 = a2 - np.sum(b1 * a2, axis=-1, keepdims=True) * b1
    b2 = a2 / np.maximum(np.linalg.norm(a2, axis=-1, keepdims=True), 1e-12)
    b3 = np.cross(b1, b2)
    return np.stack([b1, b2, b3], axis=-1)


class ActionCodec:
    """Contract actions (..., T, A) <-> the model's internal actions (..., T, dim), given the
    current proprio vector (..., S) of each window (the window's last state)."""

    def __init__(self, contract: Contract, repr: ActionRepr) -> None:
        if repr not in ("absolute", "relative"):
            raise PolicyError(f"action_repr: expected 'absolute' or 'relative', got {repr!r}")
        self.contract = contract
        self.repr = repr
        e = contract.embodiment
        self._arms, self._hand = e.num_arms, e.hand_dof
        self._arm_in = 3 + ROT6D_DIM if contract.action_mode == "tcp" else e.arm_dof
        self.dim = self._arms * (self._arm_in + self._hand)

    def _check(self, name: str, x: np.ndarray, last: int) -> None:
        if x.ndim < 1 or x.shape[-1] != last:
            raise PolicyError(f"{name}: expected shape (..., {last}), got {x.shape}")

    def encode(self, actions: np.ndarray, state_now: np.ndarray) -> np.ndarray:
        """Contract actions (..., T, A) and current states (..., S) -> internal (..., T, dim)
        float32."""
        actions = np.asarray(actions, dtype=np.float64)
        state_now = np.asarray(state_now, dtype=np.float64)
        self._check("actions", actions, self.contract.action_dim)
        self._check("state_now", state_now, self.contract.state_dim)
        arm, hand = self.contract.split_action(actions)  # (..., T, S, a), (..., T, S, H)
        now = self.contract.split_state(state_now[..., None, :])  # Broadcast over T.
        if self.contract.action_mode == "tcp":
            pos, quat = arm[..., :3], arm[..., 3:7]
            quat = quat / np.maximum(np.linalg.norm(quat, axis=-1, keepdims=True), 1e-12)
            rot = quat_to_mat(quat)
            if self.repr == "relative":
                pos_now, quat_now = now["tcp_pose"][..., :3], now["tcp_pose"][..., 3:7]
                pos = pos - pos_now
                rot = np.swapaxes(quat_to_mat(quat_now), -1, -2) @ rot
            arm_out = np.concatenate([pos, mat_to_rot6d(rot)], axis=-1)
        else:
            arm_out = arm - now["arm_joints"] if self.repr == "relative" else arm
        out = np.concatenate([arm_out, hand], axis=-1)
        return out.reshape(*out.shape[:-2], self.dim).astype(np.float32)

    def decode(self, internal: np.ndarray, state_now: np.ndarray) -> np.ndarray:
        """Internal actions (..., T, dim) and current states (..., S) -> contract actions
        (..., T, A) float64. Rotations go back through Gram-Schmidt; a quaternion is unit and
        on the hemisphere of the arm's current TCP quaternion (dot product >= 0)."""
        internal = np.asarray(internal, dtype=np.float64)
        state_now = np.asarray(state_now, dtype=np.float64)
        self._check("internal actions", internal, self.dim)
        self._check("state_now", state_now, self.contract.state_dim)
        per_arm = internal.reshape(*internal.shape[:-1], self._arms, self._arm_in + self._hand)
        arm, hand = per_arm[..., : self._arm_in], per_arm[..., self._arm_in :]
        now = self.contract.split_state(state_now[..., None, :])
        if self.contract.action_mode == "tcp":
            pos, rot = arm[..., :3], rot6d_to_mat(arm[..., 3:])
            quat_now = now["tcp_pose"][..., 3:7]
            if self.repr == "relative":
                pos = pos + now["tcp_pose"][..., :3]
                rot = quat_to_mat(quat_now) @ rot
            quat = mat_to_quat(rot)
            flip = np.sum(quat * quat_now, axis=-1, keepdims=True) < 0
            quat = np.where(flip, -quat, quat)
            arm_out = np.concatenate([pos, quat], axis=-1)
        else:
            arm_out = arm + now["arm_joints"] if self.repr == "relative" else arm
        return self.contract.join_action(arm_out, hand)
