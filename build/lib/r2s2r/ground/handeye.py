"""Hand–eye calibration: where a camera sits relative to the robot, from board views.

Thin, checked wrappers around OpenCV 4.x:

- :func:`wrist_hand_eye` — a camera on the arm (``cv2.calibrateHandEye``): from TCP poses in
  the base frame and camera-from-board poses of a board fixed in the cell, the camera's pose in
  the TCP frame.
- :func:`head_hand_eye` — a fixed camera watching a board held by the arm
  (``cv2.calibrateRobotWorldHandEye``): the camera's pose in the base frame and the board's
  pose in the TCP frame.

Poses are (7,) ``[x y z qw qx qy qz]`` in metres; ``T_a_b`` is frame ``b`` in frame ``a``
(see :mod:`r2s2r.geometry.poses`). Each result carries the residual: how far the pose chain
predicted by the solution strays from the measurements (RMS, mm and degrees).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import cv2
import numpy as np

from r2s2r.geometry.poses import as_pose, matrix_to_pose, pose_to_matrix
from r2s2r.ground.detect import CalibrationError

__all__ = [
    "MIN_POSES",
    "HandEyeResult",
    "RobotWorldResult",
    "head_hand_eye",
    "wrist_hand_eye",
]

# Fewest pose pairs; the motions between them must turn about two clearly different axes.
MIN_POSES = 3
MIN_ROTATION_DEG = 10.0
MIN_AXIS_ANGLE_DEG = 20.0

Method = Literal["tsai", "park", "horaud", "andreff", "daniilidis"]
_METHODS: dict[str, int] = {
    "tsai": cv2.CALIB_HAND_EYE_TSAI,
    "park": cv2.CALIB_HAND_EYE_PARK,
    "horaud": cv2.CALIB_HAND_EYE_HORAUD,
    "andreff": cv2.CALIB_HAND_EYE_ANDREFF,
    "daniilidis": cv2.CALIB_HAND_EYE_DANIILIDIS,
}
_HINT = (
    f"capture at least {MIN_POSES} (better 10-20) robot poses that turn the tool by "
    f"{MIN_ROTATION_DEG:g}-45 degrees about at least two different axes, with the board in view"
)


@dataclass(frozen=True)
class HandEyeResult:
    """A wrist camera's pose in the TCP frame and how well it explains the views."""

    tcp_from_camera: np.ndarray
    # RMS spread of the board pose in the base frame as predicted from each view.
    residual_mm: float
    residual_deg: float


@dataclass(frozen=True)
class RobotWorldResult:
    """A fixed camera's pose in the base frame, the held board's pose in the TCP frame, and how
    well they explain the views."""

    base_from_camera: np.ndarray
    tcp_from_board: np.ndarray
    # RMS difference between the board pose in the base frame via the camera and via the arm.
    residual_mm: float
    residual_deg: float


def _matrices(poses: Sequence[np.ndarray], what: str) -> np.ndarray:
    """(n, 4, 4) transforms of checked (7,) poses."""
    return np.array([pose_to_matrix(as_pose(p, f"{what}[{i}]")) for i, p in enumerate(poses)])


def _rotation_angle_deg(rot: np.ndarray) -> float:
    return float(np.degrees(np.arccos(np.clip((np.trace(rot) - 1.0) / 2.0, -1.0, 1.0))))


def _check_pairs(tcp: np.ndarray, cam: np.ndarray) -> None:
    """Refuse too few pairs, or motions that do not turn about two different axes."""
    if len(tcp) != len(cam):
        raise CalibrationError(f"got {len(tcp)} TCP poses but {len(cam)} board poses; pair them up")
    if len(tcp) < MIN_POSES:
        raise CalibrationError(
            f"hand-eye calibration needs at least {MIN_POSES} pose pairs, got {len(tcp)}; {_HINT}"
        )
    axes = []
    for i in range(len(tcp)):
        for j in range(i + 1, len(tcp)):
            rel = tcp[i, :3, :3].T @ tcp[j, :3, :3]
            if _rotation_angle_deg(rel) < MIN_ROTATION_DEG:
                continue
            axis = np.array([rel[2, 1] - rel[1, 2], rel[0, 2] - rel[2, 0], rel[1, 0] - rel[0, 1]])
            if np.linalg.norm(axis) > 1e-9:
                axes.append(axis / np.linalg.norm(axis))
    sin_min = np.sin(np.radians(MIN_AXIS_ANGLE_DEG))
    spread = any(
        np.linalg.norm(np.cross(a, b)) >= sin_min for i, a in enumerate(axes) for b in axes[i + 1 :]
    )
    if not spread:
        raise CalibrationError(
            f"the {len(tcp)} TCP poses do not turn by {MIN_ROTATION_DEG:g} degrees or more about "
            f"two axes at least {MIN_AXIS_ANGLE_DEG:g} degrees apart, so the camera's pose is "
            f"undetermined; {_HINT}"
        )


def _spread(mats: np.ndarray, ref: np.ndarray) -> tuple[float, float]:
    """RMS position (mm) and rotation (deg) differences between transforms and ``ref``."""
    pos = np.linalg.norm(mats[:, :3, 3] - ref[:3, 3], axis=1) * 1000.0
    ang = np.array([_rotation_angle_deg(ref[:3, :3].T @ m[:3, :3]) for m in mats])
    return float(np.sqrt(np.mean(pos**2))), float(np.sqrt(np.mean(ang**2)))


def wrist_hand_eye(
    base_from_tcp: Sequence[np.ndarray],
    camera_from_board: Sequence[np.ndarray],
    method: Method = "park",
) -> HandEyeResult:
    """Pose of a wrist camera in the TCP frame, from pose pairs of a board fixed in the cell.

    ``base_from_tcp[i]`` is the TCP pose reported by the arm and ``camera_from_board[i]`` the
    board pose the camera saw at the same moment (e.g. ``CalibrationResult.board_pose``).
    The residual is the spread of ``T_base_board = T_base_tcp X T_cam_board`` over the views.
    """
    if method not in _METHODS:
        raise ValueError(f"method must be one of {sorted(_METHODS)}, got {method!r}")
    tcp = _matrices(base_from_tcp, "base_from_tcp")
    cam = _matrices(camera_from_board, "camera_from_board")
    _check_pairs(tcp, cam)
    rot, trans = cv2.calibrateHandEye(
        list(tcp[:, :3, :3]),
        list(tcp[:, :3, 3]),
        list(cam[:, :3, :3]),
        list(cam[:, :3, 3]),
        method=_METHODS[method],
    )
    x = np.eye(4)
    x[:3, :3], x[:3, 3] = rot, trans.ravel()
    boards = tcp @ x @ cam
    mean = _mean_transform(boards)
    pos, ang = _spread(boards, mean)
    return HandEyeResult(matrix_to_pose(x), pos, ang)


def head_hand_eye(
    base_from_tcp: Sequence[np.ndarray], camera_from_board: Sequence[np.ndarray]
) -> RobotWorldResult:
    """Pose of a fixed camera in the base frame, from views of a board held by the arm.

    Solves ``T_base_cam T_cam_board[i] = T_base_tcp[i] T_tcp_board`` for the two constant
    poses. OpenCV's robot-world problem ``cTw wTb = cTg gTb`` maps onto it with OpenCV's camera
    as our board, its world as our camera, its base as our base and its gripper as our TCP.
    """
    tcp = _matrices(base_from_tcp, "base_from_tcp")
    cam = _matrices(camera_from_board, "camera_from_board")
    _check_pairs(tcp, cam)
    board_from_cam = np.linalg.inv(cam)
    tcp_from_base = np.linalg.inv(tcp)
    r_cam_base, t_cam_base, r_board_tcp, t_board_tcp = cv2.calibrateRobotWorldHandEye(
        list(board_from_cam[:, :3, :3]),
        list(board_from_cam[:, :3, 3]),
        list(tcp_from_base[:, :3, :3]),
        list(tcp_from_base[:, :3, 3]),
    )
    cam_from_base = np.eye(4)
    cam_from_base[:3, :3], cam_from_base[:3, 3] = r_cam_base, t_cam_base.ravel()
    board_from_tcp = np.eye(4)
    board_from_tcp[:3, :3], board_from_tcp[:3, 3] = r_board_tcp, t_board_tcp.ravel()
    base_cam = np.linalg.inv(cam_from_base)
    tcp_board = np.linalg.inv(board_from_tcp)
    via_camera = base_cam @ cam
    via_arm = tcp @ tcp_board
    # Difference of the two chains per view, measured in the base frame.
    pos = np.linalg.norm(via_camera[:, :3, 3] - via_arm[:, :3, 3], axis=1) * 1000.0
    ang = np.array(
        [
            _rotation_angle_deg(a[:3, :3].T @ b[:3, :3])
            for a, b in zip(via_camera, via_arm, strict=True)
        ]
    )
    return RobotWorldResult(
        matrix_to_pose(base_cam),
        matrix_to_pose(tcp_board),
        float(np.sqrt(np.mean(pos**2))),
        float(np.sqrt(np.mean(ang**2))),
    )


def _mean_transform(mats: np.ndarray) -> np.ndarray:
    """Mean of rigid transforms (n, 4, 4): mean position, chordal mean rotation."""
    u, _, vt = np.linalg.svd(mats[:, :3, :3].sum(axis=0))
    rot = u @ vt
    if np.linalg.det(rot) < 0:
        u[:, -1] *= -1
        rot = u @ vt
    out = np.eye(4)
    out[:3, :3], out[:3, 3] = rot, mats[:, :3, 3].mean(axis=0)
    return out
