"""Compiled (numba) kernels for the work done at the control rate, over N worlds x 2 arms.

At 50 Hz the env's own work must stay small next to ten MuJoCo steps; on arrays this small
numpy's per-call cost dominates, so the per-step arithmetic is compiled here instead. Each
kernel loops over worlds, so the same code serves one CPU world and large MuJoCo Warp batches.
The kernels take every size from their arrays (arms from the actuator index tables, joints
from the limits), so they serve any embodiment.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from r2s2r.sim.embodiment import TCP_POSE_DIM

# A TCP pose target: position 3 + quaternion 4 (w, x, y, z); the hand's targets follow it.
_TCP = TCP_POSE_DIM


@njit(cache=True, inline="always")
def _limited_axis(
    pose: np.ndarray,
    vel: np.ndarray,
    target: np.ndarray,
    o: int,
    vmax: float,
    amax: float,
    dt: float,
) -> None:
    """Move pose[o:o+3] one period towards target[o:o+3] under speed/acceleration limits.

    The desired speed is the fastest from which the motion can still stop at the target in
    whole periods (braking at ``amax``, position advanced with the new velocity, so the
    stopping distance of speed v is v^2 / 2a + v dt / 2); the velocity change per period is
    limited by the acceleration bound.
    """
    e0, e1, e2 = target[o] - pose[o], target[o + 1] - pose[o + 1], target[o + 2] - pose[o + 2]
    dist = math.sqrt(e0 * e0 + e1 * e1 + e2 * e2)
    brake = amax * (math.sqrt(0.25 * dt * dt + 2.0 * dist / amax) - 0.5 * dt)
    speed = min(vmax, brake, dist / dt)
    scale = speed / dist if dist > 1e-12 else 0.0
    d0, d1, d2 = e0 * scale - vel[0], e1 * scale - vel[1], e2 * scale - vel[2]
    n = math.sqrt(d0 * d0 + d1 * d1 + d2 * d2)
    k = min(1.0, amax * dt / n) if n > 1e-12 else 1.0
    vel[0] += d0 * k
    vel[1] += d1 * k
    vel[2] += d2 * k
    pose[o] += vel[0] * dt
    pose[o + 1] += vel[1] * dt
    pose[o + 2] += vel[2] * dt


@njit(cache=True)
def tcp_action_to_ctrl(
    action: np.ndarray,
    ref_pos: np.ndarray,
    ref_mat: np.ndarray,
    ref_conj: np.ndarray,
    pose: np.ndarray,
    vel: np.ndarray,
    limits: np.ndarray,
    dt: float,
    hand_lo: np.ndarray,
    hand_hi: np.ndarray,
    cart_idx: np.ndarray,
    hand_idx: np.ndarray,
    ctrl: np.ndarray,
) -> int:
    """TCP actions (N, S x (7 + H)) -> ctrl (N, nu): targets into each arm's reference frame,
    then the motion generator (pose/vel updated in place), the H hand targets clipped to
    their ranges (S arms: the rows of ``cart_idx``).

    Returns -1, or the index of the first world whose TCP quaternion has zero norm.
    """
    target = np.empty(6)
    arms, hand_dof = cart_idx.shape[0], hand_lo.shape[0]
    per_arm = _TCP + hand_dof
    for n in range(action.shape[0]):
        for arm in range(arms):
            a = action[n, arm * per_arm : (arm + 1) * per_arm]
            for j in range(hand_dof):
                ctrl[n, hand_idx[arm, j]] = min(max(a[_TCP + j], hand_lo[j]), hand_hi[j])
            # Position in the reference frame: R^T (p - o).
            p0, p1, p2 = a[0] - ref_pos[arm, 0], a[1] - ref_pos[arm, 1], a[2] - ref_pos[arm, 2]
            m = ref_mat[arm]
            for i in range(3):
                target[i] = m[0, i] * p0 + m[1, i] * p1 + m[2, i] * p2
            qw, qx, qy, qz = a[3], a[4], a[5], a[6]
            norm = math.sqrt(qw * qw + qx * qx + qy * qy + qz * qz)
            if norm < 1e-6:
                return n
            qw, qx, qy, qz = qw / norm, qx / norm, qy / norm, qz / norm
            # Orientation relative to the reference frame: conj(ref) * q.
            cw, cx, cy, cz = ref_conj[arm, 0], ref_conj[arm, 1], ref_conj[arm, 2], ref_conj[arm, 3]
            rw = cw * qw - cx * qx - cy * qy - cz * qz
            rx = cw * qx + cx * qw + cy * qz - cz * qy
            ry = cw * qy - cx * qz + cy * qw + cz * qx
            rz = cw * qz + cx * qy - cy * qx + cz * qw
            if rw < 0.0:
                rw, rx, ry, rz = -rw, -rx, -ry, -rz
            s = math.sqrt(rx * rx + ry * ry + rz * rz)
            scale = 2.0 * math.atan2(s, rw) / s if s > 1e-12 else 2.0
            target[3], target[4], target[5] = rx * scale, ry * scale, rz * scale
            _limited_axis(pose[n, arm], vel[n, arm, 0], target, 0, limits[0, 0], limits[1, 0], dt)
            _limited_axis(pose[n, arm], vel[n, arm, 1], target, 3, limits[0, 1], limits[1, 1], dt)
            for k in range(6):
                ctrl[n, cart_idx[arm, k]] = pose[n, arm, k]
    return -1


@njit(cache=True)
def joint_action_to_ctrl(
    action: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    step_limit: np.ndarray,
    hand_lo: np.ndarray,
    hand_hi: np.ndarray,
    joint_idx: np.ndarray,
    hand_idx: np.ndarray,
    ctrl: np.ndarray,
) -> None:
    """Joint actions (N, S x (J + H)) -> ctrl: the J arm targets clipped to the joint range and
    moved at most ``step_limit`` (velocity limit x period) from the previous command; the H
    hand targets clipped (S arms: the rows of ``joint_idx``)."""
    arms, arm_dof, hand_dof = joint_idx.shape[0], lo.shape[0], hand_lo.shape[0]
    per_arm = arm_dof + hand_dof
    for n in range(action.shape[0]):
        for arm in range(arms):
            a = action[n, arm * per_arm : (arm + 1) * per_arm]
            for j in range(arm_dof):
                want = min(max(a[j], lo[j]), hi[j])
                prev = ctrl[n, joint_idx[arm, j]]
                ctrl[n, joint_idx[arm, j]] = prev + min(
                    max(want - prev, -step_limit[j]), step_limit[j]
                )
            for j in range(hand_dof):
                ctrl[n, hand_idx[arm, j]] = min(max(a[arm_dof + j], hand_lo[j]), hand_hi[j])


# Object status codes.
PENDING, SORTED, WRONG_BIN, DROPPED = 0, 1, 2, 3


@njit(cache=True)
def judge(
    qpos: np.ndarray,
    qvel: np.ndarray,
    qadr: np.ndarray,
    vadr: np.ndarray,
    spawned: np.ndarray,
    assigned: np.ndarray,
    status: np.ndarray,
    bin_centre: np.ndarray,
    bin_inv_rot: np.ndarray,
    bin_half: np.ndarray,
    belt_centre: np.ndarray,
    belt_inv_rot: np.ndarray,
    belt_half: np.ndarray,
    settle_speed: float,
    drop_line: float,
    rest_line: float,
) -> None:
    """Update pending objects' status (N, S) in place.

    Sorted: at rest inside its bin. Wrong bin: at rest inside another. Dropped: below the
    drop line outside every bin, or at rest below the rest line off the belt and outside
    every bin (on the table or the floor).
    """
    for n in range(status.shape[0]):
        for s in range(status.shape[1]):
            if status[n, s] != PENDING or not spawned[n, s]:
                continue
            a, v = qadr[n, s], vadr[n, s]
            x, y, z = qpos[n, a], qpos[n, a + 1], qpos[n, a + 2]
            speed2 = qvel[n, v] ** 2 + qvel[n, v + 1] ** 2 + qvel[n, v + 2] ** 2
            at_rest = speed2 < settle_speed * settle_speed
            low = z < drop_line
            if not (at_rest or low):
                continue
            inside = -1
            for b in range(bin_centre.shape[0]):
                d0, d1, d2 = x - bin_centre[b, 0], y - bin_centre[b, 1], z - bin_centre[b, 2]
                r = bin_inv_rot[b]
                lx = r[0, 0] * d0 + r[0, 1] * d1 + r[0, 2] * d2
                ly = r[1, 0] * d0 + r[1, 1] * d1 + r[1, 2] * d2
                lz = r[2, 0] * d0 + r[2, 1] * d1 + r[2, 2] * d2
                # The inside reaches a little above the walls (objects resting on others).
                if (
                    abs(lx) < bin_half[b, 0]
                    and abs(ly) < bin_half[b, 1]
                    and (0.0 < lz < 1.5 * bin_half[b, 2])
                ):
                    inside = b
                    break
            if inside >= 0:
                if at_rest:
                    status[n, s] = SORTED if inside == assigned[n, s] else WRONG_BIN
                continue
            d0, d1 = x - belt_centre[0], y - belt_centre[1]
            bx = belt_inv_rot[0, 0] * d0 + belt_inv_rot[0, 1] * d1
            by = belt_inv_rot[1, 0] * d0 + belt_inv_rot[1, 1] * d1
            off_belt = abs(bx) > belt_half[0] or abs(by) > belt_half[1]
            if low or (at_rest and off_belt and z < rest_line):
                status[n, s] = DROPPED
