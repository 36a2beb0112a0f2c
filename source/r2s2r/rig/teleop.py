"""The teleoperation path: a tracked human hand drives one arm and hand of a rig.

Per control period a ``HandKeypoints`` reading (21 human keypoints in the wrist frame and the
wrist pose in the tracker frame) becomes robot commands:

- wrist pose -> TCP target through the calibrated tracker-to-robot transform
  (``TrackerCalibration``: the tracker frame in the cell frame, and the TCP in the wrist frame);
- keypoints -> 20 hand joint targets through the retargeter.

Both go through the safety supervisor. The arm that is not teleoperated holds its pose with an
open hand. ``TeleopSession.step`` returns the commanded action (54: per arm a TCP pose and 20
hand joints, left then right) for recording.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.spatial.transform import Rotation

from r2s2r.geometry.poses import matrix_to_pose, pose_to_matrix
from r2s2r.rig.interfaces import HandKeypoints, Rig
from r2s2r.rig.retarget import RetargetCfg, Retargeter
from r2s2r.rig.safety import SafetySupervisor
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
        if isinstance(retargeter, dict):
            self.retargeters = retargeter
        else:
            cfg = retargeter or RetargetCfg(scale=1.0 / HUMAN_HAND_SCALE)
            self.retargeters = {side: Retargeter(cfg, side=side) for side in ARM_SIDES}
        self.active = ARM_SIDES[0]
        self.rejected_frames = 0
        self._hold: dict[str, np.ndarray] = {}
        self._hand_q: dict[str, np.ndarray] = {}

    def begin(self, active: str) -> None:
        """Start an episode driving arm ``active`` (``left`` / ``right``); the other arm
        holds where it is now with an open hand."""
        if active not in ARM_SIDES:
            raise ValueError(f"active arm must be one of {ARM_SIDES}, got {active!r}")
        self.active = active
        self.rejected_frames = 0
        for side in ARM_SIDES:
            self.sup.arm(side).resync()
            self._hold[side] = self.rig.arms[side].state().tcp_pose.copy()
            self._hand_q[side] = np.zeros(self.sup.embodiment.hand_dof)
            self.retargeters[side].reset()

    def step(self, reading: HandKeypoints) -> np.ndarray:
        """Command one period from ``reading``; returns the commanded action (54,)."""
        side = self.active
        arm, hand = self.sup.arm(side), self.sup.hand(side)
        tcp = self.calibration.tcp_from_wrist(reading.wrist_pose)
        try:
            q = self.retargeters[side].solve(reading.keypoints)
        except ValueError as err:
            q = None
            log.warning("teleop: rejected a hand frame at %.3f s (%s)", reading.stamp, err)
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
            self._hand_q[side] = q
        other = ARM_SIDES[1 - ARM_SIDES.index(side)]
        self.sup.arm(other).send_tcp_target(self._hold[other])
        self.sup.hand(other).send_joint_targets(self._hand_q[other])
        emb = self.sup.embodiment
        action = np.empty((emb.num_arms, emb.action_per_arm("tcp")))
        for i, s in enumerate(ARM_SIDES):
            action[i, :7] = tcp if s == side else self._hold[s]
            action[i, 7:] = self._hand_q[s]
        return action.reshape(-1)
