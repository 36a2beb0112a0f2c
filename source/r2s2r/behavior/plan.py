"""Ungrounded behavior: synthesized grasps and planned, time-parameterized routes.

For a task instance the planner proposes grasps from the object's geometry and the hand's
closures (a power wrap with the knuckles just beyond the object's far side, or, for low
objects, a claw over its centre), turned about the vertical to span the object's narrowest
side, and keeps the first whose pre-grasp, grasp and lift poses have collision-free
inverse kinematics (collision-limited where a plain solution touches the cell,
``ArmKinematics.ik``) where the belt brings the object. The route:

- approach: joint space from home, time-optimal under velocity, acceleration and jerk
  limits (ruckig), arriving above the object *moving with the belt* (the target joint
  velocity is the belt's velocity mapped through the Jacobian);
- descend, close and lift: Cartesian, in the frame of the moving object, so the hand keeps
  the belt's velocity at the grasp;
- carry: a collision-free joint route to above the bin from the carry planner
  (``routes.OmplCarry`` on the CPU: RRT-Connect with MuJoCo as the validity checker,
  shortcut, each piece timed with ruckig; or ``curobo.CuroboCarry`` on a GPU);
- release: the hand opens over the bin.

Every step is checked for collisions against the table, belt, bins, the other arm and the arm
itself (``Plan.route`` keeps the joint route for that check). Commands are TCP targets (the
Cartesian controller's interface, as in real data) at the control rate.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from pydantic import Field
from scipy.spatial.transform import Rotation

from r2s2r.behavior.adapt import symmetry_period
from r2s2r.behavior.instance import TaskInstance, object_pose_on_belt, scaled_object
from r2s2r.behavior.kinematics import ArmKinematics, planning_model
from r2s2r.behavior.planners import CARRY_PLANNERS
from r2s2r.behavior.routes import JointLimits, ruckig_move
from r2s2r.geometry.trajectory import min_jerk
from r2s2r.sim.cell import Cell
from r2s2r.sim.closures import (
    CLAW_OPEN,
    CLAW_SHUT,
    PRESHAPE,
    RELAXED,
    claw_fits,
    claw_offset,
    power_offset,
    power_shut,
)
from r2s2r.sim.scene import PALM_DOWN, fingers_direction
from r2s2r.spec import Spec, TaskSpec, WorldSpec
from r2s2r.spec.base import NonNeg, Pos, Share
from r2s2r.spec.world import ARM_SIDES
from r2s2r.spec.worlds import sorting_arm


class PlanError(ValueError):
    """No collision-free grasp or route for an instance (the attempt's failure reason is
    ``planner_failure``)."""


class PlannerCfg(Spec):
    """Route timing and limits."""

    hover_m: Pos = 0.10  # Pre-grasp height above the grasp pose.
    descend_s: Pos = 0.8
    close_s: Pos = 0.5
    hold_s: NonNeg = 0.2
    lift_m: Pos = 0.15
    lift_s: Pos = 0.8
    carry_height_m: Pos = 0.25  # TCP above the bin's floor.
    release_s: Pos = 0.4
    settle_s: NonNeg = 1.2
    # Joint limits for the free-space segments: a share of the arm's velocity limits, and
    # acceleration (rad/s^2) and jerk (rad/s^3).
    vel_share: Share = 0.5
    max_acc: Pos = 3.0
    max_jerk: Pos = 20.0
    # The widest an object may reach from its centre along the fingers for a power wrap.
    power_span_m: Pos = 0.045
    # How far behind the object's near side the claw's thumb comes down: closer than a
    # person's (closures.CLAW_CLEAR_M), whose hand wavers, as a planned route lands it where
    # planned.
    claw_clear_m: NonNeg = 0.005
    # Turns about the vertical (deg, from straight across the belt) the planner tries.
    yaws_deg: tuple[float, ...] = Field(
        default=tuple(float(y) for y in range(-105, 1, 15)), min_length=1
    )
    # Where along the belt (m from the arm's base, downstream positive) it tries to meet
    # the object, nearest first.
    meet_offsets_m: tuple[float, ...] = Field(default=(-0.1, 0.0, -0.2, 0.1, -0.3), min_length=1)
    carry_plan_s: Pos = 1.0  # RRT-Connect time budget.
    # A grasp trial: how long the lifted object must stay in the hand (the belt runs at the
    # middle of the task's speed range).
    trial_hold_s: Pos = 0.6


DEFAULT_PLANNER = PlannerCfg()


@dataclass(frozen=True)
class Grasp:
    """A grasp proposal: a closure and where the TCP goes relative to the object."""

    kind: str  # power | flat | claw
    yaw: float  # hand turn about the vertical from straight across the belt (rad)
    offset: np.ndarray  # TCP minus object centre, cell frame (3,)
    open_hand: np.ndarray
    shut_hand: np.ndarray

    def rotation(self) -> Rotation:
        return Rotation.from_euler("z", self.yaw) * PALM_DOWN


@dataclass
class Plan:
    """A planned episode: actions (T, 54) at the control rate, the active arm's joint route
    (T, 7) with what each step is doing, and the grasp."""

    actions: np.ndarray
    route: np.ndarray
    phases: list[str]
    grasp: Grasp
    arm: int
    grasp_step: int
    tcp: np.ndarray = field(default_factory=lambda: np.zeros((0, 7)))  # planned TCP (T, 7)


@dataclass
class _Route:
    """A plan being built: per control step the active arm's joints, what the step is doing,
    its TCP target and its hand's joint targets."""

    q: list[np.ndarray]
    phases: list[str]
    tcp: list[np.ndarray]
    hands: list[np.ndarray]

    def add(self, q: np.ndarray, phase: str, tcp: np.ndarray, hand: np.ndarray) -> None:
        self.q.append(q)
        self.phases.append(phase)
        self.tcp.append(tcp)
        self.hands.append(hand)


class Planner:
    """Plans episodes in one world: our collision-limited IK, ruckig, and the carry planner
    named ``carry`` (``planners.CARRY_PLANNERS``: ``cpu``, OMPL, by default, or ``curobo``
    on a GPU).

    With ``trial`` (runs commands for an instance in simulation, e.g. ``Executor.run``),
    each grasp is first tried on its own: the object on the belt straight across from
    the arm, the grasp planned, closed and lifted. Grasps that do not hold the object are
    rejected; the verdict is kept per object, closure and turn relative to the object.
    """

    def __init__(
        self,
        world: WorldSpec,
        task: TaskSpec,
        cell: Cell,
        cfg: PlannerCfg = DEFAULT_PLANNER,
        trial: Callable[..., Any] | None = None,
        carry: str = "cpu",
    ):
        self.world, self.task, self.cfg = world, task, cfg
        self.trial = trial
        self.verdicts: dict[tuple[str, str, int, int, int], bool] = {}
        self.fps = int(round(task.control_hz))
        self.dt = 1.0 / self.fps
        self.embodiment = cell.embodiment
        self.limits = JointLimits.share(
            cell.embodiment.arm_velocity_limits, cfg.vel_share, cfg.max_acc, cfg.max_jerk
        )
        self.carry = CARRY_PLANNERS.get(carry)(cell, self.limits, self.dt, cfg.carry_plan_s)
        home = cell.home_qpos
        model = planning_model(task, world)
        self.kin = {s: ArmKinematics(model, s, home) for s in ARM_SIDES}
        self.home_q = {s: home[cell.idx.arm_qadr[i]] for i, s in enumerate(ARM_SIDES)}
        self.home_tcp = {s: self.kin[s].fk(self.home_q[s]) for s in ARM_SIDES}

    # ------------------------------------------------------------------ grasps
    def proposals(self, instance: TaskInstance) -> list[Grasp]:
        """Grasps for the instance's object, best first: each closure that fits the side the
        hand spans, at each turn the planner tries, the narrowest span first."""
        obj = scaled_object(self.task, instance)
        heading = np.radians(self.world.layout.belt.yaw_deg)
        axes = Rotation.from_euler("z", heading + instance.yaw).as_matrix()
        out = []
        for yaw_deg in self.cfg.yaws_deg:
            yaw = np.radians(yaw_deg)
            f = fingers_direction(yaw)
            half = obj.half_extent(f, axes)
            rest = obj.rest_height
            if claw_fits(rest, half):
                offset = claw_offset(rest, half, f, self.cfg.claw_clear_m)
                claw = Grasp("claw", yaw, offset, CLAW_OPEN, CLAW_SHUT)
                out.append((half, claw))
            elif half <= self.cfg.power_span_m:
                offset = power_offset(rest, half, f)
                out.append((half, Grasp("power", yaw, offset, PRESHAPE, power_shut(rest))))
        out.sort(key=lambda c: (round(c[0], 3), abs(c[1].yaw - np.radians(-45.0))))
        return [g for _, g in out]

    # ------------------------------------------------------------------ planning
    def plan(self, instance: TaskInstance) -> Plan:
        """The episode's commands for ``instance``; raises ``PlanError`` when no grasp has a
        collision-free route."""
        side = sorting_arm(self.task, self.world, instance.object_name)
        kin = self.kin[side]
        base_x = self.world.layout.robots["left" if side == "left" else "right"].pos[0]
        obj0 = object_pose_on_belt(self.task, self.world, instance, np.zeros(1))[0]
        velocity = (
            object_pose_on_belt(self.task, self.world, instance, np.ones(1))[0, :3] - obj0[:3]
        )
        grasps = self.proposals(instance)
        if not grasps:
            raise PlanError(f"no grasp of the {instance.object_name} fits the hand")
        tried = 0
        for offset in self.cfg.meet_offsets_m:
            # When the object passes the meeting point.
            t_grasp = (base_x + offset - obj0[0]) / max(velocity[0], 1e-6)
            t_pre = t_grasp - self.cfg.descend_s
            if t_pre < 1.0:
                continue
            centre = object_pose_on_belt(self.task, self.world, instance, np.array([t_grasp]))[0]
            for grasp in grasps:
                if not self._holds(instance, grasp):
                    continue
                tried += 1
                plan = self._try(side, kin, instance, grasp, centre[:3], velocity, t_grasp)
                if plan is not None:
                    return plan
        raise PlanError(
            f"no collision-free route for the {instance.object_name} "
            f"({tried} grasp and meeting-point pairs tried)"
        )

    def _holds(self, instance: TaskInstance, grasp: Grasp) -> bool:
        """Whether ``grasp`` lifts and holds the object in a trial (always, without one)."""
        if self.trial is None:
            return True
        # The grasp's turn relative to the object, in 15-degree steps, under its symmetry.
        heading = np.radians(self.world.layout.belt.yaw_deg)
        relative = grasp.yaw - (heading + instance.yaw)
        period = symmetry_period(self.task, instance.object_name)
        step = int(round((relative % period if period else 0.0) / np.radians(15.0))) % 24
        size = int(round(instance.scale / 0.05))  # In steps of 5 %.
        key = (instance.object_name, grasp.kind, int(round(np.degrees(grasp.yaw))), step, size)
        if key not in self.verdicts:
            # The same trial for every instance with this key: the object turned by exactly
            # the key's steps from the hand and scaled to the key's size, straight across
            # from the arm.
            yaw = grasp.yaw - heading - step * np.radians(15.0)
            speed = float(np.mean(self.task.belt.speed_range))
            probe = replace(
                instance, lateral=0.0, yaw=float(yaw), belt_speed=speed, scale=size * 0.05
            )
            self.verdicts[key] = self._trial(probe, grasp)
        return self.verdicts[key]

    def _trial(self, probe: TaskInstance, grasp: Grasp) -> bool:
        assert self.trial is not None
        only = copy.copy(self)
        only.cfg = self.cfg.replace(yaws_deg=(float(np.degrees(grasp.yaw)),))
        only.trial = None
        try:
            plan = only.plan(probe)
        except PlanError:
            return False
        if plan.grasp.kind != grasp.kind:
            return False
        lift_end = max(k for k, p in enumerate(plan.phases) if p == "lift")
        hold = int(round(self.cfg.trial_hold_s * self.fps))
        actions = plan.actions[: lift_end + 1]
        result = self.trial(probe, actions, seed=0, max_steps=lift_end + hold)
        rest = result.objects[0, 2]
        return bool(result.lift_step is not None and result.objects[-1, 2] - rest > 0.05)

    def _try(
        self,
        side: str,
        kin: ArmKinematics,
        instance: TaskInstance,
        grasp: Grasp,
        centre: np.ndarray,
        velocity: np.ndarray,
        t_grasp: float,
    ) -> Plan | None:
        """The plan for ``grasp`` of the object at ``centre`` (moving at ``velocity``) when it
        passes the meeting point at ``t_grasp``; None where a pose or route fails."""
        quat = grasp.rotation().as_quat(scalar_first=True)
        grasp_pos = centre + grasp.offset
        approached = self._approach(side, kin, grasp, grasp_pos, quat, velocity, t_grasp)
        if approached is None:
            return None
        route, q_pre = approached
        followed = self._follow(route, kin, q_pre, grasp, grasp_pos, quat, velocity, t_grasp)
        if followed is None:
            return None
        q, grasp_step = followed
        if not self._carry_and_release(route, kin, q, instance, grasp, quat):
            return None
        arm = ARM_SIDES.index(side)
        return Plan(
            actions=self._actions(arm, route),
            route=np.asarray(route.q),
            phases=route.phases,
            grasp=grasp,
            arm=arm,
            grasp_step=grasp_step,
            tcp=np.asarray(route.tcp),
        )

    def _approach(
        self,
        side: str,
        kin: ArmKinematics,
        grasp: Grasp,
        grasp_pos: np.ndarray,
        quat: np.ndarray,
        velocity: np.ndarray,
        t_grasp: float,
    ) -> tuple[_Route, np.ndarray] | None:
        """Wait at home, then the joint-space approach to the pre-grasp pose, arriving with the
        belt's velocity: the route so far and the pre-grasp joints; None where the pre-grasp
        or grasp pose has no collision-free IK or the approach does not arrive in time."""
        cfg = self.cfg
        up = np.array([0.0, 0.0, 1.0])
        home_q = self.home_q[side]
        pre = np.concatenate([grasp_pos - velocity * cfg.descend_s + up * cfg.hover_m, quat])
        q_pre, ok = kin.ik(pre, home_q, avoid="all", hand=grasp.open_hand)
        if not ok:
            return None
        _, ok = kin.ik(np.concatenate([grasp_pos, quat]), q_pre, avoid="links")
        if not ok:
            return None
        t_pre = t_grasp - cfg.descend_s
        # Approach: home (at rest) to the pre-grasp pose moving with the belt.
        q_dot_pre = kin.tcp_velocity_to_joints(q_pre, np.concatenate([velocity, np.zeros(3)]))
        approach = ruckig_move(home_q, np.zeros(7), q_pre, q_dot_pre, self.limits, self.dt)
        if approach is None or len(approach) * self.dt > t_pre - 0.2:
            return None
        n_wait = int(round(t_pre * self.fps)) - len(approach)
        route = _Route(
            q=[home_q] * n_wait + list(approach),
            phases=["wait"] * n_wait + ["approach"] * len(approach),
            tcp=[self.home_tcp[side]] * n_wait + [kin.fk(q) for q in approach],
            hands=[RELAXED] * n_wait
            + [
                RELAXED + (grasp.open_hand - RELAXED) * min_jerk(u)
                for u in np.linspace(0, 1, len(approach))
            ],
        )
        return route, q_pre

    def _follow(
        self,
        route: _Route,
        kin: ArmKinematics,
        q_pre: np.ndarray,
        grasp: Grasp,
        grasp_pos: np.ndarray,
        quat: np.ndarray,
        velocity: np.ndarray,
        t_grasp: float,
    ) -> tuple[np.ndarray, int] | None:
        """Descend, close and hold, lift from the pre-grasp joints ``q_pre``: Cartesian,
        following the object, appended to ``route``. Returns the last joints and the step
        where the hand starts closing; None where a pose has no collision-free IK."""
        cfg = self.cfg
        up = np.array([0.0, 0.0, 1.0])
        t = t_grasp - cfg.descend_s
        q = q_pre
        lift_from = None
        segments = [
            ("descend", cfg.descend_s),
            ("close", cfg.close_s + cfg.hold_s),
            ("lift", cfg.lift_s),
        ]
        grasp_step = 0
        for name, duration in segments:
            n = int(round(duration * self.fps))
            for k in range(n):
                u = (k + 1) / n
                t += self.dt
                if name == "descend":
                    pos = (
                        grasp_pos + velocity * (t - t_grasp) + up * cfg.hover_m * (1 - min_jerk(u))
                    )
                    hand = grasp.open_hand
                elif name == "close":
                    pos = grasp_pos + velocity * (t - t_grasp)
                    closing = min(1.0, (k + 1) / max(1, int(cfg.close_s * self.fps)))
                    hand = grasp.open_hand + (grasp.shut_hand - grasp.open_hand) * min_jerk(closing)
                    lift_from = pos
                else:
                    assert lift_from is not None
                    # Rise while the belt-following motion eases off.
                    along = velocity * duration * (u - u * u / 2)
                    pos = lift_from + along + up * cfg.lift_m * min_jerk(u)
                    hand = grasp.shut_hand
                pose = np.concatenate([pos, quat])
                q, ok = kin.ik(pose, q, iters=60, avoid="links")
                if not ok:
                    return None
                if name == "close" and k == 0:
                    grasp_step = len(route.q)
                route.add(q, name, pose, hand)
        return q, grasp_step

    def _carry_and_release(
        self,
        route: _Route,
        kin: ArmKinematics,
        q: np.ndarray,
        instance: TaskInstance,
        grasp: Grasp,
        quat: np.ndarray,
    ) -> bool:
        """Carry: a collision-free joint path from the joints ``q`` to above the bin, then
        time-parameterized; release: the hand opens over the bin. Appended to ``route``;
        False where the pose above the bin or the carry fails."""
        cfg = self.cfg
        obj = self.task.object_named(instance.object_name)
        bin_pos = np.asarray(self.world.layout.bins[self.task.bin_for(obj).name].pos, float)
        above = np.concatenate(
            [bin_pos + [0.0, 0.0, cfg.carry_height_m] + grasp.offset * [1, 1, 0], quat]
        )
        q_bin, ok = kin.ik(above, q, avoid="all", hand=grasp.shut_hand)
        if not ok:
            return False
        carried = self.carry.carry(kin, q, q_bin, grasp.shut_hand)
        if carried is None:
            return False
        for q in carried:
            route.add(q, "carry", kin.fk(q), grasp.shut_hand)
        # Release over the bin.
        n_open = int(round(cfg.release_s * self.fps))
        for k in range(n_open + int(round(cfg.settle_s * self.fps))):
            u = min(1.0, (k + 1) / n_open)
            hand = grasp.shut_hand + (RELAXED - grasp.shut_hand) * min_jerk(u)
            route.add(q_bin, "release", route.tcp[-1], hand)
        return True

    def _actions(self, arm: int, route: _Route) -> np.ndarray:
        """The episode's actions (T, 54): ``route`` on arm ``arm``, the other arm at home with
        its hand relaxed."""
        emb = self.embodiment
        actions = np.zeros((len(route.q), emb.num_arms, emb.action_per_arm("tcp")))
        for i, s in enumerate(ARM_SIDES):
            actions[:, i, :7] = self.home_tcp[s]
            actions[:, i, 7:] = RELAXED
        actions[:, arm, :7] = np.asarray(route.tcp)
        actions[:, arm, 7:] = np.asarray(route.hands)
        return actions.reshape(len(route.q), -1)
