"""Batched rotation helpers on numpy arrays of any batch shape; quaternions are (w, x, y, z).

The maths is ``scipy.spatial.transform.Rotation``'s; these wrappers give it the project's
scalar-first convention and arbitrary leading batch dimensions. ``mat_to_quat`` runs every
control step (the TCP orientation in the observation), where scipy's per-call overhead
dominates a single matrix, so it has its own compiled kernel (tested against scipy).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit
from scipy.spatial.transform import Rotation


def _rotations(q: np.ndarray) -> tuple[Rotation, tuple[int, ...]]:
    """The rotations of quaternions (..., 4), flattened, and their batch shape."""
    q = np.asarray(q, dtype=np.float64)
    return Rotation.from_quat(q.reshape(-1, 4), scalar_first=True), q.shape[:-1]


def _quats(r: Rotation, batch: tuple[int, ...]) -> np.ndarray:
    return r.as_quat(canonical=False, scalar_first=True).reshape(*batch, 4)


def quat_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Products a * b (apply b, then a) of unit quaternions (..., 4), batch shapes
    broadcast."""
    a, b = np.broadcast_arrays(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))
    ra, batch = _rotations(a)
    rb, _ = _rotations(b)
    return _quats(ra * rb, batch)


def quat_conj(q: np.ndarray) -> np.ndarray:
    """The inverse rotations (..., 4) of unit quaternions (..., 4) (their conjugates)."""
    r, batch = _rotations(q)
    return _quats(r.inv(), batch)


def quat_to_rotvec(q: np.ndarray) -> np.ndarray:
    """Rotation vectors (..., 3), angle in [0, pi], of unit quaternions (..., 4)."""
    r, batch = _rotations(q)
    return r.as_rotvec().reshape(*batch, 3)


def rotvec_to_quat(r: np.ndarray) -> np.ndarray:
    """Unit quaternions (..., 4) of rotation vectors (..., 3)."""
    r = np.asarray(r, dtype=np.float64)
    return _quats(Rotation.from_rotvec(r.reshape(-1, 3)), r.shape[:-1])


def quat_to_mat(q: np.ndarray) -> np.ndarray:
    """Rotation matrices (..., 3, 3) of unit quaternions (..., 4)."""
    r, batch = _rotations(q)
    return r.as_matrix().reshape(*batch, 3, 3)


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
