"""Isaac Lab Mimic's annotations (``obs/datagen_info``) of a recorded r2s2r episode.

Mimic's generator reads each source demo's ``obs/datagen_info``: the end effectors' poses
(``eef_pose``) and commanded targets (``target_eef_pose``), the poses of the objects subtasks
are placed relative to (``object_pose``) and the subtask signals
(``subtask_term_signals``). Its own annotate script records them by replaying a demo in a
manager-based env; an r2s2r episode already holds what they are computed from (the TCP
poses, the TCP actions, the presented object's pose), so they are computed here by the rules
the Mimic env's methods use (``r2s2r_isaaclab.mimic``): the same functions, on recorded
instead of simulated state. Numpy only: no env, no physics.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.spatial.transform import Rotation

from r2s2r.geometry.rotations import quat_to_mat
from r2s2r.sim.embodiment import TCP_POSE_DIM
from r2s2r.spec import TaskSpec, WorldSpec

# An object this far above its resting height on the belt (m), this close to a TCP, is held.
GRASP_LIFT = 0.03
GRASP_REACH = 0.15


def make_pose(pos: np.ndarray, quat: np.ndarray) -> np.ndarray:
    """(..., 3) positions and (..., 4) wxyz quaternions -> (..., 4, 4) pose matrices."""
    out = np.zeros((*pos.shape[:-1], 4, 4))
    out[..., :3, :3] = quat_to_mat(quat)
    out[..., :3, 3] = pos
    out[..., 3, 3] = 1.0
    return out


def tcp_targets(actions: np.ndarray, arms: int, per_arm: int) -> np.ndarray:
    """TCP actions (..., A) -> each arm's commanded pose (..., arms, 4, 4)."""
    a = actions.reshape(*actions.shape[:-1], arms, per_arm)[..., :TCP_POSE_DIM]
    quat = a[..., 3:] / np.linalg.norm(a[..., 3:], axis=-1, keepdims=True)
    return make_pose(a[..., :3], quat)


def bin_poses(world: WorldSpec, names: Any) -> dict[str, np.ndarray]:
    """Each bin's pose (4, 4) in the cell frame, from the world's layout."""
    out = {}
    for name in names:
        b = world.layout.bins[name]
        q = Rotation.from_euler("z", b.yaw_deg, degrees=True).as_quat(scalar_first=True)
        out[name] = make_pose(np.asarray(b.pos, dtype=float), q)
    return out


def held(obj_pos: np.ndarray, tcp_pos: np.ndarray, rest: np.ndarray, belt_top: float) -> np.ndarray:
    """Mimic's ``grasp`` signal: (...,) bool where the object (..., 3) is lifted ``GRASP_LIFT``
    above its resting height ``rest`` (...,) on the belt and within ``GRASP_REACH`` of a TCP
    (..., S, 3)."""
    reach = np.linalg.norm(tcp_pos - obj_pos[..., None, :], axis=-1).min(axis=-1)
    return (obj_pos[..., 2] - belt_top > rest + GRASP_LIFT) & (reach < GRASP_REACH)


def datagen_info(
    tcp_pose: np.ndarray,
    actions: np.ndarray,
    object_pose: np.ndarray,
    object_name: str,
    task: TaskSpec,
    world: WorldSpec,
    sides: tuple[str, ...],
) -> dict[str, dict[str, np.ndarray]]:
    """``obs/datagen_info`` of one episode: ``tcp_pose`` (T, S, 7) observed, ``actions`` (T, A)
    TCP actions, ``object_pose`` (T, 7) the presented object's observed pose (position,
    wxyz quaternion). Poses are (T, 4, 4) in the cell frame, signals (T,) 0/1, all float32
    as the Mimic env's tensors are (Mimic multiplies the two together)."""
    n, arms = len(tcp_pose), len(sides)
    if actions.shape[-1] % arms:
        raise ValueError(f"actions of width {actions.shape[-1]} do not split over {arms} arms")
    eef = make_pose(tcp_pose[..., :3], tcp_pose[..., 3:7])
    targets = tcp_targets(actions, arms, actions.shape[-1] // arms)
    obj = task.object_named(object_name)
    bins = bin_poses(world, world.layout.bins)
    objects = {"object": make_pose(object_pose[:, :3], object_pose[:, 3:7])}
    objects["bin"] = np.broadcast_to(bins[task.bin_for(obj).name], (n, 4, 4))
    objects.update({k: np.broadcast_to(v, (n, 4, 4)) for k, v in bins.items()})
    grasp = held(object_pose[:, :3], tcp_pose[..., :3], np.full(n, obj.rest_height),
                 world.layout.belt.pos[2])  # fmt: skip
    info = {
        "eef_pose": {s: eef[:, i] for i, s in enumerate(sides)},
        "target_eef_pose": {s: targets[:, i] for i, s in enumerate(sides)},
        "object_pose": objects,
        "subtask_term_signals": {"grasp": grasp},
    }
    return {k: {name: v.astype(np.float32) for name, v in part.items()} for k, part in info.items()}
