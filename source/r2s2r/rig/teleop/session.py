"""The teleoperation path: a tracked human hand drives one arm and hand of a rig.

Per control period a ``HandKeypoints`` reading (21 human keypoints in the wrist frame and the
wrist pose in the tracker frame) becomes robot commands:

- wrist pose -> TCP target through the calibrated tracker-to-robot transform
  (``TrackerCalibration``: the tracker frame in the cell frame, and the TCP in the wrist frame);
- keypoints -> hand joint targets through the retargeter.

Both go through the safety supervisor. The arm that is not teleoperated holds its pose with an
open hand. ``TeleopSession.step`` returns the commanded action (per arm a TCP pose and the hand's
joint targets, left then right) for recording.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.spatial.transform import Rotation

from r2s2r.geometry.poses import matrix_to_pose, pose_to_matrix
from r2s2r.rig.interfaces import HandKeypoints, Rig
from r2s2r.rig.safety import SafetySupervisor
from r2s2r.rig.teleop.retarget import RetargetCfg, Retargeter
from r2s2r.spec.world import ARM_SIDES

log = logging.getLogger("r2s2r.teleop")

# A human hand is about this much larger than the robot hand (keypoint vectors are scaled by
# its inverse before retargeting).
HUMAN_HAND_SCALE = 1.1


@dataclass(frozen=True)
class TrackerCalibration:
    """Where the tracker's frame sits in the cell (``T_cell_tracker``) and where the robot's
    TCP sits relative to the tracked wrist (``T_wrist_tcp``); both 4x4 rigid transforms."""

    T_cell_tracker: np.ndarray
    T_wrist_tcp: np.ndarray

    def tcp_from_wrist(self, wrist_pose: np.ndarray) -> np.ndarray:
        """The TCP target in the cell frame (7,) for a wrist pose in the tracker frame (7,)."""
        wrist = np.asarray(wrist_pose, dtype=float)
        if wrist.shape != (7,) or not np.isfinite(wrist).all():
            # A bad reading stays bad, so that the supervisor sees and rejects it.
            return np.full(7, np.nan)
        return matrix_to_pose(self.T_cell_tracker @ pose_to_matrix(wrist) @ self.T_wrist_tcp)

    def wrist_from_tcp(self, tcp_pose: np.ndarray) -> np.ndarray:
        """The inverse: where the wrist must be, in the tracker frame, for a TCP pose."""
        tcp = pose_to_matrix(tcp_pose)
        return matrix_to_pose(
            np.linalg.inv(self.T_cell_tracker) @ tcp @ np.linalg.inv(self.T_wrist_tcp)
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "T_cell_tracker": self.T_cell_tracker.tolist(),
            "T_wrist_tcp": self.T_wrist_tcp.tolist(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrackerCalibration:
        cal = cls(np.asarray(data["T_cell_tracker"], float), np.asarray(data["T_wrist_tcp"], float))
        for name, mat in (("T_cell_tracker", cal.T_cell_tracker), ("T_wrist_tcp", cal.T_wrist_tcp)):
            if mat.shape != (4, 4) or not np.allclose(
                mat[:3, :3] @ mat[:3, :3].T, np.eye(3), atol=1e-6
            ):
                raise ValueError(f"{name}: expected a 4x4 rigid transform, got {mat.tolist()}")
        return cal

    @classmethod
    def twin(cls) -> TrackerCalibration:
        """The twin's known calibration: a y-up tracking space (as OpenVR's) whose origin is
        on the floor in front of the cell, turned 5 degrees about the vertical; a tracker
        on the back of the wrist, 9 cm behind and 2 cm above the knuckles (the TCP)."""
        # Tracker axes in the cell: x along the cell's x, y up, z towards the robots' side.
        base = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, -1.0], [0.0, 1.0, 0.0]])
        t_cell_tracker = np.eye(4)
        t_cell_tracker[:3, :3] = Rotation.from_euler("z", 5.0, degrees=True).as_matrix() @ base
        t_cell_tracker[:3, 3] = [0.05, -1.4, 0.0]
        t_wrist_tcp = np.eye(4)
        t_wrist_tcp[:3, 3] = [0.0, -0.02, 0.09]
        return cls(t_cell_tracker, t_wrist_tcp)


class TeleopMapper:
    """The commands of a tracked hand, without sending them: its wrist pose -> the active
    arm's TCP target, its keypoints -> that hand's joint targets; the other arm holds a pose
    with an open hand. ``TeleopSession`` sends what it maps through the safety supervisor;
    a scripted operator run as a policy (``r2s2r.runtime``) returns it as an action."""

    def __init__(
        self,
        calibration: TrackerCalibration,
        hand_dof: int,
        retargeter: dict[str, Retargeter] | RetargetCfg | None = None,
        open_hand: np.ndarray | None = None,
    ) -> None:
        self.calibration, self.hand_dof = calibration, hand_dof
        # What a hand holds until it is driven (the embodiment's ``hand_open``; zeros: None).
        self.open_hand = np.zeros(hand_dof) if open_hand is None else np.asarray(open_hand)
        if isinstance(retargeter, dict):
            self.retargeters = retargeter
        else:
            cfg = retargeter or RetargetCfg(scale=1.0 / HUMAN_HAND_SCALE)
            self.retargeters = {side: Retargeter(cfg, side=side) for side in ARM_SIDES}
        self.active = ARM_SIDES[0]
        self.hold: dict[str, np.ndarray] = {}
        self.hand_q: dict[str, np.ndarray] = {}

    def begin(self, active: str, poses: dict[str, np.ndarray]) -> None:
        """Start an episode mapping onto arm ``active``; each arm holds its pose in
        ``poses`` (the TCP poses now) with an open hand until it is driven."""
        if active not in ARM_SIDES:
            raise ValueError(f"active arm must be one of {ARM_SIDES}, got {active!r}")
        self.active = active
        for side in ARM_SIDES:
            self.hold[side] = np.asarray(poses[side], dtype=float).copy()
            self.hand_q[side] = self.open_hand.astype(float).copy()
            self.retargeters[side].reset()

    def map(self, reading: HandKeypoints) -> tuple[np.ndarray, np.ndarray | None]:
        """(the active arm's TCP target (7,), non-finite where the wrist pose is bad; its
        hand's joint targets, or None where the keypoints could not be retargeted). A good
        hand frame becomes the hand's last target."""
        tcp = self.calibration.tcp_from_wrist(reading.wrist_pose)
        try:
            q = self.retargeters[self.active].solve(reading.keypoints)
        except ValueError as err:
            log.warning("teleop: rejected a hand frame at %.3f s (%s)", reading.stamp, err)
            return tcp, None
        if bool(np.isfinite(tcp).all()):
            self.hand_q[self.active] = q
        return tcp, q

    def action(self, tcp: np.ndarray) -> np.ndarray:
        """The action (per arm a TCP pose and its hand's joints) with the active arm at
        ``tcp`` and the other holding, each hand at its last target."""
        action = np.empty((len(ARM_SIDES), 7 + self.hand_dof))
        for i, s in enumerate(ARM_SIDES):
            action[i, :7] = tcp if s == self.active else self.hold[s]
            action[i, 7:] = self.hand_q[s]
        return action.reshape(-1)


class TeleopSession:
    """Maps hand-tracking readings to commands for one arm and hand of a rig, through the
    safety supervisor; ``begin`` an episode with the arm to drive, then ``step`` per period.

    It reads the arms of ``rig``; ``retargeter`` may be one per side, or a config; by default
    each side gets its own, scaled for a human hand.
    """

    def __init__(
        self,
        rig: Rig,
        supervisor: SafetySupervisor,
        calibration: TrackerCalibration,
        retargeter: dict[str, Retargeter] | RetargetCfg | None = None,
    ) -> None:
        self.rig, self.sup, self.calibration = rig, supervisor, calibration
        emb = supervisor.embodiment
        self.mapper = TeleopMapper(calibration, emb.hand_dof, retargeter, emb.hand_open)
        self.retargeters = self.mapper.retargeters
        self.rejected_frames = 0

    @property
    def active(self) -> str:
        return self.mapper.active

    def begin(self, active: str) -> None:
        """Start an episode driving arm ``active`` (``left`` / ``right``); the other arm
        holds where it is now with an open hand."""
        if active not in ARM_SIDES:
            raise ValueError(f"active arm must be one of {ARM_SIDES}, got {active!r}")
        self.rejected_frames = 0
        for side in ARM_SIDES:
            self.sup.arm(side).resync()
        self.mapper.begin(active, {s: self.rig.arms[s].state().tcp_pose for s in ARM_SIDES})

    def step(self, reading: HandKeypoints) -> np.ndarray:
        """Command one period from ``reading``; returns the commanded action (54,)."""
        mapper, side = self.mapper, self.mapper.active
        arm, hand = self.sup.arm(side), self.sup.hand(side)
        tcp, q = mapper.map(reading)
        wrist_ok = bool(np.isfinite(tcp).all())
        if q is None or not wrist_ok:
            # A bad frame: the supervisor rejects a bad wrist pose and holds the arm; a bad
            # hand frame holds the arm too, and the hand keeps its last target.
            self.rejected_frames += 1
            if not wrist_ok:
                arm.send_tcp_target(tcp)
            else:
                arm.hold("teleop: non-finite hand keypoints")
            tcp = arm.state().tcp_pose
        else:
            arm.send_tcp_target(tcp)
            hand.send_joint_targets(q)
        other = ARM_SIDES[1 - ARM_SIDES.index(side)]
        self.sup.arm(other).send_tcp_target(mapper.hold[other])
        self.sup.hand(other).send_joint_targets(mapper.hand_q[other])
        return mapper.action(tcp)
