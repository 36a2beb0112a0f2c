"""The safety supervisor: every command to an arm or a hand, twin or real, passes through it.

It rejects non-finite commands, keeps TCP targets inside a workspace box, limits how fast the
commanded target may move, clamps hand targets to their joint ranges, holds the arms when
commands stop arriving (and stops them after a longer gap), holds them when a watched camera
stops delivering frames, and offers an emergency stop callable from any thread. Each
intervention is logged on the ``r2s2r.safety`` logger and kept in ``events``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
from pydantic import model_validator

from r2s2r.rig.interfaces import Arm, ArmState, Camera, Hand, HandState
from r2s2r.sim.embodiment import Embodiment
from r2s2r.spec import Spec
from r2s2r.spec.base import Pos

log = logging.getLogger("r2s2r.safety")


class SafetyLimits(Spec):
    """Limits the supervisor enforces (cell frame, metres, radians, seconds); the hands'
    joint ranges are the embodiment's."""

    workspace_min: tuple[float, float, float] = (-1.0, -0.9, 0.78)
    workspace_max: tuple[float, float, float] = (1.0, 0.35, 1.6)
    # How fast the commanded TCP target may move.
    max_lin_vel: Pos = 1.0
    max_ang_vel: Pos = 2.5
    # A target further than this from the last accepted one is refused outright.
    max_jump_m: Pos = 0.25
    # Command gaps: hold the current pose after this long, stop the arm after this long.
    hold_after_s: Pos = 0.1
    stop_after_s: Pos = 0.5
    # A watched camera whose newest frame is older than this makes the arms hold.
    camera_timeout_s: Pos = 0.2

    @model_validator(mode="after")
    def _check(self) -> SafetyLimits:
        low, high = np.asarray(self.workspace_min), np.asarray(self.workspace_max)
        if not (low < high).all():
            raise ValueError(
                f"workspace_min {self.workspace_min} must lie below workspace_max "
                f"{self.workspace_max} on every axis"
            )
        if self.stop_after_s <= self.hold_after_s:
            raise ValueError(
                f"stop_after_s {self.stop_after_s} must exceed hold_after_s {self.hold_after_s}"
            )
        return self


@dataclass(frozen=True)
class SafetyEvent:
    stamp: float
    device: str
    kind: str  # rejected | clamped | limited | hold | stop | estop | camera_stall
    detail: str


class SafetySupervisor:
    """Wraps a rig's arms and hands (of ``embodiment``, whose hand joint ranges it keeps the
    hands in); hand out ``arm(name)`` / ``hand(name)`` instead."""

    def __init__(
        self,
        arms: Mapping[str, Arm],
        hands: Mapping[str, Hand],
        clock: Callable[[], float],
        embodiment: Embodiment,
        limits: SafetyLimits | None = None,
    ) -> None:
        self.limits = limits or SafetyLimits()
        self.embodiment = embodiment
        self.hand_ranges = embodiment.hand_limits
        self.clock = clock
        self.events: list[SafetyEvent] = []
        self._lock = threading.RLock()
        self._estopped = False
        self._cameras: list[Camera] = []
        # When a watched camera stalled (rig clock), while it stays stalled; else None.
        self._stalled_since: float | None = None
        self._arms = {name: SafeArm(self, arm) for name, arm in arms.items()}
        self._hands = {name: SafeHand(self, hand) for name, hand in hands.items()}

    def arm(self, name: str) -> SafeArm:
        return self._arms[name]

    def hand(self, name: str) -> SafeHand:
        return self._hands[name]

    @property
    def estopped(self) -> bool:
        """Whether the emergency stop is latched (read under the supervisor's lock, so a
        stop in progress on another thread is seen whole: its event is logged)."""
        with self._lock:
            return self._estopped

    def watch_camera(self, camera: Camera) -> None:
        """Hold the arms whenever ``camera`` stops delivering fresh frames (watching one
        camera twice watches it once)."""
        if all(c is not camera for c in self._cameras):
            self._cameras.append(camera)

    def emergency_stop(self, reason: str = "emergency stop") -> None:
        """Stop every arm now and refuse commands until ``release_estop``; thread-safe."""
        with self._lock:
            self._estopped = True
            for arm in self._arms.values():
                arm.inner.stop()
                arm._mode = "stopped"
            self._event("all", "estop", reason)

    def release_estop(self) -> None:
        with self._lock:
            self._estopped = False
            for arm in self._arms.values():
                arm.resync()
            self._event("all", "estop", "released")

    @property
    def camera_stalled(self) -> bool:
        """Whether a watched camera is stalled now (the arms hold and refuse commands)."""
        return self._stalled_since is not None

    def tick(self) -> None:
        """The watchdog; call it every control period (hardware: from a timer thread).

        A watched camera without a fresh frame holds the arms and makes them refuse commands
        until it delivers again; stalled for longer than ``stop_after_s``, it stops them."""
        with self._lock:
            now = self.clock()
            for cam in self._cameras:
                age = now - cam.read().stamp
                if age > self.limits.camera_timeout_s:
                    if self._stalled_since is None:
                        self._stalled_since = now
                    for arm in self._arms.values():
                        if now - self._stalled_since > self.limits.stop_after_s:
                            arm.stop_for(f"camera {cam.name} stalled for {age:.2f} s")
                        else:
                            arm.hold(
                                f"camera {cam.name} stalled ({age:.2f} s without a frame)",
                                kind="camera_stall",
                            )
                    return
            if self._stalled_since is not None:
                self._stalled_since = None
                self._event("all", "camera_stall", "cameras deliver again")
            for arm in self._arms.values():
                arm.watchdog(now)

    def _event(self, device: str, kind: str, detail: str) -> None:
        event = SafetyEvent(self.clock(), device, kind, detail)
        self.events.append(event)
        level = (
            logging.WARNING
            if kind in ("rejected", "stop", "estop", "camera_stall")
            else logging.INFO
        )
        log.log(level, "%s %s: %s", device, kind, detail)


class SafeArm:
    """An ``Arm`` whose commands are checked and limited by the supervisor."""

    def __init__(self, supervisor: SafetySupervisor, inner: Arm) -> None:
        self.sup, self.inner, self.name = supervisor, inner, inner.name
        self._target = inner.state().tcp_pose.copy()
        self._last_cmd = supervisor.clock()
        self._mode = "active"  # active | holding | stopped

    def state(self) -> ArmState:
        return self.inner.state()

    def stop(self) -> None:
        with self.sup._lock:
            self.inner.stop()
            self._mode = "stopped"

    def resync(self) -> None:
        """Take the arm's current pose as the last accepted target."""
        with self.sup._lock:
            self._target = self.inner.state().tcp_pose.copy()
            self._last_cmd = self.sup.clock()
            self._mode = "active"

    def send_tcp_target(self, pose: np.ndarray) -> None:
        lim, sup = self.sup.limits, self.sup
        with sup._lock:
            now = sup.clock()
            if sup.estopped:
                sup._event(self.name, "rejected", "emergency stop is latched")
                return
            if sup.camera_stalled:
                # Held (or stopped) by the camera watchdog; the tick that sees fresh frames
                # lets commands through again.
                return
            pose = np.asarray(pose, dtype=float)
            if pose.shape != (7,) or not np.isfinite(pose).all():
                sup._event(self.name, "rejected", f"non-finite or malformed target {pose}")
                self.hold("holding after a rejected command")
                return
            quat = pose[3:] / max(np.linalg.norm(pose[3:]), 1e-12)
            pos = pose[:3]
            jump = np.linalg.norm(pos - self._target[:3])
            if jump > lim.max_jump_m:
                sup._event(
                    self.name, "rejected", f"target jumps {jump:.3f} m (limit {lim.max_jump_m} m)"
                )
                self.hold("holding after a rejected command")
                return
            clamped = np.clip(pos, lim.workspace_min, lim.workspace_max)
            if not np.allclose(clamped, pos):
                sup._event(self.name, "clamped", f"target {pos} outside the workspace")
            if self._mode != "active":
                self.resync()
            dt = max(now - self._last_cmd, 0.02)
            step = clamped - self._target[:3]
            max_step = lim.max_lin_vel * dt
            if np.linalg.norm(step) > max_step:
                sup._event(self.name, "limited", "target speed above the linear limit")
                step *= max_step / np.linalg.norm(step)
            self._target = np.concatenate(
                [self._target[:3] + step, _limit_turn(self._target[3:], quat, lim.max_ang_vel * dt)]
            )
            self._last_cmd = now
            self.inner.send_tcp_target(self._target)

    def hold(self, reason: str, kind: str = "hold") -> None:
        """Stop the arm where it is (once per hold); the next accepted command resumes."""
        with self.sup._lock:
            if self._mode == "active":
                self.inner.stop()
                self._target = self.inner.state().tcp_pose.copy()
                self._mode = "holding"
                self.sup._event(self.name, kind, reason)

    def stop_for(self, reason: str) -> None:
        """Stop the arm (once) for ``reason``; the next accepted command resumes."""
        with self.sup._lock:
            if self._mode != "stopped":
                self.inner.stop()
                self._mode = "stopped"
                self.sup._event(self.name, "stop", reason)

    @property
    def target(self) -> np.ndarray:
        """The last accepted TCP target (7,): where the supervisor measures jumps from."""
        with self.sup._lock:
            return self._target.copy()

    @property
    def mode(self) -> str:
        """``active``, ``holding`` or ``stopped``."""
        return self._mode

    def watchdog(self, now: float) -> None:
        gap = now - self._last_cmd
        if self._mode == "stopped" or self.sup.estopped:
            return
        if gap > self.sup.limits.stop_after_s:
            self.stop_for(f"no command for {gap:.2f} s")
        elif gap > self.sup.limits.hold_after_s:
            self.hold(f"no command for {gap:.2f} s")


class SafeHand:
    """A ``Hand`` whose targets are checked and clamped to the embodiment's joint ranges."""

    def __init__(self, supervisor: SafetySupervisor, inner: Hand) -> None:
        self.sup, self.inner, self.name = supervisor, inner, inner.name

    def state(self) -> HandState:
        return self.inner.state()

    def send_joint_targets(self, q: np.ndarray) -> None:
        sup, ranges = self.sup, self.sup.hand_ranges
        with sup._lock:
            q = np.asarray(q, dtype=float)
            if sup.estopped:
                sup._event(self.name, "rejected", "emergency stop is latched")
                return
            if q.shape != (len(ranges),) or not np.isfinite(q).all():
                sup._event(self.name, "rejected", f"non-finite or malformed targets {q}")
                return
            clamped = np.clip(q, ranges[:, 0], ranges[:, 1])
            if not np.allclose(clamped, q):
                sup._event(self.name, "clamped", "hand targets outside the joint ranges")
            self.inner.send_joint_targets(clamped)


def _limit_turn(current: np.ndarray, target: np.ndarray, max_angle: float) -> np.ndarray:
    """Rotate quaternion ``current`` towards ``target`` by at most ``max_angle`` (slerp)."""
    dot = float(np.dot(current, target))
    if dot < 0:
        target, dot = -target, -dot
    angle = 2.0 * np.arccos(min(1.0, dot))
    if angle <= max_angle or angle < 1e-9:
        return target
    t = max_angle / angle
    half = angle / 2
    out = (np.sin((1 - t) * half) * current + np.sin(t * half) * target) / np.sin(half)
    return out / np.linalg.norm(out)
