"""One arm of the cell model for planning: forward and inverse kinematics on MuJoCo's
Jacobians, and collision checks of arm and hand configurations against the cell's fixed
parts (table, belt, bins) and the other arm.
"""

from __future__ import annotations

import mujoco
import numpy as np
from scipy.spatial.transform import Rotation

from r2s2r.sim import robots
from r2s2r.sim.cell import ARM_DOF, HAND_DOF

_FIXED = ("world", "belt", "belt_frame", "bin:left bin", "bin:right bin")
# Penetration (m) below which a contact counts as a collision (MuJoCo reports contacts
# within the geoms' margins too).
TOUCH_M = 0.002


def _clamp(v: np.ndarray, most: float) -> np.ndarray:
    n = float(np.linalg.norm(v))
    return v if n <= most else v * (most / n)


def _bodies(model: mujoco.MjModel, prefix: str) -> set[int]:
    return {b for b in range(model.nbody) if model.body(b).name.startswith(prefix)}


def _geoms(model: mujoco.MjModel, bodies: set[int]) -> np.ndarray:
    return np.array([g for g in range(model.ngeom) if model.geom_bodyid[g] in bodies])


class ArmKinematics:
    """Kinematics and collision checks of arm ``side`` in ``model`` (a cell scene), on a
    scratch ``MjData`` starting from ``qpos`` (the cell's home state: objects stored away)."""

    def __init__(self, model: mujoco.MjModel, side: str, qpos: np.ndarray) -> None:
        self.model, self.side = model, side
        self.data = mujoco.MjData(model)
        self.data.qpos[:] = qpos
        joints = [model.joint(f"{side}_j{i + 1}") for i in range(ARM_DOF)]
        self.qadr = np.array([j.qposadr[0] for j in joints])
        self.dadr = np.array([j.dofadr[0] for j in joints])
        hand = [model.joint(f"{side}_hand_f{f}_j{k}") for f in range(1, 6) for k in range(1, 5)]
        self.hand_qadr = np.array([j.qposadr[0] for j in hand])
        self.site = model.site(f"{side}_tcp").id
        self.lo = robots.RIZON4S_JOINT_RANGES[:, 0]
        self.hi = robots.RIZON4S_JOINT_RANGES[:, 1]
        other = "right" if side == "left" else "left"
        links = {model.body(f"{side}_link{i}").id for i in range(1, 8)}
        links.add(model.body(f"{side}_flange").id)
        hand_bodies = _bodies(model, f"{side}_hand_")
        fixed = {model.body(b).id for b in _FIXED} | _bodies(model, f"{other}_")
        self.link_geoms = _geoms(model, links)
        self.hand_geoms = _geoms(model, hand_bodies)
        self.fixed_geoms = _geoms(model, fixed)
        self._jp = np.zeros((3, model.nv))
        self._jr = np.zeros((3, model.nv))

    # ------------------------------------------------------------------ kinematics
    def _set(self, q: np.ndarray, hand: np.ndarray | None = None) -> None:
        self.data.qpos[self.qadr] = q
        if hand is not None:
            self.data.qpos[self.hand_qadr] = hand
        mujoco.mj_kinematics(self.model, self.data)
        mujoco.mj_comPos(self.model, self.data)

    def fk(self, q: np.ndarray) -> np.ndarray:
        """TCP pose (7,: x y z qw qx qy qz) at arm joints ``q``."""
        self._set(q)
        quat = np.empty(4)
        mujoco.mju_mat2Quat(quat, self.data.site_xmat[self.site])
        return np.concatenate([self.data.site_xpos[self.site], quat])

    def jacobian(self, q: np.ndarray) -> np.ndarray:
        """The TCP's 6x7 Jacobian (linear over angular) at ``q``."""
        self._set(q)
        mujoco.mj_jacSite(self.model, self.data, self._jp, self._jr, self.site)
        return np.vstack([self._jp[:, self.dadr], self._jr[:, self.dadr]])

    def ik(
        self,
        pose: np.ndarray,
        seed: np.ndarray,
        iters: int = 300,
        tol_m: float = 1e-3,
        tol_rad: float = 1e-2,
    ) -> tuple[np.ndarray, bool]:
        """Joints that put the TCP at ``pose``: damped least squares from ``seed`` within the
        joint limits, with the redundancy used to stay near ``seed``. Returns (q, reached)."""
        q = np.clip(np.asarray(seed, float).copy(), self.lo + 1e-3, self.hi - 1e-3)
        target_r = Rotation.from_quat(pose[3:], scalar_first=True)
        err = np.zeros(6)
        for _ in range(iters):
            now = self.fk(q)
            err[:3] = pose[:3] - now[:3]
            err[3:] = (target_r * Rotation.from_quat(now[3:], scalar_first=True).inv()).as_rotvec()
            if np.linalg.norm(err[:3]) < tol_m and np.linalg.norm(err[3:]) < tol_rad:
                return q, True
            # Small steps along the error (at most 3 cm and 0.15 rad each) keep the solution
            # on the seed's branch instead of jumping across the workspace.
            scaled = np.concatenate([_clamp(err[:3], 0.03), _clamp(err[3:], 0.15)])
            jac = self.jacobian(q)
            jjt = jac @ jac.T + 1e-4 * np.eye(6)
            step = jac.T @ np.linalg.solve(jjt, scaled)
            null = np.eye(ARM_DOF) - jac.T @ np.linalg.solve(jjt, jac)
            step += null @ (0.05 * (seed - q))
            q = np.clip(q + step, self.lo + 1e-3, self.hi - 1e-3)
        return q, False

    def tcp_velocity_to_joints(self, q: np.ndarray, twist: np.ndarray) -> np.ndarray:
        """Joint velocities (7,) that move the TCP with ``twist`` (linear, angular) at ``q``."""
        jac = self.jacobian(q)
        return jac.T @ np.linalg.solve(jac @ jac.T + 1e-6 * np.eye(6), twist)

    # ------------------------------------------------------------------ collisions
    def collides(
        self, q: np.ndarray, hand: np.ndarray | None = None, links_only: bool = False
    ) -> bool:
        """Whether the arm (and, unless ``links_only``, its hand in posture ``hand``)
        penetrates the table, belt, bins or the other arm at joints ``q``."""
        self._set(q, hand if hand is not None else np.zeros(HAND_DOF))
        mujoco.mj_collision(self.model, self.data)
        n = self.data.ncon
        if n == 0:
            return False
        con = self.data.contact
        g1, g2, dist = con.geom1[:n], con.geom2[:n], con.dist[:n]
        mine = self.link_geoms if links_only else np.concatenate([self.link_geoms, self.hand_geoms])
        a = np.isin(g1, mine) & np.isin(g2, self.fixed_geoms)
        b = np.isin(g2, mine) & np.isin(g1, self.fixed_geoms)
        return bool(((a | b) & (dist < -TOUCH_M)).any())
