"""Pose arithmetic shared by the rig (drivers, teleoperation).

Poses are 7-vectors ``[x, y, z, qw, qx, qy, qz]`` in metres.

A pose ``T_a_b`` is frame ``b`` expressed in frame ``a``; ``compose(T_a_b, T_b_c)`` is
``T_a_c`` and ``invert(T_a_b)`` is ``T_b_a``.
"""

from __future__ import annotations

import numpy as np

from r2s2r.geometry.rotations import mat_to_quat, quat_conj, quat_mul, quat_to_mat

IDENTITY_POSE = np.array([0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0])


def as_pose(pose: np.ndarray | list[float] | tuple[float, ...], what: str = "pose") -> np.ndarray:
    """A finite (7,) float pose with a unit quaternion (w >= 0); rejects anything else."""
    out = np.array(pose, dtype=float).reshape(-1)
    if out.shape != (7,):
        raise ValueError(f"{what}: expected 7 numbers (x y z qw qx qy qz), got shape {out.shape}")
    if not np.isfinite(out).all():
        raise ValueError(f"{what}: non-finite values {out}")
    out[3:] = unit_quat(out[3:], what)
    return out


def unit_quat(q: np.ndarray, what: str = "quaternion") -> np.ndarray:
    """Quaternion (4,) scaled to unit norm with w >= 0 (the same rotation)."""
    q = np.asarray(q, dtype=float)
    norm = float(np.linalg.norm(q))
    if not np.isfinite(norm) or norm < 1e-6:
        raise ValueError(f"{what}: quaternion {q} has no direction (norm {norm:.3g})")
    q = q / norm
    return -q if q[0] < 0 else q


def compose(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The pose ``a * b`` (apply ``b`` in the frame of ``a``)."""
    pos = a[:3] + quat_to_mat(a[3:]) @ b[:3]
    return np.concatenate([pos, unit_quat(quat_mul(a[3:], b[3:]))])


def invert(a: np.ndarray) -> np.ndarray:
    """The inverse pose of ``a``."""
    conj = quat_conj(a[3:])
    return np.concatenate([-(quat_to_mat(conj) @ a[:3]), unit_quat(conj)])


def pose_to_matrix(pose: np.ndarray) -> np.ndarray:
    """A pose (7,) as a 4x4 homogeneous transform."""
    pose = np.asarray(pose, dtype=float)
    out = np.eye(4)
    out[:3, :3] = quat_to_mat(unit_quat(pose[3:7]))
    out[:3, 3] = pose[:3]
    return out


def matrix_to_pose(m: np.ndarray) -> np.ndarray:
    """Pose (7,) of a rigid transform given as a (3, 4) or (4, 4) matrix.

    The rotation block is projected onto the nearest rotation (SVD) first, so that slightly
    non-orthonormal single-precision matrices from device drivers convert cleanly.
    """
    m = np.asarray(m, dtype=float)
    if m.shape not in ((3, 4), (4, 4)) or not np.isfinite(m[:3]).all():
        raise ValueError(f"expected a finite (3, 4) or (4, 4) transform, got shape {m.shape}")
    u, _, vt = np.linalg.svd(m[:3, :3])
    rot = u @ vt
    if np.linalg.det(rot) < 0:
        raise ValueError("the transform's rotation block is a reflection (left-handed frame)")
    return np.concatenate([m[:3, 3], mat_to_quat(rot)])
