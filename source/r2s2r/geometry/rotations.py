"""Batched rotation helpers on numpy arrays of any batch shape; quaternions are (w, x, y, z).

The maths is ``scipy.spatial.transform.Rotation``'s (the tests hold every helper to it).
These run every control period on single poses (the twin's readings, the teleop mapping,
the operator's hand), where scipy's per-call overhead is tens of microseconds against the
conversion's few, so each is a small compiled kernel over a flat batch.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit


def _flat(x: np.ndarray, dim: int) -> tuple[np.ndarray, tuple[int, ...]]:
    """``x`` (..., dim) as a contiguous float64 (k, dim) array of its own (never a view of a
    broadcast, which the kernels may not be handed), and its batch shape."""
    x = np.asarray(x, dtype=np.float64)
    if x.shape[-1:] != (dim,):
        raise ValueError(f"expected an array of shape (..., {dim}), got {x.shape}")
    return np.array(x.reshape(-1, dim), order="C"), x.shape[:-1]


def quat_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Products a * b (apply b, then a) of unit quaternions (..., 4), batch shapes
    broadcast (each factor normalised first, as scipy does)."""
    a, b = np.broadcast_arrays(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))
    fa, batch = _flat(a, 4)
    fb, _ = _flat(b, 4)
    return _quat_mul(fa, fb).reshape(*batch, 4)


def quat_conj(q: np.ndarray) -> np.ndarray:
    """The inverse rotations (..., 4) of unit quaternions (..., 4) (their conjugates)."""
    flat, batch = _flat(q, 4)
    out = _normalized(flat)
    out[:, 1:] *= -1.0
    return out.reshape(*batch, 4)


def quat_to_rotvec(q: np.ndarray) -> np.ndarray:
    """Rotation vectors (..., 3), angle in [0, pi], of unit quaternions (..., 4)."""
    flat, batch = _flat(q, 4)
    return _quat_to_rotvec(flat).reshape(*batch, 3)


def rotvec_to_quat(r: np.ndarray) -> np.ndarray:
    """Unit quaternions (..., 4) of rotation vectors (..., 3)."""
    flat, batch = _flat(r, 3)
    return _rotvec_to_quat(flat).reshape(*batch, 4)


def quat_to_mat(q: np.ndarray) -> np.ndarray:
    """Rotation matrices (..., 3, 3) of unit quaternions (..., 4)."""
    flat, batch = _flat(q, 4)
    return _quat_to_mat(flat).reshape(*batch, 3, 3)


def quat_slerp(a: np.ndarray, b: np.ndarray, t: float) -> np.ndarray:
    """The rotation (4,) a fraction ``t`` of the way from unit quaternion ``a`` to ``b`` along
    the shorter arc (scipy's ``Slerp`` between two key rotations)."""
    qa = np.asarray(a, dtype=np.float64)
    # The relative rotation a^-1 b as a rotation vector (angle <= pi: the shorter arc).
    step = quat_to_rotvec(quat_mul(quat_conj(qa), b))
    return quat_mul(qa, rotvec_to_quat(t * step))


def axis_angle_quat(axis: str, angle_rad: float) -> np.ndarray:
    """The unit quaternion (4,) of a rotation by ``angle_rad`` about ``"x"``, ``"y"`` or
    ``"z"``."""
    k = "xyz".index(axis)
    q = np.zeros(4)
    q[0] = math.cos(angle_rad / 2.0)
    q[1 + k] = math.sin(angle_rad / 2.0)
    return q


@njit(cache=True)
def _normalized(q: np.ndarray) -> np.ndarray:
    out = np.empty_like(q)
    for i in range(q.shape[0]):
        n = math.sqrt(q[i, 0] ** 2 + q[i, 1] ** 2 + q[i, 2] ** 2 + q[i, 3] ** 2)
        for j in range(4):
            out[i, j] = q[i, j] / n
    return out


@njit(cache=True)
def _quat_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = _normalized(a), _normalized(b)
    out = np.empty_like(a)
    for i in range(a.shape[0]):
        w1, x1, y1, z1 = a[i, 0], a[i, 1], a[i, 2], a[i, 3]
        w2, x2, y2, z2 = b[i, 0], b[i, 1], b[i, 2], b[i, 3]
        out[i, 0] = w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2
        out[i, 1] = w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2
        out[i, 2] = w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2
        out[i, 3] = w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2
    return out


@njit(cache=True)
def _quat_to_mat(q: np.ndarray) -> np.ndarray:
    q = _normalized(q)
    out = np.empty((q.shape[0], 3, 3))
    for i in range(q.shape[0]):
        w, x, y, z = q[i, 0], q[i, 1], q[i, 2], q[i, 3]
        out[i, 0, 0] = 1.0 - 2.0 * (y * y + z * z)
        out[i, 0, 1] = 2.0 * (x * y - z * w)
        out[i, 0, 2] = 2.0 * (x * z + y * w)
        out[i, 1, 0] = 2.0 * (x * y + z * w)
        out[i, 1, 1] = 1.0 - 2.0 * (x * x + z * z)
        out[i, 1, 2] = 2.0 * (y * z - x * w)
        out[i, 2, 0] = 2.0 * (x * z - y * w)
        out[i, 2, 1] = 2.0 * (y * z + x * w)
        out[i, 2, 2] = 1.0 - 2.0 * (x * x + y * y)
    return out


@njit(cache=True)
def _quat_to_rotvec(q: np.ndarray) -> np.ndarray:
    q = _normalized(q)
    out = np.empty((q.shape[0], 3))
    for i in range(q.shape[0]):
        # The representative with w >= 0 gives the angle in [0, pi].
        sign = 1.0 if q[i, 0] >= 0.0 else -1.0
        w = sign * q[i, 0]
        s = math.sqrt(q[i, 1] ** 2 + q[i, 2] ** 2 + q[i, 3] ** 2)
        angle = 2.0 * math.atan2(s, w)
        # angle / sin(angle / 2), by its series near zero (as scipy does).
        if angle <= 1e-3:
            a2 = angle * angle
            scale = 2.0 + a2 / 12.0 + 7.0 * a2 * a2 / 2880.0
        else:
            scale = angle / math.sin(angle / 2.0)
        for j in range(3):
            out[i, j] = sign * scale * q[i, 1 + j]
    return out


@njit(cache=True)
def _rotvec_to_quat(r: np.ndarray) -> np.ndarray:
    out = np.empty((r.shape[0], 4))
    for i in range(r.shape[0]):
        angle = math.sqrt(r[i, 0] ** 2 + r[i, 1] ** 2 + r[i, 2] ** 2)
        # sin(angle / 2) / angle, by its series near zero (as scipy does).
        if angle <= 1e-3:
            a2 = angle * angle
            scale = 0.5 - a2 / 48.0 + a2 * a2 / 3840.0
        else:
            scale = math.sin(angle / 2.0) / angle
        out[i, 0] = math.cos(angle / 2.0)
        for j in range(3):
            out[i, 1 + j] = scale * r[i, j]
    return out


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


# Quaternion continuity. A quaternion and its negative are the same rotation; helpers that
# return one representative (w >= 0) make a recorded orientation jump by about 1.4 in one
# frame when it crosses w = 0. Within an episode, recordings keep each quaternion on the
# hemisphere of the previous frame instead.


def continuous_quaternions(x: np.ndarray, starts: tuple[int, ...]) -> np.ndarray:
    """``x`` (T, D) with each quaternion (the 4 columns from each of ``starts``) negated where
    needed so consecutive rows have a non-negative dot product; the first row as given."""
    out = np.array(x, copy=True)
    for s in starts:
        q = out[:, s : s + 4]
        if len(q) < 2:
            continue
        dots = np.einsum("ij,ij->i", q[1:], q[:-1])
        signs = np.cumprod(np.where(dots < 0, -1.0, 1.0))
        q[1:] *= signs[:, None].astype(q.dtype)
    return out


def same_hemisphere(previous: np.ndarray, x: np.ndarray, starts: tuple[int, ...]) -> np.ndarray:
    """``x`` (D,) with each quaternion of ``starts`` on the hemisphere of ``previous``'s."""
    out = np.array(x, copy=True)
    for s in starts:
        if float(np.dot(out[s : s + 4], previous[s : s + 4])) < 0:
            out[s : s + 4] *= -1
    return out
