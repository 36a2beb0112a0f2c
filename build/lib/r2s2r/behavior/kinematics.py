"""One arm of the cell model for planning: forward and inverse kinematics on MuJoCo's
Jacobians, and collision checks of arm and hand configurations against the cell's fixed
parts (table, belt, bins), the other arm and the arm itself.

The inverse kinematics is damped least squares from a seed, using the redundancy to stay
near it. With collision limits, a solution that touches a fixed part is solved again with
velocity-damper inequalities in a small quadratic program per iteration (daqp): the distance
from each arm (and hand) geom to each obstacle within ``detect_m`` may shrink by at most a
share of its excess over ``safety_m`` per iteration. The distances come from MuJoCo's own
collision detection, on a model whose arm and hand geoms were compiled with a margin of
``detect_m`` (``planning_model``).
"""

from __future__ import annotations

import daqp
import mujoco
import numpy as np
from pydantic import model_validator
from scipy.spatial.transform import Rotation

from r2s2r.sim.embodiment import Embodiment
from r2s2r.sim.scene import build_spec
from r2s2r.spec import Spec, TaskSpec, WorldSpec
from r2s2r.spec.base import NonNeg, Pos, Share
from r2s2r.spec.world import ARM_SIDES

# The cell's parts that do not move (the world body holds the table and the floor).
FIXED_BODIES = ("world", "belt", "belt_frame", "bin:left bin", "bin:right bin")
# Penetration (m) below which a contact counts as a collision (MuJoCo reports contacts
# within the geoms' margins too).
TOUCH_M = 0.002
_NONE: tuple[None, None, float] = (None, None, np.inf)  # No obstacle within reach.
# Links this close along the chain (link1 .. link7, flange, hand) are not checked against
# each other: their capsules meet about the joints between them (link2 and link4 graze at
# ordinary elbow angles), where the real arm's joint limits keep them apart.
SELF_SKIP = 2


def arm_chain(model: mujoco.MjModel, side: str) -> np.ndarray:
    """Per geom (ngeom,): its place along arm ``side``'s chain (1-7 the links, 8 the
    flange, 9 the hand), -1 off the arm."""
    chain = np.full(model.ngeom, -1)
    names = [f"{side}_link{i}" for i in range(1, 8)] + [f"{side}_flange"]
    place = {model.body(n).id: i + 1 for i, n in enumerate(names)}
    for g in range(model.ngeom):
        body = int(model.geom_bodyid[g])
        if body in place:
            chain[g] = place[body]
        elif model.body(body).name.startswith(f"{side}_hand_"):
            chain[g] = 9
    return chain


def self_contacts(chain: np.ndarray, g1: np.ndarray, g2: np.ndarray) -> np.ndarray:
    """Which contacts (geom pairs g1, g2) are the arm against itself: a link against a link
    or the hand more than ``SELF_SKIP`` places along the chain (not the hand against itself)."""
    c1, c2 = chain[g1], chain[g2]
    arm = (c1 >= 0) & (c2 >= 0) & ((c1 < 9) | (c2 < 9))
    return arm & (np.abs(c1 - c2) > SELF_SKIP)


class AvoidCfg(Spec):
    """Collision limits of the inverse kinematics."""

    detect_m: Pos = 0.05  # Obstacles nearer than this are constrained.
    safety_m: NonNeg = 0.01  # The distance the solution keeps from them.
    gain: Share = 0.5  # Share of the distance's excess over ``safety_m`` one step may use.

    @model_validator(mode="after")
    def _check(self) -> AvoidCfg:
        if self.safety_m >= self.detect_m:
            raise ValueError(
                f"safety_m: {self.safety_m} must be below detect_m {self.detect_m} (obstacles "
                "are seen only within detect_m)"
            )
        return self


# The default collision limits (also the margin ``planning_model`` builds for).
DEFAULT_AVOID = AvoidCfg()


def _clamp(v: np.ndarray, most: float) -> np.ndarray:
    n = float(np.linalg.norm(v))
    return v if n <= most else v * (most / n)


def _bodies(model: mujoco.MjModel, prefix: str) -> set[int]:
    return {b for b in range(model.nbody) if model.body(b).name.startswith(prefix)}


def body_geoms(model: mujoco.MjModel, bodies: set[int]) -> np.ndarray:
    """The geoms (ids) on ``bodies`` (ids)."""
    return np.array([g for g in range(model.ngeom) if model.geom_bodyid[g] in bodies])


def planning_model(
    task: TaskSpec, world: WorldSpec, detect_m: float = DEFAULT_AVOID.detect_m
) -> mujoco.MjModel:
    """The cell compiled for planning: every arm and hand geom carries a margin of
    ``detect_m``, so that MuJoCo's collision detection reports their distances to the
    obstacles nearer than that. (The margin must be in place when the model compiles: the
    bounding volumes that cull far pairs are built then.)"""
    spec = build_spec(task, world)
    for body in spec.bodies:
        if body.name.startswith(tuple(f"{s}_" for s in ARM_SIDES)):
            for geom in body.geoms:
                geom.margin = max(geom.margin, detect_m)
    return spec.compile()


class ArmKinematics:
    """Kinematics and collision checks of arm ``side`` in ``model`` (a cell model; for
    collision limits in the IK, one from ``planning_model``), on a scratch ``MjData``
    starting from ``qpos`` (the cell's home state: objects stored away)."""

    def __init__(
        self, model: mujoco.MjModel, side: str, qpos: np.ndarray, avoid: AvoidCfg = DEFAULT_AVOID
    ) -> None:
        self.model, self.side, self.avoid = model, side, avoid
        self.data = mujoco.MjData(model)
        self.data.qpos[:] = qpos
        self.embodiment = emb = Embodiment.of(model)
        joints = [model.joint(j) for j in emb.arm_joint_names(side)]
        self.qadr = np.array([j.qposadr[0] for j in joints])
        self.dadr = np.array([j.dofadr[0] for j in joints])
        hand = [model.joint(j) for j in emb.hand_joint_names(side)]
        self.hand_qadr = np.array([j.qposadr[0] for j in hand])
        self.site = model.site(emb.tcp_sites[emb.sides.index(side)]).id
        self.lo = emb.arm_limits[:, 0]
        self.hi = emb.arm_limits[:, 1]
        other = "right" if side == "left" else "left"
        links = {model.body(f"{side}_link{i}").id for i in range(1, 8)}
        links.add(model.body(f"{side}_flange").id)
        hand_bodies = _bodies(model, f"{side}_hand_")
        fixed = {model.body(b).id for b in FIXED_BODIES} | _bodies(model, f"{other}_")
        self.link_geoms = body_geoms(model, links)
        self.hand_geoms = body_geoms(model, hand_bodies)
        self.fixed_geoms = body_geoms(model, fixed)
        self.chain = arm_chain(model, side)
        self._arm_and_hand = np.concatenate([self.link_geoms, self.hand_geoms])
        # The chain without the hand, for checks of the links alone.
        self._link_chain = np.where(self.chain == 9, -1, self.chain)
        # Distances are seen only within the arm's geoms' margin (compiled in).
        self.sees_m = float(model.geom_margin[self._arm_and_hand].min())
        self._open = np.zeros(emb.hand_dof)
        self._jp = np.zeros((3, model.nv))
        self._jr = np.zeros((3, model.nv))

    # ------------------------------------------------------------------ kinematics
    def _set(self, q: np.ndarray, hand: np.ndarray | None = None) -> None:
        """Pose the arm at ``q`` and its hand at ``hand`` (open, all zeros, by default):
        always both, so no result depends on an earlier call's hand (the Jacobian is taken
        about the subtree's centre of mass, which the hand moves)."""
        self.data.qpos[self.qadr] = q
        self.data.qpos[self.hand_qadr] = self._open if hand is None else hand
        mujoco.mj_kinematics(self.model, self.data)
        mujoco.mj_comPos(self.model, self.data)

    def fk(self, q: np.ndarray) -> np.ndarray:
        """TCP pose (7,: x y z qw qx qy qz) at arm joints ``q``."""
        self._set(q)
        return self._tcp_pose()

    def jacobian(self, q: np.ndarray) -> np.ndarray:
        """The TCP's 6x7 Jacobian (linear over angular) at ``q``."""
        self._set(q)
        return self._tcp_jacobian()

    def _tcp_pose(self) -> np.ndarray:
        quat = np.empty(4)
        mujoco.mju_mat2Quat(quat, self.data.site_xmat[self.site])
        return np.concatenate([self.data.site_xpos[self.site], quat])

    def _tcp_jacobian(self) -> np.ndarray:
        mujoco.mj_jacSite(self.model, self.data, self._jp, self._jr, self.site)
        return np.vstack([self._jp[:, self.dadr], self._jr[:, self.dadr]])

    def ik(
        self,
        pose: np.ndarray,
        seed: np.ndarray,
        *,
        iters: int = 300,
        tol_m: float = 1e-3,
        tol_rad: float = 1e-2,
        avoid: str | None = None,
        hand: np.ndarray | None = None,
    ) -> tuple[np.ndarray, bool]:
        """Joints that put the TCP at ``pose`` (7,), starting from ``seed`` (7,): within the
        joint limits, using the redundancy to stay near ``seed``, and with ``avoid`` "links"
        (the arm) or "all" (arm and hand in posture ``hand``, (20,)) kept ``safety_m`` from
        the fixed parts. Returns (q, reached); with ``avoid``, reached means collision-free
        too (``collides`` with the same arguments), and a target the limits keep out of reach
        is not reached."""
        if avoid not in (None, "links", "all"):
            raise ValueError(f"avoid must be None, 'links' or 'all', not {avoid!r}")
        if avoid and self.sees_m < self.avoid.detect_m:
            raise ValueError(
                f"collision limits need the arm's geoms compiled with a margin of at least "
                f"{self.avoid.detect_m} m (theirs: {self.sees_m} m); build the model with "
                "planning_model()"
            )
        q, reached = self._descend(pose, seed, seed, iters, tol_m, tol_rad, None, None)
        links_only = avoid == "links"
        if avoid is None or not self.collides(q, hand, links_only=links_only):
            return q, reached
        # Under the limits: first from the free solution, near the target, the fixed parts
        # pushing the arm out; then from the seed, where the limits steer the arm round
        # them from the start (though an obstacle between the seed and the target may
        # hold it up, as it would a path).
        for start in (q, seed):
            q, reached = self._descend(pose, start, seed, iters, tol_m, tol_rad, avoid, hand)
            if reached:
                break
        # The limits keep off the fixed parts only; the arm may still touch itself.
        return q, reached and not self.collides(q, hand, links_only=links_only)

    def _descend(
        self,
        pose: np.ndarray,
        start: np.ndarray,
        seed: np.ndarray,
        iters: int,
        tol_m: float,
        tol_rad: float,
        avoid: str | None,
        hand: np.ndarray | None,
    ) -> tuple[np.ndarray, bool]:
        """Iterate from ``start`` toward ``pose``; with ``avoid``, under collision limits
        (with the hand in posture ``hand``), until reached or held."""
        lo, hi = self.lo + 1e-3, self.hi - 1e-3
        q = np.clip(np.asarray(start, float).copy(), lo, hi)
        target_r = Rotation.from_quat(pose[3:], scalar_first=True)
        err = np.zeros(6)
        last = np.inf
        for k in range(iters):
            self._set(q, hand)  # Pose, Jacobian and distances all at q.
            now = self._tcp_pose()
            err[:3] = pose[:3] - now[:3]
            err[3:] = (target_r * Rotation.from_quat(now[3:], scalar_first=True).inv()).as_rotvec()
            jac = self._tcp_jacobian()
            rows, bound, nearest = self._distance_limits(avoid == "links") if avoid else _NONE
            if (
                np.linalg.norm(err[:3]) < tol_m
                and np.linalg.norm(err[3:]) < tol_rad
                and nearest > -TOUCH_M
            ):
                return q, True
            # Small steps along the error (at most 3 cm and 0.15 rad each) keep the solution
            # on the seed's branch instead of jumping across the workspace.
            scaled = np.concatenate([_clamp(err[:3], 0.03), _clamp(err[3:], 0.15)])
            # Damped least squares toward a step back to the seed: min |J dq - e|^2 +
            # 1e-4 |dq - 0.05 (seed - q)|^2, whose null-space part is that step itself.
            hess = jac.T @ jac + 1e-4 * np.eye(self.embodiment.arm_dof)
            grad = -(jac.T @ scaled + 1e-4 * 0.05 * (seed - q))
            if avoid:
                # Under limits, shorter steps (the free one scaled to at most 0.05 rad a
                # joint): the distances are linearized about the current configuration.
                free = np.abs(np.linalg.solve(hess, grad)).max()
                grad = grad * min(1.0, 0.05 / max(free, 1e-12))
            q = np.clip(q + self._solve(hess, grad, lo - q, hi - q, rows, bound), lo, hi)
            if avoid and k % 10 == 0:
                # Held where the limits allow (no progress in 10 iterations): no way on.
                gap = float(np.linalg.norm(err[:3]) + 0.1 * np.linalg.norm(err[3:]))
                if gap > last - 1e-4:
                    break
                last = gap
        return q, False

    def _distance_limits(
        self, links_only: bool
    ) -> tuple[np.ndarray | None, np.ndarray | None, float]:
        """Velocity-damper rows (G dq <= h) for every arm (and hand) geom within
        ``detect_m`` of a fixed part, and the nearest such distance, at the configuration
        last set."""
        mujoco.mj_collision(self.model, self.data)
        n = self.data.ncon
        if n == 0:
            return _NONE
        con = self.data.contact
        g1, g2 = con.geom1[:n], con.geom2[:n]
        mine = self.link_geoms if links_only else self._arm_and_hand
        first = np.isin(g1, mine) & np.isin(g2, self.fixed_geoms)
        second = np.isin(g2, mine) & np.isin(g1, self.fixed_geoms)
        near = np.flatnonzero((first | second) & (con.dist[:n] < self.avoid.detect_m))
        if near.size == 0:
            return _NONE
        rows, bound = np.empty((near.size, self.embodiment.arm_dof)), np.empty(near.size)
        for r, i in enumerate(near):
            c = self.data.contact[i]
            # The unit vector from the arm's geom to the obstacle, and the arm's nearest point.
            toward = c.frame[:3] * (1.0 if first[i] else -1.0)
            point = c.pos - toward * c.dist / 2
            body = self.model.geom_bodyid[c.geom1 if first[i] else c.geom2]
            mujoco.mj_jac(self.model, self.data, self._jp, None, point, body)
            rows[r] = toward @ self._jp[:, self.dadr]
            bound[r] = self.avoid.gain * (c.dist - self.avoid.safety_m)
        return rows, bound, float(con.dist[near].min())

    @staticmethod
    def _solve(
        hess: np.ndarray,
        grad: np.ndarray,
        lower: np.ndarray,
        upper: np.ndarray,
        rows: np.ndarray | None,
        bound: np.ndarray | None,
    ) -> np.ndarray:
        """The step: min 1/2 dq' H dq + g' dq, under ``rows`` dq <= ``bound`` and the
        bounds on dq when there are rows (the unconstrained step if the QP is infeasible)."""
        free = np.linalg.solve(hess, -grad)
        if rows is None or bound is None:
            # Nothing near: the plain damped least-squares step, clipped to the joint range
            # afterwards (bounds inside the solve would steer it into the limits instead).
            return free
        up = np.concatenate([upper, bound])
        low = np.concatenate([lower, np.full(len(bound), -1e30)])
        sense = np.zeros(len(up), dtype=np.int32)
        x, _, flag, _ = daqp.solve(hess, grad, rows, up, low, sense)
        return np.asarray(x) if flag >= 0 else np.clip(free, lower, upper)

    def tcp_velocity_to_joints(self, q: np.ndarray, twist: np.ndarray) -> np.ndarray:
        """Joint velocities (7,) that move the TCP with ``twist`` (linear, angular) at ``q``."""
        jac = self.jacobian(q)
        return jac.T @ np.linalg.solve(jac @ jac.T + 1e-6 * np.eye(6), twist)

    # ------------------------------------------------------------------ collisions
    def collides(
        self,
        q: np.ndarray,
        hand: np.ndarray | None = None,
        links_only: bool = False,
        itself: bool = True,
    ) -> bool:
        """Whether the arm (and, unless ``links_only``, its hand in posture ``hand``)
        penetrates the table, belt, bins or the other arm at joints ``q``, or, with
        ``itself``, the arm (``self_contacts``)."""
        self._set(q, hand)
        mujoco.mj_collision(self.model, self.data)
        n = self.data.ncon
        if n == 0:
            return False
        con = self.data.contact
        g1, g2, dist = con.geom1[:n], con.geom2[:n], con.dist[:n]
        mine = self.link_geoms if links_only else self._arm_and_hand
        a = np.isin(g1, mine) & np.isin(g2, self.fixed_geoms)
        b = np.isin(g2, mine) & np.isin(g1, self.fixed_geoms)
        hits = a | b
        if itself:
            hits |= self_contacts(self._link_chain if links_only else self.chain, g1, g2)
        return bool((hits & (dist < -TOUCH_M)).any())
