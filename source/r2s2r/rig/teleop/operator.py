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
overshoot that it then corrects, a several-finger power grasp (for low objects, a claw:
thumb tucked under the palm, fingers hooked before the knuckles bend), the hand turned about
the vertical to where the arm's wrist is comfortable and, for a box, to span its narrow side,
and another try when it sees that a lift left the object behind. While it follows the
object it watches the robot hand and leads it by what it trails, in place and in turn; over
the bin it lets go once it sees the object above the bin.
"""

from __future__ import annotations

import numpy as np

from r2s2r.geometry.poses import unit_quat
from r2s2r.geometry.rotations import (
    axis_angle_quat,
    quat_mul,
    quat_slerp,
    quat_to_mat,
    rotvec_to_quat,
)
from r2s2r.geometry.trajectory import blend, min_jerk
from r2s2r.rig.interfaces import HandKeypoints
from r2s2r.rig.teleop.human import Eyes, Segment, Style, TwinEyes
from r2s2r.rig.teleop.retarget import HandKinematics
from r2s2r.rig.teleop.session import HUMAN_HAND_SCALE, TrackerCalibration
from r2s2r.sim.closures import (
    CLAW_BELOW_M,
    CLAW_OPEN,
    CLAW_REACH_M,
    CLAW_SHUT,
    POWER_REACH_M,
    PRESHAPE,
    RELAXED,
    claw_fits,
    claw_offset,
    power_offset,
    power_shut,
)
from r2s2r.sim.scene import PALM_DOWN_QUAT, fingers_direction
from r2s2r.spec import TaskSpec, WorldSpec

# TwinEyes is the operator's view of the twin; importers find it here with the operator.
__all__ = ["Eyes", "ScriptedOperator", "TwinEyes"]


class ScriptedOperator:
    """A simulated person wearing a glove and a wrist tracker (the ``HandTracker`` interface).

    Call ``begin(object_name, side)`` when an object is presented, then ``read()`` once per
    control period; ``phase`` says what it is doing.
    """

    name = "scripted_operator"
    # The grasp geometry is the hand's closures' (``r2s2r.sim.closures``); the hover is this
    # far above the grasp.
    hover = 0.12
    # The carry ends this high above the bin's floor.
    carry_height = 0.25
    # The operator aims this far ahead of the moving object (seconds of belt travel).
    lead_s = 0.15
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
    # How the hand is turned about the vertical, from straight across the belt (positive:
    # fingers upstream). Palm down with the fingers straight across would put the arm's
    # forearm roll at its limit where each arm meets the object; turned downstream, within
    # the window per arm, the wrist is comfortable, as a person finds out on the first try.
    # Round objects get the middle of the window; boxes the turn in the window that spans
    # the least of them.
    yaw_window_deg = {"left": (-100.0, -30.0), "right": (-75.0, -5.0)}
    # For a low box that no comfortable turn lets the claw span (longer than ``CLAW_REACH_M``
    # from its centre), it turns the wrist this much further either way.
    stretch_deg = 35.0

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
        obj = self.task.object_named(object_name)
        layout = self.world.layout
        self.side = side
        self.obj = obj
        self.claw = False
        self.yaw = 0.0
        self.yaw_lead = 0.0  # The same by-eye correction for how the hand is turned.
        self.tries = 0
        self.bin_pos = np.asarray(layout.bins[self.task.bin_for(obj).name].pos, dtype=float)
        base_x = layout.robots["left" if side == "left" else "right"].pos[0]
        # The left arm meets objects just downstream of its base; the right arm reaches
        # upstream so that slow belts still bring the object within the episode.
        self.meet_x = base_x + (0.05 if side == "left" else -0.25) + self.rng.uniform(-0.03, 0.03)
        self.style = Style.draw(self.rng, self.p_hesitate, self.p_overshoot)
        self.t_start = self.eyes.now()
        home = self.eyes.hand_pose(side)
        self.rest, self.rest_quat = home[:3].copy(), unit_quat(home[3:])
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
        # Quaternion helpers rather than scipy's Rotation: this runs every control period.
        grasp = quat_mul(
            axis_angle_quat("z", self.yaw + self.yaw_lead),
            quat_mul(
                axis_angle_quat("x", np.radians(self.carry_tilt_deg * self.tilt)), PALM_DOWN_QUAT
            ),
        )
        turn = quat_mul(
            rotvec_to_quat(s.wobble * self.turn), quat_slerp(self.rest_quat, grasp, self.turn)
        )
        tcp = np.concatenate([self.intent + self.lead + tremor, turn])
        wrist = self.calibration.wrist_from_tcp(tcp)
        keypoints = self._kin[self.side].forward(self.posture) * HUMAN_HAND_SCALE
        keypoints = keypoints - keypoints[0]
        keypoints += self.rng.normal(0.0, self.keypoint_noise_m, keypoints.shape)
        return HandKeypoints(t, keypoints, wrist)

    # ------------------------------------------------------------------ behaviour
    def _seen(self) -> np.ndarray:
        return self.eyes.object_pose()[:3]

    def _plan_grasp(self) -> None:
        """Choose the grasp: the hand turned to span a box's narrowest side (any turn in
        the comfortable window for round objects; further for a low box the claw could not
        span otherwise); for a low object, the claw if that side fits between thumb and
        fingers, else the power grasp with the thumb half closed."""
        # Turned by eye, a few degrees off.
        self.yaw = self._grasp_yaw() + self.rng.normal(0.0, np.radians(3.0))
        self.claw = claw_fits(self.obj.rest_height, self._half_along(fingers_direction(self.yaw)))

    def _object_axes(self) -> np.ndarray:
        """The seen object's axes (3, 3), one per column, in the cell frame."""
        return quat_to_mat(self.eyes.object_pose()[3:])

    def _half_along(self, direction: np.ndarray) -> float:
        """How far the object visibly extends from its centre along a horizontal direction."""
        return self.obj.half_extent(direction, self._object_axes())

    def _grasp_yaw(self) -> float:
        """The turn about the vertical in this arm's comfortable window that spans the least
        of the object (the window's middle for round objects)."""
        lo, hi = np.radians(self.yaw_window_deg[self.side])
        if self.obj.shape != "box":
            return float(lo + hi) / 2.0
        turns = np.linspace(lo, hi, 15)
        spans = [self._half_along(fingers_direction(turn)) for turn in turns]
        if self.obj.rest_height < CLAW_BELOW_M and min(spans) > CLAW_REACH_M:
            stretch = np.radians(self.stretch_deg)
            turns = np.linspace(lo - stretch, hi + stretch, 25)
            spans = [self._half_along(fingers_direction(turn)) for turn in turns]
        return float(turns[int(np.argmin(spans))])

    def _grasp_point(self, t: float) -> np.ndarray:
        obj = self._seen()
        lead = self.eyes.belt_speed() * self.lead_s
        rest = self.obj.rest_height
        if self.claw:
            # The claw straddles the object, the palm clear of its top.
            fingers = fingers_direction(self.yaw)
            offset = claw_offset(rest, self._half_along(fingers), fingers)
            return obj + offset + [lead, 0.0, 0.0] + self.style.grasp_offset
        # The fingers come down just beyond the object's far side.
        fingers = fingers_direction(self.yaw)
        reach = power_offset(rest, self._half_along(fingers), fingers)
        return obj + reach + [lead, 0.0, 0.0] + self.style.grasp_offset

    def _hover_point(self, t: float) -> np.ndarray:
        return self._grasp_point(t) + [0.0, 0.0, self.hover]

    def _go(self, phase: str, t: float, seg: Segment | None = None) -> None:
        self.phase, self.phase_t0, self.seg = phase, t, seg
        self._posture_from = self.posture.copy()

    def _update(self, t: float) -> None:
        """One control period at ``t``: the phase's step (which may start the next phase),
        then the hand along its segment and the correction by eye."""
        dt = t - self.phase_t0
        self._dt, self._last_t = t - self._last_t, t
        if self.phase == "wait":
            self._step_wait(t)
        elif self.phase == "reach":
            self._step_reach(t, dt)
        elif self.phase == "regrasp":
            self._step_regrasp(t, dt)
        elif self.phase in ("correct", "carry"):
            self._step_segment(t)
        elif self.phase == "hover":
            self._step_hover(t, dt)
        elif self.phase == "descend":
            self._step_descend(t, dt)
        elif self.phase == "close":
            self._step_close(t, dt)
        elif self.phase == "lift":
            self._step_lift(t, dt)
        elif self.phase == "aim":
            self._step_aim(t, dt)
        elif self.phase == "release":
            self._step_release(t, dt)
        elif self.phase == "retreat":
            self.turn = 1.0 - min_jerk(dt / 1.5)
        if self.seg is not None:
            self.intent = self.seg.at(t)
        self._watch(t)

    def _step_wait(self, t: float) -> None:
        """Reach for the object once reacting and it is close enough to meet in time."""
        s = self.style
        obj_x = self._seen()[0]
        speed = self.eyes.belt_speed()
        ahead = speed * (s.reach_s + s.hover_s + s.hesitate_s + s.descend_s)
        if t - self.t_start >= s.reaction_s and obj_x + ahead >= self.meet_x:
            self._plan_grasp()
            over = s.overshoot
            goal = self._hover_point if not over.any() else lambda u: self._hover_point(u) + over
            self._go("reach", t, Segment(t, s.reach_s, self.intent.copy(), goal, s.via_reach))

    def _step_reach(self, t: float, dt: float) -> None:
        """Turn the palm down and open the hand on the way; then correct an overshoot."""
        s = self.style
        self.turn = min_jerk(dt / s.reach_s)
        self.posture = blend(RELAXED, self._open_hand(), dt / s.reach_s)
        if self.seg is not None and self.seg.done(t):
            if s.overshoot.any():
                seg = Segment(t, s.correct_s, self.intent.copy(), self._hover_point)
                self._go("correct", t, seg)
            else:
                self._go("hover", t)

    def _step_regrasp(self, t: float, dt: float) -> None:
        """Level the palm and open the hand on the way back over the object."""
        self.tilt = 1.0 - min_jerk(dt / 0.4)
        self.posture = blend(self._posture_from, self._open_hand(), dt / 0.4)
        if self.seg is not None and self.seg.done(t):
            self._go("hover", t)

    def _step_segment(self, t: float) -> None:
        """Follow the segment (a correction or the carry) to its end, then the next phase."""
        if self.seg is not None and self.seg.done(t):
            self._go("hover" if self.phase == "correct" else "aim", t)

    def _step_hover(self, t: float, dt: float) -> None:
        s = self.style
        self.intent = self._hover_point(t)
        if dt >= s.hover_s + (s.hesitate_s if self.tries == 0 else 0.0):
            self._go("descend", t)

    def _step_descend(self, t: float, dt: float) -> None:
        s = self.style
        tau = min_jerk(dt / s.descend_s)
        # While it descends the hand keeps pace with the object along the belt.
        self.intent = self._grasp_point(t) + [0.0, 0.0, self.hover * (1.0 - tau)]
        if dt >= s.descend_s:
            self._go("close", t)

    def _step_close(self, t: float, dt: float) -> None:
        """Close the hand on the object, hold, then lift."""
        s = self.style
        self.intent = self._grasp_point(t)
        if self.claw:
            grip = CLAW_OPEN + (CLAW_SHUT - CLAW_OPEN) * s.grasp_scale
        else:
            grip = power_shut(self.obj.rest_height) * s.grasp_scale
        self.posture = blend(self._open_hand(), grip, dt / s.close_s)
        if dt >= s.close_s + s.hold_s:
            self._grasped_z = self._seen()[2]
            lift_goal = self.intent + [0.0, 0.0, s.lift_m]
            self._go("lift", t, Segment(t, s.lift_s, self.intent.copy(), lambda u: lift_goal))

    def _step_lift(self, t: float, dt: float) -> None:
        """Tip the hand fingers-down while lifting; then carry, or try again after a miss."""
        s = self.style
        self.tilt = min_jerk((dt / s.lift_s - self.tilt_from) / (1.0 - self.tilt_from))
        if self.seg is not None and self.seg.done(t):
            if self._missed():
                # The object stayed behind: open up, go back over it and try again.
                self.tries += 1
                self._plan_grasp()
                seg = Segment(t, s.reach_s * 0.7, self.intent.copy(), self._hover_point)
                self._go("regrasp", t, seg)
            else:
                above = self.bin_pos + [0.0, POWER_REACH_M, self.carry_height]
                seg = Segment(t, s.carry_s, self.intent.copy(), lambda u: above, s.via_carry)
                self._go("carry", t, seg)

    def _step_aim(self, t: float, dt: float) -> None:
        """Watch the object in the hand and let go once it is over the bin."""
        off = (self.bin_pos - self._seen()) * [1.0, 1.0, 0.0]
        self.intent = self.intent + np.clip(off, -0.1, 0.1) * min(1.0, 2.5 * self._dt)
        if np.linalg.norm(off) < self.aim_m or dt > 2.0:
            self._go("release", t)

    def _step_release(self, t: float, dt: float) -> None:
        """Open the hand; then retreat to where the hand rested."""
        self.posture = blend(self._posture_from, RELAXED, dt / 0.3)
        if dt >= 0.8:
            rest = self.rest.copy()
            seg = Segment(t, 1.5, self.intent.copy(), lambda u: rest)
            self._go("retreat", t, seg)

    def _open_hand(self) -> np.ndarray:
        return CLAW_OPEN if self.claw else PRESHAPE

    def _watch(self, t: float) -> None:
        """Close the loop by eye: while following the object, lead the robot hand by what
        it is seen to trail (slowly, as a person does), within a few centimetres, and its turn
        about the vertical by what it is seen to lag."""
        dt = self._dt
        if self.phase in ("hover", "descend", "close", "regrasp"):
            seen = self.eyes.hand_pose(self.side)
            err = (self.intent - seen[:3]) * [1.0, 1.0, 0.0]
            self.lead = np.clip(self.lead + self.watch_gain * dt * err, -0.04, 0.04)
            if self.phase != "regrasp":
                fingers = quat_to_mat(seen[3:])[:, 2]
                off = self.yaw - np.arctan2(-fingers[0], fingers[1])
                off = (off + np.pi) % (2 * np.pi) - np.pi
                self.yaw_lead = float(
                    np.clip(self.yaw_lead + self.watch_gain * dt * off, -0.5, 0.5)
                )
        elif self.phase in ("release", "retreat"):
            self.lead *= max(0.0, 1.0 - 2.0 * dt)

    def _missed(self) -> bool:
        """Whether the lift left the object behind (and it is worth another try)."""
        obj = self._seen()
        lifted = obj[2] - self._grasped_z > 0.5 * self.style.lift_m
        on_belt = abs(obj[0] - self.world.layout.belt.pos[0]) < self.world.layout.belt.length / 2
        within = obj[0] < self.world.layout.belt.pos[0] + 0.5
        return not lifted and on_belt and within and self.tries < self.max_tries
