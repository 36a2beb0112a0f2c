"""A scripted human operator: drives a rig through the teleop path the way a person does.

It is a ``HandTracker``: every ``read()`` gives 21 keypoints of a human hand (in the wrist
frame) and the wrist pose in the tracker frame, as a glove and a wrist tracker would. It never
commands the robot; its readings go through the same calibration, retargeting and safety
supervisor as a person's.

What it knows is what a person at the cell knows: the object it sees on the belt, the bins,
the sorting rule, and where the robot hand is (it watches it). Its mapping from its own hand
to the robot's is the calibration a person learns by watching the robot follow them. It
moves like a person: minimum-jerk reaches with per-episode durations and via points, a
physiological tremor, sometimes a hesitation before committing to the grasp, sometimes an
overshoot that it then corrects, a several-finger power grasp, and another try when it sees
that a lift left the object behind. While it follows the object it watches the robot hand and
leads it by what it trails; over the bin it lets go once it sees the object above the bin.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np
from scipy.spatial.transform import Rotation, Slerp

from r2s2r.rig.interfaces import HandKeypoints
from r2s2r.rig.retarget import HandKinematics
from r2s2r.rig.teleop import HUMAN_HAND_SCALE, TrackerCalibration
from r2s2r.sim.scene import PALM_DOWN
from r2s2r.spec import TaskSpec, WorldSpec

if TYPE_CHECKING:
    from r2s2r.rig.twin import TwinRig

# Hand postures (20 joints, thumb first): relaxed open, pre-shaped, power grasp, and the
# power grasp for flat objects, whose thumb closes only half way.
RELAXED = np.array([0.3, 0.1, 0.1, 0.05] + [0.0, 0.1, 0.1, 0.05] * 4)
PRESHAPE = np.array([0.0, 0.0, 0.0, 0.0] + [0.0, 0.05, 0.0, 0.0] * 4)
POWER_GRASP = np.array([1.3, 0.7, 0.6, 0.5] + [0.0, 1.4, 1.2, 0.9] * 4)
FLAT_GRASP = np.concatenate([[0.6, 0.2, 0.2, 0.2], POWER_GRASP[4:]])


class Eyes(Protocol):
    """What the operator perceives of the cell."""

    def now(self) -> float: ...

    def object_pose(self) -> np.ndarray:
        """The presented object's pose (7,) in the cell frame."""
        ...

    def hand_pose(self, side: str) -> np.ndarray:
        """Where the robot's TCP of arm ``side`` is (7,) in the cell frame."""
        ...

    def belt_speed(self) -> float: ...


class TwinEyes:
    """A person's view of the twin.

    ``object_pose`` asks the twin where the object is (``TwinRig.object_pose``), standing in
    for a person seeing the object on the belt. It reveals no hidden world parameters
    (camera, belt or controller offsets), only where the object visibly is. The robot hand
    is seen through the arm's public state; the belt speed through the conveyor.
    """

    def __init__(self, rig: TwinRig) -> None:
        self.rig = rig

    def now(self) -> float:
        return self.rig.now()

    def object_pose(self) -> np.ndarray:
        return self.rig.object_pose()

    def hand_pose(self, side: str) -> np.ndarray:
        return np.array(self.rig.arms[side].state().tcp_pose)

    def belt_speed(self) -> float:
        return self.rig.conveyor.speed()


def min_jerk(tau: float) -> float:
    """The minimum-jerk profile 10t^3 - 15t^4 + 6t^5 on [0, 1]."""
    t = min(max(tau, 0.0), 1.0)
    return t**3 * (10.0 + t * (-15.0 + 6.0 * t))


def bump(tau: float) -> float:
    """A smooth detour profile, 0 with zero slope at both ends and 1 at the middle."""
    t = min(max(tau, 0.0), 1.0)
    return 16.0 * t * t * (1.0 - t) ** 2


@dataclass
class Segment:
    """A minimum-jerk move from ``start`` to a (possibly moving) goal through a detour."""

    t0: float
    duration: float
    start: np.ndarray
    goal: Callable[[float], np.ndarray]
    via: np.ndarray = field(default_factory=lambda: np.zeros(3))

    def at(self, t: float) -> np.ndarray:
        tau = (t - self.t0) / self.duration
        return self.start + (self.goal(t) - self.start) * min_jerk(tau) + self.via * bump(tau)

    def done(self, t: float) -> bool:
        return t - self.t0 >= self.duration


@dataclass
class Style:
    """One episode's human variability, drawn when it begins."""

    reaction_s: float
    reach_s: float
    hover_s: float
    hesitate_s: float
    descend_s: float
    close_s: float
    hold_s: float
    lift_s: float
    lift_m: float
    carry_s: float
    correct_s: float
    via_reach: np.ndarray
    via_carry: np.ndarray
    overshoot: np.ndarray
    grasp_offset: np.ndarray
    grasp_scale: float
    wobble: np.ndarray
    tremor_amp: np.ndarray
    tremor_hz: np.ndarray
    tremor_phase: np.ndarray

    @classmethod
    def draw(cls, rng: np.random.Generator, p_hesitate: float, p_overshoot: float) -> Style:
        overshoot = np.zeros(3)
        if rng.random() < p_overshoot:
            direction = rng.normal(size=3) * [1.0, 1.0, 0.4]
            overshoot = direction / np.linalg.norm(direction) * rng.uniform(0.02, 0.04)
        return cls(
            reaction_s=rng.uniform(0.25, 0.6),
            reach_s=rng.uniform(1.0, 1.5),
            hover_s=rng.uniform(0.25, 0.45),
            hesitate_s=rng.uniform(0.3, 0.8) if rng.random() < p_hesitate else 0.0,
            descend_s=rng.uniform(0.7, 0.95),
            close_s=rng.uniform(0.3, 0.45),
            hold_s=rng.uniform(0.15, 0.3),
            lift_s=rng.uniform(0.8, 1.1),
            lift_m=rng.uniform(0.2, 0.25),
            carry_s=rng.uniform(1.3, 1.8),
            correct_s=rng.uniform(0.3, 0.5),
            via_reach=rng.normal(0.0, 1.0, 3) * [0.02, 0.02, 0.01] + [0.0, 0.0, 0.04],
            via_carry=rng.normal(0.0, 1.0, 3) * [0.02, 0.02, 0.01] + [0.0, 0.0, 0.03],
            overshoot=overshoot,
            grasp_offset=rng.normal(0.0, 1.0, 3) * [0.003, 0.003, 0.002],
            grasp_scale=rng.uniform(0.97, 1.08),
            wobble=rng.normal(0.0, np.radians(2.0), 3),
            tremor_amp=rng.uniform(0.0004, 0.0009, 3),
            tremor_hz=rng.uniform(8.0, 12.0, 3),
            tremor_phase=rng.uniform(0.0, 2 * np.pi, 3),
        )


class ScriptedOperator:
    """A simulated person wearing a glove and a wrist tracker (the ``HandTracker`` interface).

    Call ``begin(object_name, side)`` when an object is presented, then ``read()`` once per
    control period; ``phase`` says what it is doing.
    """

    name = "scripted_operator"
    # The knuckles (the TCP) come to rest this far beyond the object's far side, across the
    # belt; the palm this far above the object's top; the hover this far above that.
    reach = 0.012
    palm_gap = 0.0
    hover = 0.12
    # The carry ends this high above the bin's floor.
    carry_height = 0.25
    # The operator aims this far ahead of the moving object (seconds of belt travel).
    lead_s = 0.15
    # The hand is pitched fingers-up by this much from palm-down when it grasps.
    pitch_deg = 0.0
    # How often it tries again after a missed grasp.
    max_tries = 2
    # How fast (1/s) the operator corrects the trailing robot hand it watches.
    watch_gain = 2.0
    # It lets go when the object is seen this close to the bin's centre (horizontally).
    aim_m = 0.04
    # Once the object is off the belt the hand tips fingers-down by this much, so that the
    # object settles into the curled fingers rather than sliding out under the heel of the
    # palm while it is carried; the tilt starts this far into the lift.
    carry_tilt_deg = -30.0
    tilt_from = 0.3
    # Objects whose top is less than twice this above the belt (half-height below it) get a
    # grasp with the thumb half closed: a fully flexed thumb reaches the belt, and props the
    # hand up, before the fingers close.
    flat_m = 0.028

    def __init__(
        self,
        seed: int,
        eyes: Eyes,
        task: TaskSpec,
        world: WorldSpec,
        calibration: TrackerCalibration,
        p_hesitate: float = 0.25,
        p_overshoot: float = 0.2,
        keypoint_noise_m: float = 0.001,
    ) -> None:
        self.rng = np.random.default_rng(seed)
        self.eyes, self.task, self.world, self.calibration = eyes, task, world, calibration
        self.p_hesitate, self.p_overshoot = p_hesitate, p_overshoot
        self.keypoint_noise_m = keypoint_noise_m
        self._kin = {side: HandKinematics(side) for side in ("left", "right")}
        self.phase = "idle"
        self.side = "left"

    # --------------------------------------------------------------------- episodes
    def begin(self, object_name: str, side: str) -> None:
        """Start an episode: ``object_name`` is on the belt, to be sorted with arm ``side``."""
        obj = next(o for o in self.task.all_objects if o.name == object_name)
        layout = self.world.layout
        self.side = side
        self.top_offset = obj.rest_height
        self.obj = obj
        self.tries = 0
        self.bin_pos = np.asarray(layout.bins[self.task.bin_for(obj).name].pos, dtype=float)
        base_x = layout.robots["left" if side == "left" else "right"].pos[0]
        # The left arm meets objects just downstream of its base; the right arm reaches
        # upstream so that slow belts still bring the object within the episode.
        self.meet_x = base_x + (0.05 if side == "left" else -0.25) + self.rng.uniform(-0.03, 0.03)
        self.style = Style.draw(self.rng, self.p_hesitate, self.p_overshoot)
        self.t_start = self.eyes.now()
        home = self.eyes.hand_pose(side)
        self.rest, self.rest_rot = home[:3].copy(), Rotation.from_quat(home[3:], scalar_first=True)
        self.intent = self.rest.copy()
        self.turn = 0.0  # 0: the robot's home orientation, 1: palm down.
        self.tilt = 0.0  # 0: level palm, 1: tipped fingers-down for the carry.
        self.lead = np.zeros(3)  # The correction the operator adds after watching the robot.
        self.posture = RELAXED.copy()
        self.seg: Segment | None = None
        self.phase, self.phase_t0 = "wait", self.t_start
        self._last_t = self.t_start
        self._posture_from = RELAXED.copy()

    def read(self) -> HandKeypoints:
        """The glove and tracker reading now: keypoints (21, 3) in the wrist frame and the
        wrist pose (7,) in the tracker frame."""
        if self.phase == "idle":
            raise RuntimeError("ScriptedOperator.read(): call begin() when an object is presented")
        t = self.eyes.now()
        self._update(t)
        s = self.style
        tremor = s.tremor_amp * np.sin(2 * np.pi * s.tremor_hz * t + s.tremor_phase)
        pitch = self.pitch_deg + self.carry_tilt_deg * self.tilt
        grasp_rot = Rotation.from_euler("x", pitch, degrees=True) * PALM_DOWN
        turn = (
            Rotation.from_rotvec(s.wobble * self.turn)
            * Slerp([0.0, 1.0], Rotation.concatenate([self.rest_rot, grasp_rot]))([self.turn])[0]
        )
        tcp = np.concatenate([self.intent + self.lead + tremor, turn.as_quat(scalar_first=True)])
        wrist = self.calibration.wrist_from_tcp(tcp)
        keypoints = self._kin[self.side].forward(self.posture) * HUMAN_HAND_SCALE
        keypoints = keypoints - keypoints[0]
        keypoints += self.rng.normal(0.0, self.keypoint_noise_m, keypoints.shape)
        return HandKeypoints(t, keypoints, wrist)

    # ------------------------------------------------------------------ behaviour
    def _seen(self) -> np.ndarray:
        return self.eyes.object_pose()[:3]

    def _half_across(self) -> float:
        """How far the object visibly extends across the belt from its centre."""
        size = self.obj.size
        if self.obj.shape not in ("box", "ellipsoid"):
            return float(size[0])
        quat = self.eyes.object_pose()[3:]
        axes = Rotation.from_quat(quat, scalar_first=True).as_matrix()
        return float(sum(abs(axes[1, i]) * size[i] for i in range(3)))

    def _grasp_point(self, t: float) -> np.ndarray:
        obj = self._seen()
        lead = self.eyes.belt_speed() * self.lead_s
        # The fingers come down just beyond the object's far side.
        reach = self._half_across() + self.reach
        # A hand pitched fingers-up keeps its heel, not its knuckles, just above the object.
        top = self.top_offset + self.palm_gap + 0.1 * np.sin(np.radians(self.pitch_deg))
        return obj + [lead, reach, top] + self.style.grasp_offset

    def _hover_point(self, t: float) -> np.ndarray:
        return self._grasp_point(t) + [0.0, 0.0, self.hover]

    def _go(self, phase: str, t: float, seg: Segment | None = None) -> None:
        self.phase, self.phase_t0, self.seg = phase, t, seg
        self._posture_from = self.posture.copy()

    def _update(self, t: float) -> None:
        s, dt = self.style, t - self.phase_t0
        self._dt, self._last_t = t - self._last_t, t
        if self.phase == "wait":
            obj_x = self._seen()[0]
            speed = self.eyes.belt_speed()
            ahead = speed * (s.reach_s + s.hover_s + s.hesitate_s + s.descend_s)
            if t - self.t_start >= s.reaction_s and obj_x + ahead >= self.meet_x:
                over = s.overshoot
                goal = (
                    self._hover_point if not over.any() else lambda u: self._hover_point(u) + over
                )
                self._go("reach", t, Segment(t, s.reach_s, self.intent.copy(), goal, s.via_reach))
        elif self.phase == "reach":
            self.turn = min_jerk(dt / s.reach_s)
            self.posture = self._blend(RELAXED, PRESHAPE, dt / s.reach_s)
            if self.seg is not None and self.seg.done(t):
                if s.overshoot.any():
                    seg = Segment(t, s.correct_s, self.intent.copy(), self._hover_point)
                    self._go("correct", t, seg)
                else:
                    self._go("hover", t)
        elif self.phase == "regrasp":
            self.tilt = 1.0 - min_jerk(dt / 0.4)
            self.posture = self._blend(self._posture_from, PRESHAPE, dt / 0.4)
            if self.seg is not None and self.seg.done(t):
                self._go("hover", t)
        elif self.phase == "correct":
            if self.seg is not None and self.seg.done(t):
                self._go("hover", t)
        elif self.phase == "hover":
            self.intent = self._hover_point(t)
            if dt >= s.hover_s + (s.hesitate_s if self.tries == 0 else 0.0):
                self._go("descend", t)
        elif self.phase == "descend":
            tau = min_jerk(dt / s.descend_s)
            # While it descends the hand keeps pace with the object along the belt.
            self.intent = self._grasp_point(t) + [0.0, 0.0, self.hover * (1.0 - tau)]
            if dt >= s.descend_s:
                self._go("close", t)
        elif self.phase == "close":
            self.intent = self._grasp_point(t)
            grip = FLAT_GRASP if self.top_offset < self.flat_m else POWER_GRASP
            self.posture = self._blend(PRESHAPE, grip * s.grasp_scale, dt / s.close_s)
            if dt >= s.close_s + s.hold_s:
                self._grasped_z = self._seen()[2]
                lift_goal = self.intent + [0.0, 0.0, s.lift_m]
                self._go("lift", t, Segment(t, s.lift_s, self.intent.copy(), lambda u: lift_goal))
        elif self.phase == "lift":
            self.tilt = min_jerk((dt / s.lift_s - self.tilt_from) / (1.0 - self.tilt_from))
            if self.seg is not None and self.seg.done(t) and self._missed():
                # The object stayed behind: open up, go back over it and try again.
                self.tries += 1
                seg = Segment(t, s.reach_s * 0.7, self.intent.copy(), self._hover_point)
                self._go("regrasp", t, seg)
            elif self.seg is not None and self.seg.done(t):
                above = self.bin_pos + [0.0, self.reach, self.carry_height]
                seg = Segment(t, s.carry_s, self.intent.copy(), lambda u: above, s.via_carry)
                self._go("carry", t, seg)
        elif self.phase == "carry":
            if self.seg is not None and self.seg.done(t):
                self._go("aim", t)
        elif self.phase == "aim":
            # It watches the object in the hand and lets go once it is over the bin.
            off = (self.bin_pos - self._seen()) * [1.0, 1.0, 0.0]
            self.intent = self.intent + np.clip(off, -0.1, 0.1) * min(1.0, 2.5 * self._dt)
            if np.linalg.norm(off) < self.aim_m or dt > 2.0:
                self._go("release", t)
        elif self.phase == "release":
            self.posture = self._blend(self._posture_from, RELAXED, dt / 0.3)
            if dt >= 0.8:
                rest = self.rest.copy()
                seg = Segment(t, 1.5, self.intent.copy(), lambda u: rest)
                self._go("retreat", t, seg)
        elif self.phase == "retreat":
            self.turn = 1.0 - min_jerk(dt / 1.5)
        if self.seg is not None:
            self.intent = self.seg.at(t)
        self._watch(t)

    def _watch(self, t: float) -> None:
        """Close the loop by eye: while following the object, lead the robot hand by what
        it is seen to trail (slowly, as a person does), within a few centimetres."""
        dt = self._dt
        if self.phase in ("hover", "descend", "close", "regrasp"):
            seen = self.eyes.hand_pose(self.side)[:3]
            err = (self.intent - seen) * [1.0, 1.0, 0.0]
            self.lead = np.clip(self.lead + self.watch_gain * dt * err, -0.04, 0.04)
        elif self.phase in ("release", "retreat"):
            self.lead *= max(0.0, 1.0 - 2.0 * dt)

    def _missed(self) -> bool:
        """Whether the lift left the object behind (and it is worth another try)."""
        obj = self._seen()
        lifted = obj[2] - self._grasped_z > 0.5 * self.style.lift_m
        on_belt = abs(obj[0] - self.world.layout.belt.pos[0]) < self.world.layout.belt.length / 2
        within = obj[0] < self.world.layout.belt.pos[0] + 0.5
        return not lifted and on_belt and within and self.tries < self.max_tries

    @staticmethod
    def _blend(a: np.ndarray, b: np.ndarray, tau: float) -> np.ndarray:
        return a + (b - a) * min_jerk(tau)
