"""Small batched rotation helpers on numpy arrays; quaternions are (w, x, y, z).

They run at the control rate. Batches of a few rows (one world, two arms) go through
MuJoCo's C helpers row by row, which is several times faster than vectorized numpy on such
tiny arrays; larger batches (many worlds) are vectorized.
"""

from __future__ import annotations

from collections.abc import Callable

import mujoco
import numpy as np

# At or below this many input numbers the per-row C path is faster than numpy.
_SMALL_SIZE = 36


def _rows(fn: Callable[..., None], width: int, *arrays: np.ndarray) -> np.ndarray | None:
    """Apply a MuJoCo helper row by row to small same-shaped float batches; else None."""
    a0 = arrays[0]
    if (
        a0.size > _SMALL_SIZE
        or a0.dtype != np.float64
        or any(a.shape != a0.shape or a.dtype != np.float64 for a in arrays[1:])
    ):
        return None
    in_width = 9 if a0.shape[-2:] == (3, 3) else a0.shape[-1]
    batch = a0.shape[: a0.ndim - (2 if in_width == 9 else 1)]
    flat = [a.reshape(-1, in_width) for a in arrays]
    out = np.empty((len(flat[0]), width))
    for i, rows in enumerate(zip(*flat, strict=True)):
        fn(out[i], *rows)
    return out.reshape(batch + (width,))


def quat_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamilton product a * b of quaternions (..., 4)."""
    fast = _rows(mujoco.mju_mulQuat, 4, a, b)
    if fast is not None:
        return fast
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
    return q * np.array([1.0, -1.0, -1.0, -1.0])


def quat_to_rotvec(q: np.ndarray) -> np.ndarray:
    """Rotation vectors (..., 3) with angle in [0, pi] of unit quaternions (..., 4)."""
    fast = _rows(_quat_to_rotvec_row, 3, q)
    if fast is not None:
        return fast
    q = np.where(q[..., :1] < 0, -q, q)
    v = q[..., 1:]
    s = np.linalg.norm(v, axis=-1, keepdims=True)
    angle = 2.0 * np.arctan2(s, q[..., :1])
    # angle / sin(angle / 2) tends to 2 as the angle goes to zero.
    scale = np.where(s > 1e-9, angle / np.maximum(s, 1e-12), 2.0)
    return v * scale


def rotvec_to_quat(r: np.ndarray) -> np.ndarray:
    """Unit quaternions (..., 4) of rotation vectors (..., 3)."""
    fast = _rows(_rotvec_to_quat_row, 4, r)
    if fast is not None:
        return fast
    angle = np.linalg.norm(r, axis=-1, keepdims=True)
    half = 0.5 * angle
    # sin(half) / angle tends to 1/2 as the angle goes to zero.
    scale = np.where(angle > 1e-9, np.sin(half) / np.maximum(angle, 1e-12), 0.5)
    return np.concatenate([np.cos(half), r * scale], axis=-1)


def _quat_to_rotvec_row(out: np.ndarray, q: np.ndarray) -> None:
    mujoco.mju_quat2Vel(out, q, 1.0)


def _rotvec_to_quat_row(out: np.ndarray, r: np.ndarray) -> None:
    out[:] = (1.0, 0.0, 0.0, 0.0)
    mujoco.mju_quatIntegrate(out, r, 1.0)


def mul_to_rotvec(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Rotation vectors (..., 3) of the products a * b of quaternions (..., 4)."""
    fast = _rows(_mul_to_rotvec_row, 3, a, b)
    if fast is not None:
        return fast
    return quat_to_rotvec(quat_mul(a, b))


def _mul_to_rotvec_row(out: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    q = np.empty(4)
    mujoco.mju_mulQuat(q, a, b)
    mujoco.mju_quat2Vel(out, q, 1.0)


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
    fast = _rows(mujoco.mju_mat2Quat, 4, m)
    if fast is not None:
        return np.where(fast[..., :1] < 0, -fast, fast)
    m00, m11, m22 = m[..., 0, 0], m[..., 1, 1], m[..., 2, 2]
    # Each candidate is accurate where its leading component is large; take the best one.
    cands = np.stack(
        [
            np.stack(
                [
                    1 + m00 + m11 + m22,
                    m[..., 2, 1] - m[..., 1, 2],
                    m[..., 0, 2] - m[..., 2, 0],
                    m[..., 1, 0] - m[..., 0, 1],
                ],
                -1,
            ),
            np.stack(
                [
                    m[..., 2, 1] - m[..., 1, 2],
                    1 + m00 - m11 - m22,
                    m[..., 0, 1] + m[..., 1, 0],
                    m[..., 0, 2] + m[..., 2, 0],
                ],
                -1,
            ),
            np.stack(
                [
                    m[..., 0, 2] - m[..., 2, 0],
                    m[..., 0, 1] + m[..., 1, 0],
                    1 - m00 + m11 - m22,
                    m[..., 1, 2] + m[..., 2, 1],
                ],
                -1,
            ),
            np.stack(
                [
                    m[..., 1, 0] - m[..., 0, 1],
                    m[..., 0, 2] + m[..., 2, 0],
                    m[..., 1, 2] + m[..., 2, 1],
                    1 - m00 - m11 + m22,
                ],
                -1,
            ),
        ],
        axis=-2,
    )
    best = np.argmax(
        np.stack(
            [1 + m00 + m11 + m22, 1 + m00 - m11 - m22, 1 - m00 + m11 - m22, 1 - m00 - m11 + m22], -1
        ),
        axis=-1,
    )
    q = np.take_along_axis(cands, best[..., None, None], axis=-2)[..., 0, :]
    q = q / np.linalg.norm(q, axis=-1, keepdims=True)
    return np.where(q[..., :1] < 0, -q, q)
