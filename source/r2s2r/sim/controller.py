"""The arm's Cartesian motion generator, batched over worlds and arms.

The real arm's non-real-time Cartesian mode takes a TCP target at the command rate and moves
towards it under velocity and acceleration limits, after a command delay. Here the limited
motion is generated at the control rate (numpy, shape ``(N, 2, ...)`` for N worlds x 2
arms); the delay and the impedance that tracks the generated pose live in the MuJoCo model
(site-transmission position actuators with an actuator ``delay``), so they run at the physics
rate in C.
"""

from __future__ import annotations

import numpy as np

from r2s2r.spec.world import ArmControllerSpec


def _limited_step(
    error: np.ndarray, vel: np.ndarray, vmax: np.ndarray, amax: np.ndarray, dt: float
) -> np.ndarray:
    """New velocity (..., 3) towards ``error`` that respects vmax/amax and can brake in time."""
    dist = np.sqrt((error * error).sum(-1, keepdims=True))
    # The fastest speed from which the arm can still stop at the target.
    speed = np.minimum(np.minimum(vmax, np.sqrt(2.0 * amax * dist)), dist / dt)
    want = error * (speed / np.maximum(dist, 1e-12))
    dv = want - vel
    n = np.sqrt((dv * dv).sum(-1, keepdims=True))
    return vel + dv * np.minimum(1.0, amax * dt / np.maximum(n, 1e-12))


class MotionGenerator:
    """Velocity/acceleration-limited tracking of TCP targets for (N worlds, 2 arms).

    Poses are 6-vectors in each arm's Cartesian reference frame: position and the rotation
    vector of the orientation, which is what the TCP actuators take as ctrl. The reference
    frame is chosen so that task orientations stay well inside the rotation-vector ball;
    orientation is interpolated linearly in rotation-vector space, which matches the
    geodesic to first order over one control period.
    """

    def __init__(self, cfg: ArmControllerSpec, num_worlds: int, dt: float) -> None:
        self.cfg = cfg
        self.dt = dt
        self.pose = np.zeros((num_worlds, 2, 6))
        # Linear and angular velocity: (N, 2 arms, 2, 3).
        self.vel = np.zeros((num_worlds, 2, 2, 3))
        self._vmax = np.array([[cfg.max_lin_vel], [cfg.max_ang_vel]])
        self._amax = np.array([[cfg.max_lin_acc], [cfg.max_ang_acc]])

    def reset(self, worlds: np.ndarray, pose: np.ndarray) -> None:
        """Start the selected worlds at rest at ``pose`` (k, 2, 6)."""
        self.pose[worlds] = pose
        self.vel[worlds] = 0.0

    def step(self, target: np.ndarray) -> np.ndarray:
        """Advance one control period towards ``target`` (N, 2, 6); returns the new pose."""
        shape = self.vel.shape
        err = (target - self.pose).reshape(shape)
        self.vel = _limited_step(err, self.vel, self._vmax, self._amax, self.dt)
        self.pose = self.pose + self.vel.reshape(self.pose.shape) * self.dt
        return self.pose
