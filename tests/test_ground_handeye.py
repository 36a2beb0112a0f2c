"""Hand–eye calibration: wrist and head cameras from rendered board views, and the refusals."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from r2s2r.geometry.board import Checkerboard
from r2s2r.geometry.poses import compose, invert
from r2s2r.ground.calibrate import calibrate
from r2s2r.ground.detect import CalibrationError, detect
from r2s2r.ground.handeye import head_hand_eye, wrist_hand_eye
from r2s2r.ground.synthetic import BoardCamera, spread_board_poses
from r2s2r.sim.camera import Intrinsics

BOARD = Checkerboard(9, 6, 0.03)
WRIST = Intrinsics("fisheye", 640, 480, 252.0, 252.0, 319.5, 239.5, (0.03, -0.01, 0.004, -0.001))
HEAD = Intrinsics("pinhole", 800, 600, 620.0, 620.0, 401.0, 298.0, (-0.08, 0.05, 0.0, 0.0))


def _pose(xyz: list[float], euler_deg: list[float]) -> np.ndarray:
    quat = Rotation.from_euler("xyz", euler_deg, degrees=True).as_quat(scalar_first=True)
    return np.concatenate([xyz, quat])


def _errors(est: np.ndarray, truth: np.ndarray) -> tuple[float, float]:
    """Position (mm) and rotation (deg) error of a (7,) pose."""
    rot = Rotation.from_quat(est[3:], scalar_first=True).inv()
    angle = (rot * Rotation.from_quat(truth[3:], scalar_first=True)).magnitude()
    return float(np.linalg.norm(est[:3] - truth[:3]) * 1000), float(np.degrees(angle))


def _calibrated_views(
    intr: Intrinsics, seed: int
) -> tuple[list[np.ndarray], dict[int, np.ndarray]]:
    """True camera-from-board poses of rendered views, and the poses calibration found (by view)."""
    rng = np.random.default_rng(seed)
    truth = spread_board_poses(10, rng, intr, BOARD)
    cam = BoardCamera(intr, BOARD)
    images = [(str(i), cam.render(p, noise_std=1.0, rng=rng)) for i, p in enumerate(truth)]
    res = calibrate(detect(images, BOARD), BOARD, intr.model, leave_one_out=False)
    return truth, {int(v): res.board_pose(v) for v in res.views_used}


def test_wrist_camera_is_found_from_rendered_views() -> None:
    tcp_from_camera = _pose([0.03, -0.05, 0.08], [8.0, -165.0, 4.0])
    base_from_board = _pose([0.55, 0.12, 0.01], [0.0, 0.0, 30.0])
    truth, seen = _calibrated_views(WRIST, seed=2)
    assert len(seen) >= 8
    # Where the arm must hold its TCP for the camera to see the board as rendered.
    tcp = {
        i: compose(compose(base_from_board, invert(truth[i])), invert(tcp_from_camera))
        for i in seen
    }
    res = wrist_hand_eye([tcp[i] for i in seen], [seen[i] for i in seen])
    pos_mm, rot_deg = _errors(res.tcp_from_camera, tcp_from_camera)
    assert pos_mm < 1.0 and rot_deg < 0.1
    assert res.residual_mm < 1.0 and res.residual_deg < 0.1
    # A wrong board pose shows in the residual.
    bad = dict(seen)
    first = next(iter(bad))
    bad[first] = compose(bad[first], _pose([0.01, 0.0, 0.0], [0.0, 0.0, 0.0]))
    worse = wrist_hand_eye([tcp[i] for i in seen], [bad[i] for i in seen])
    assert worse.residual_mm > 2 * res.residual_mm + 1.0


def test_head_camera_and_held_board_are_found_from_rendered_views() -> None:
    base_from_camera = _pose([0.45, 0.02, 1.25], [180.0, 25.0, 90.0])
    tcp_from_board = _pose([0.0, -0.06, 0.12], [180.0, 0.0, 15.0])
    truth, seen = _calibrated_views(HEAD, seed=6)
    assert len(seen) >= 8
    tcp = {i: compose(compose(base_from_camera, truth[i]), invert(tcp_from_board)) for i in seen}
    res = head_hand_eye([tcp[i] for i in seen], [seen[i] for i in seen])
    pos_mm, rot_deg = _errors(res.base_from_camera, base_from_camera)
    assert pos_mm < 1.0 and rot_deg < 0.1
    pos_mm, rot_deg = _errors(res.tcp_from_board, tcp_from_board)
    assert pos_mm < 1.0 and rot_deg < 0.1
    assert res.residual_mm < 1.0 and res.residual_deg < 0.1


@pytest.mark.parametrize("method", ["tsai", "park", "horaud", "andreff", "daniilidis"])
def test_every_method_is_exact_on_exact_poses(method: str) -> None:
    rng = np.random.default_rng(1)
    x = _pose([0.02, 0.04, 0.1], [-5.0, 170.0, 20.0])
    board = _pose([0.6, 0.0, 0.0], [0.0, 0.0, -40.0])
    tcp = [
        compose(
            _pose([0.5, 0.1, 0.4], [180, 0, 0]), _pose(rng.normal(0, 0.05, 3), rng.normal(0, 15, 3))
        )
        for _ in range(6)
    ]
    cam = [compose(invert(compose(t, x)), board) for t in tcp]
    res = wrist_hand_eye(tcp, cam, method)  # type: ignore[arg-type]
    pos_mm, rot_deg = _errors(res.tcp_from_camera, x)
    assert pos_mm < 1e-3 and rot_deg < 1e-3


def _about_z(angles_deg: list[float]) -> list[np.ndarray]:
    return [_pose([0.5, 0.0, 0.3 + 0.01 * i], [180.0, 0.0, a]) for i, a in enumerate(angles_deg)]


def test_bad_pose_sets_are_refused() -> None:
    tcp = [_pose([0.5, 0, 0.3], [180, 0, 0]), _pose([0.5, 0, 0.3], [150, 20, 0])]
    with pytest.raises(CalibrationError, match="at least 3 pose pairs"):
        wrist_hand_eye(tcp, tcp)
    with pytest.raises(CalibrationError, match="3 TCP poses but 2 board poses"):
        head_hand_eye([*tcp, tcp[0]], tcp)
    # Turning about a single axis leaves the camera's offset along it unknown.
    spin = _about_z([0.0, 30.0, 60.0, 90.0, 120.0])
    with pytest.raises(CalibrationError, match="two axes"):
        wrist_hand_eye(spin, spin)
    # So do turns too small to measure.
    small = [_pose([0.5, 0, 0.3], [180 + a, b, 0]) for a, b in ((0, 0), (3, 0), (0, 3), (3, 3))]
    with pytest.raises(CalibrationError, match="two axes"):
        head_hand_eye(small, small)
    with pytest.raises(ValueError, match="quaternion"):
        wrist_hand_eye([*spin[:3], np.array([0.5, 0, 0.3, 0, 0, 0, 0])], spin[:4])
    with pytest.raises(ValueError, match="method"):
        wrist_hand_eye(spin, spin, "guess")  # type: ignore[arg-type]
