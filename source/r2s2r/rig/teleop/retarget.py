"""Retargeting a human hand (21 keypoints) to the joints of the robot hand (the Wuji hand's 20).

The objective follows the vector / DexPilot formulation: the robot's vectors from the wrist
to each fingertip and to each middle knuckle, and from the thumb tip to every other
fingertip, should match the human's (scaled by the ratio of hand sizes); thumb-to-finger
vectors get a much larger weight when the human pinches (tip distance below ``pinch_m``),
so pinches are kept closed on the robot. It is solved by damped Gauss-Newton on the hand's
MuJoCo kinematics, warm-started from the previous solution and kept inside the joint
limits.

Keypoints are in the wrist (palm base) frame of the hand, in the MediaPipe / MANO order:
wrist, then for thumb, index, middle, ring, little: four points from the base to the tip.
"""

from __future__ import annotations

import mujoco
import numpy as np

from r2s2r.sim import robots
from r2s2r.spec import Spec
from r2s2r.spec.base import NonNeg, Pos, PosInt

NUM_KEYPOINTS = 21
# Vector pairs (from keypoint, to keypoint): wrist to tips and wrist to middle knuckles
# (vector objective), thumb tip to the other tips (DexPilot).
TIPS = (4, 8, 12, 16, 20)
MIDDLES = (2, 6, 10, 14, 18)
PAIRS = (
    tuple((0, t) for t in TIPS) + tuple((0, m) for m in MIDDLES) + tuple((4, t) for t in TIPS[1:])
)


class HandKinematics:
    """Keypoint positions (21, 3) and their Jacobians for a standalone robot hand."""

    def __init__(self, side: str = "right") -> None:
        spec = mujoco.MjSpec()
        spec.compiler.degree = False
        # The hand turned as it is on the flange: keypoints are in the TCP's axes (fingers +z,
        # palm normal +y), whichever way the hand's own palm frame points.
        names = robots.add_wuji_hand(
            spec.worldbody, "", quat=robots.HAND_MOUNT_QUAT, side=side, gravcomp=0.0
        )
        self.model = spec.compile()
        self.data = mujoco.MjData(self.model)
        self.lo = self.model.jnt_range[:, 0].copy()
        self.hi = self.model.jnt_range[:, 1].copy()
        self.dof = len(names.joints)
        qadr = [self.model.joint(j).qposadr[0] for j in names.joints]
        if qadr != list(range(self.dof)):
            raise RuntimeError("the hand model's joints are not in thumb-first order")
        # Each keypoint is a body origin (a joint) or a fingertip site.
        self._points: list[tuple[str, int]] = [("body", self.model.body("palm_link").id)]
        for finger in range(1, 6):
            for link in (2, 3, 4):
                self._points.append(("body", self.model.body(f"finger{finger}_link{link}").id))
            self._points.append(("site", self.model.site(f"finger{finger}_tip").id))
        self._jac = np.zeros((3, self.model.nv))

    def forward(self, q: np.ndarray) -> np.ndarray:
        """Keypoints (21, 3) of joint configuration ``q`` (dof,)."""
        self.data.qpos[:] = q
        mujoco.mj_kinematics(self.model, self.data)
        mujoco.mj_comPos(self.model, self.data)  # The Jacobians need cdof.
        return np.array(
            [
                self.data.xpos[i] if kind == "body" else self.data.site_xpos[i]
                for kind, i in self._points
            ]
        )

    def jacobians(self) -> np.ndarray:
        """Position Jacobians (21, 3, dof) at the configuration of the last ``forward``."""
        out = np.empty((NUM_KEYPOINTS, 3, self.model.nv))
        for k, (kind, i) in enumerate(self._points):
            if kind == "body":
                mujoco.mj_jacBody(self.model, self.data, self._jac, None, i)
            else:
                mujoco.mj_jacSite(self.model, self.data, self._jac, None, i)
            out[k] = self._jac
        return out


class RetargetCfg(Spec):
    """Weights and solver settings of the retargeting objective."""

    # Robot hand size over human hand size (the human vectors are scaled by it).
    scale: Pos = 1.0
    pinch_m: NonNeg = 0.02  # Human thumb-tip distance below which a pinch is enforced.
    pinch_weight: Pos = 10.0
    middle_weight: NonNeg = 0.5
    smooth_weight: NonNeg = 1e-3  # Pull towards the previous solution (temporal smoothing).
    iterations: PosInt = 6
    tolerance: NonNeg = 1e-7


class Retargeter:
    """Solves joint angles for streams of human keypoints; call ``solve`` once per frame."""

    def __init__(self, config: RetargetCfg | None = None, side: str = "right") -> None:
        self.cfg = config or RetargetCfg()
        self.kin = HandKinematics(side)
        self.q = np.clip(np.zeros(self.kin.dof), self.kin.lo, self.kin.hi)
        self._a = np.array([a for a, _ in PAIRS])
        self._b = np.array([b for _, b in PAIRS])

    def reset(self, q: np.ndarray | None = None) -> None:
        self.q = np.clip(np.zeros(self.kin.dof) if q is None else q, self.kin.lo, self.kin.hi)

    def solve(self, keypoints: np.ndarray) -> np.ndarray:
        """Joint angles (dof,) for human keypoints (21, 3) in the wrist frame (metres)."""
        keypoints = np.asarray(keypoints, dtype=float)
        if keypoints.shape != (NUM_KEYPOINTS, 3) or not np.isfinite(keypoints).all():
            raise ValueError(f"keypoints: expected 21 finite 3-D points, got {keypoints.shape}")
        cfg = self.cfg
        target = (keypoints[self._b] - keypoints[self._a]) * cfg.scale
        weights = np.ones(len(PAIRS))
        weights[5:10] = cfg.middle_weight
        pinch = np.linalg.norm(target[10:], axis=1) < cfg.pinch_m * cfg.scale
        weights[10:] = np.where(pinch, cfg.pinch_weight, 1.0)
        w = np.sqrt(weights)[:, None]
        prev = self.q.copy()
        q = prev.copy()
        lam = cfg.smooth_weight
        for _ in range(cfg.iterations):
            points = self.kin.forward(q)
            jac = self.kin.jacobians()
            resid = ((points[self._b] - points[self._a]) - target) * w
            jvec = (jac[self._b] - jac[self._a]) * w[..., None]
            J = jvec.reshape(-1, self.kin.dof)
            r = resid.reshape(-1)
            # Damped Gauss-Newton with a pull towards the previous frame's solution.
            H = J.T @ J + lam * np.eye(self.kin.dof)
            g = J.T @ r + lam * (q - prev)
            dq = np.linalg.solve(H, -g)
            q = np.clip(q + dq, self.kin.lo, self.kin.hi)
            if float(dq @ dq) < cfg.tolerance:
                break
        self.q = q
        return q.copy()
