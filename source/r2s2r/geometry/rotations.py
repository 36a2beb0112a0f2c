"""Batched rotation helpers on numpy arrays; quaternions are (w, x, y, z).

``mat_to_quat`` runs every control step (the TCP orientation in the observation), so it is
compiled; the rest serve set-up code and tests.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit


def quat_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamilton product a * b of quaternions (..., 4)."""
    aw, ax, ay, az = np.moveaxis(a, -1, 0)
    bw, bx, by, bz = np.moveaxis(b, -1, 0)
    return np.stack(
        [
            aw * bw - ax * bx - ay * by - az * bz,
            aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw,
        ],
        axis=-1,
    )


def quat_conj(q: np.ndarray) -> np.ndarray:
    """Conjugates (..., 4) of quaternions (..., 4): the inverse rotations of unit ones."""
    return q * np.array([1.0, -1.0, -1.0, -1.0])


def quat_to_rotvec(q: np.ndarray) -> np.ndarray:
    """Rotation vectors (..., 3) with angle in [0, pi] of unit quaternions (..., 4)."""
    q = np.where(q[..., :1] < 0, -q, q)
    v = q[..., 1:]
    s = np.linalg.norm(v, axis=-1, keepdims=True)
    angle = 2.0 * np.arctan2(s, q[..., :1])
    # angle / sin(angle / 2) tends to 2 as the angle goes to zero.
    scale = np.where(s > 1e-9, angle / np.maximum(s, 1e-12), 2.0)
    return v * scale


def rotvec_to_quat(r: np.ndarray) -> np.ndarray:
    """Unit quaternions (..., 4) of rotation vectors (..., 3)."""
    angle = np.linalg.norm(r, axis=-1, keepdims=True)
    half = 0.5 * angle
    # sin(half) / angle tends to 1/2 as the angle goes to zero.
    scale = np.where(angle > 1e-9, np.sin(half) / np.maximum(angle, 1e-12), 0.5)
    return np.concatenate([np.cos(half), r * scale], axis=-1)


def quat_to_mat(q: np.ndarray) -> np.ndarray:
    """Rotation matrices (..., 3, 3) of unit quaternions (..., 4)."""
    w, x, y, z = np.moveaxis(q, -1, 0)
    return np.stack(
        [
            np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
            np.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], -1),
            np.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1),
        ],
        axis=-2,
    )


def mat_to_quat(m: np.ndarray) -> np.ndarray:
    """Unit quaternions (..., 4) with w >= 0 of rotation matrices (..., 3, 3)."""
    flat = np.ascontiguousarray(m, dtype=np.float64).reshape(-1, 9)
    return _mat_to_quat(flat).reshape(m.shape[:-2] + (4,))


@njit(cache=True)
def _mat_to_quat(mats: np.ndarray) -> np.ndarray:
    """Unit quaternions (k, 4), w >= 0, of row-major rotation matrices (k, 9)."""
    out = np.empty((mats.shape[0], 4))
    for i in range(mats.shape[0]):
        m = mats[i]
        trace = m[0] + m[4] + m[8]
        # Take the largest of 4w^2, 4x^2, 4y^2, 4z^2 for accuracy.
        if trace >= m[0] and trace >= m[4] and trace >= m[8]:
            s = 2.0 * math.sqrt(1.0 + trace)
            w, x, y, z = 0.25 * s, (m[7] - m[5]) / s, (m[2] - m[6]) / s, (m[3] - m[1]) / s
        elif m[0] >= m[4] and m[0] >= m[8]:
            s = 2.0 * math.sqrt(1.0 + m[0] - m[4] - m[8])
            w, x, y, z = (m[7] - m[5]) / s, 0.25 * s, (m[1] + m[3]) / s, (m[2] + m[6]) / s
        elif m[4] >= m[8]:
            s = 2.0 * math.sqrt(1.0 + m[4] - m[0] - m[8])
            w, x, y, z = (m[2] - m[6]) / s, (m[1] + m[3]) / s, 0.25 * s, (m[5] + m[7]) / s
        else:
            s = 2.0 * math.sqrt(1.0 + m[8] - m[0] - m[4])
            w, x, y, z = (m[3] - m[1]) / s, (m[2] + m[6]) / s, (m[5] + m[7]) / s, 0.25 * s
        n = math.sqrt(w * w + x * x + y * y + z * z)
        sign = 1.0 if w >= 0.0 else -1.0
        out[i, 0], out[i, 1], out[i, 2], out[i, 3] = (
            sign * w / n,
            sign * x / n,
            sign * y / n,
            (sign * z / n),
        )
    return out
