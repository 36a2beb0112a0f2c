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
        self.limits = np.array(
            [[cfg.max_lin_vel, cfg.max_ang_vel], [cfg.max_lin_acc, cfg.max_ang_acc]]
        )

    def reset(self, worlds: np.ndarray, pose: np.ndarray) -> None:
        """Start the selected worlds at rest at ``pose`` (k, 2, 6)."""
        self.pose[worlds] = pose
        self.vel[worlds] = 0.0
