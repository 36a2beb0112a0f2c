"""Joint-space routes for the planner: jerk-limited timing (ruckig) and the carry planner
seam, whose CPU implementation is OMPL's RRT-Connect with MuJoCo as the validity checker.

``CarryPlanner`` is the interface a GPU backend (cuRobo, ``r2s2r.behavior.curobo``)
implements too: a collision-free route at the control rate from one configuration at rest
to another.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from r2s2r.behavior.kinematics import ArmKinematics


@dataclass(frozen=True)
class JointLimits:
    """Limits of the free-space moves: velocity (rad/s, per joint), acceleration (rad/s^2)
    and jerk (rad/s^3)."""

    velocity: np.ndarray
    acceleration: float
    jerk: float

    @classmethod
    def share(
        cls, velocity: np.ndarray, vel_share: float, acceleration: float, jerk: float
    ) -> JointLimits:
        """A share of the arm's velocity limits ``velocity`` (the embodiment's
        ``arm_velocity_limits``), with the given acceleration and jerk."""
        return cls(np.asarray(velocity) * vel_share, acceleration, jerk)


def ruckig_move(
    q0: np.ndarray,
    v0: np.ndarray,
    q1: np.ndarray,
    v1: np.ndarray,
    limits: JointLimits,
    dt: float,
) -> list[np.ndarray] | None:
    """Joint positions (each (J,)) every ``dt`` of the time-optimal jerk-limited move from
    (q0, v0) to (q1, v1), both at zero acceleration; None if ruckig finds none. The target
    velocity may exceed the velocity limit (it is raised to fit). A move from rest to rest
    keeps to the straight segment q0-q1 (timed along it)."""
    if not np.any(v0) and not np.any(v1):
        return _straight_move(q0, q1, limits, dt)
    pos = _ruckig(
        q0,
        v0,
        q1,
        v1,
        np.maximum(limits.velocity, np.abs(v1) * 1.05),
        np.full(len(q0), limits.acceleration),
        np.full(len(q0), limits.jerk),
        dt,
    )
    return None if pos is None else list(pos)


def _straight_move(
    q0: np.ndarray, q1: np.ndarray, limits: JointLimits, dt: float
) -> list[np.ndarray] | None:
    """Rest to rest along the segment: a one-dimensional ruckig move of the segment's
    parameter, whose limits are the tightest any joint puts on it. (Ruckig's own phase
    synchronization does not always keep seven joints on the line.)"""
    travel = np.abs(q1 - q0)
    if travel.max() < 1e-12:
        return [np.asarray(q1, float)]
    moving = travel > 1e-12
    scale = [float((limits.velocity[moving] / travel[moving]).min())]
    u = _ruckig(
        np.zeros(1),
        np.zeros(1),
        np.ones(1),
        np.zeros(1),
        np.array(scale),
        np.array([limits.acceleration / travel.max()]),
        np.array([limits.jerk / travel.max()]),
        dt,
    )
    return None if u is None else [q0 + (q1 - q0) * float(k[0]) for k in u]


def _ruckig(
    p0: np.ndarray,
    v0: np.ndarray,
    p1: np.ndarray,
    v1: np.ndarray,
    vel: np.ndarray,
    acc: np.ndarray,
    jerk: np.ndarray,
    dt: float,
) -> np.ndarray | None:
    """Positions (T, n) every ``dt`` of ruckig's time-synchronized move, or None."""
    from ruckig import InputParameter, Result, Ruckig, Trajectory

    n = len(p0)
    inp = InputParameter(n)
    inp.current_position, inp.current_velocity = list(p0), list(v0)
    inp.current_acceleration = [0.0] * n
    inp.target_position, inp.target_velocity = list(p1), list(v1)
    inp.target_acceleration = [0.0] * n
    inp.max_velocity, inp.max_acceleration, inp.max_jerk = list(vel), list(acc), list(jerk)
    traj = Trajectory(n)
    if Ruckig(n).calculate(inp, traj) not in (Result.Working, Result.Finished):
        return None
    steps = max(1, int(np.ceil(traj.duration * round(1.0 / dt))))
    pos = [traj.at_time(min((k + 1) * dt, traj.duration))[0] for k in range(steps)]
    return np.asarray(pos, float).reshape(steps, n)


class CarryPlanner(Protocol):
    """Plans the carry: the object in the hand, from above the belt to above the bin."""

    name: str

    def carry(
        self, kin: ArmKinematics, q0: np.ndarray, q1: np.ndarray, hand: np.ndarray
    ) -> np.ndarray | None:
        """Joint positions (T, 7) at the control rate after ``q0`` (7,, at rest) up to
        ``q1`` (7,, at rest, the last row), without ``kin``'s arm, its hand in posture
        ``hand`` (20,), touching the fixed parts or itself; None when there is no route."""
        ...


class OmplCarry:
    """The CPU carry planner: straight in joint space if that is free, else OMPL's
    RRT-Connect within ``plan_s`` seconds and shortcutting, seeded from the problem (the
    same problem gives the same route unless the time budget runs out); each straight
    piece is timed with ruckig (stopping at the waypoints)."""

    name = "cpu"

    def __init__(self, limits: JointLimits, dt: float, plan_s: float = 1.0) -> None:
        self.limits, self.dt, self.plan_s = limits, dt, plan_s

    def carry(
        self, kin: ArmKinematics, q0: np.ndarray, q1: np.ndarray, hand: np.ndarray
    ) -> np.ndarray | None:
        path = self.waypoints(kin, q0, q1, hand)
        if path is None:
            return None
        route: list[np.ndarray] = []
        for a, b in zip(path, path[1:], strict=False):
            rest = np.zeros(len(a))
            seg = ruckig_move(a, rest, b, rest, self.limits, self.dt)
            if seg is None:
                return None
            route.extend(seg)
        return np.asarray(route)

    def waypoints(
        self, kin: ArmKinematics, q0: np.ndarray, q1: np.ndarray, hand: np.ndarray
    ) -> list[np.ndarray] | None:
        """Collision-free joint waypoints from q0 to q1, or None."""
        if free_segment(kin, q0, q1, hand):
            return [q0, q1]
        from ompl import base as ob
        from ompl import geometric as og
        from ompl import util as ou

        # OMPL seeds every new random generator (sampler, simplifier) from one process-wide
        # sequence. Re-seeding it from the problem makes the route depend on the problem
        # alone, not on what this process planned before (nor on --workers). OMPL reports
        # the re-seed as an error ("already started"), which it is not here.
        ou.setLogLevel(ou.LOG_NONE)
        ou.RNG.setSeed(_problem_seed(q0, q1, hand))
        ou.setLogLevel(ou.LOG_WARN)
        dof = len(q0)
        space = ob.RealVectorStateSpace(dof)
        bounds = ob.RealVectorBounds(dof)
        for i in range(dof):
            bounds.setLow(i, float(kin.lo[i]))
            bounds.setHigh(i, float(kin.hi[i]))
        space.setBounds(bounds)
        si = ob.SpaceInformation(space)
        si.setStateValidityChecker(
            lambda s: not kin.collides(np.array([s[i] for i in range(dof)]), hand)
        )
        # Motions are checked every 0.02 rad, as ``free_segment`` checks them (OMPL's
        # resolution is a share of the space's extent).
        si.setStateValidityCheckingResolution(0.02 / space.getMaximumExtent())
        si.setup()
        start, goal = space.allocState(), space.allocState()
        for i in range(dof):
            start[i], goal[i] = float(q0[i]), float(q1[i])
        pdef = ob.ProblemDefinition(si)
        pdef.setStartAndGoalStates(start, goal)
        planner = og.RRTConnect(si)
        planner.setProblemDefinition(pdef)
        planner.setup()
        if not planner.solve(self.plan_s) or not pdef.hasExactSolution():
            return None
        path = pdef.getSolutionPath()
        og.PathSimplifier(si).simplifyMax(path)
        return [
            np.array([path.getState(k)[i] for i in range(dof)]) for k in range(path.getStateCount())
        ]


def _problem_seed(*arrays: np.ndarray) -> int:
    """A positive 32-bit seed from the problem's numbers."""
    data = np.round(np.concatenate([np.ravel(a) for a in arrays]), 9).tobytes()
    return zlib.crc32(data) or 1


def free_segment(kin: ArmKinematics, q0: np.ndarray, q1: np.ndarray, hand: np.ndarray) -> bool:
    """Whether the straight joint-space segment q0-q1 is collision-free (checked every
    0.02 rad of the largest joint's travel)."""
    n = max(2, int(np.ceil(np.abs(q1 - q0).max() / 0.02)))
    return not any(kin.collides(q0 + (q1 - q0) * u, hand) for u in np.linspace(0, 1, n))
