"""Camera calibration: boards, the synthetic camera, the fit, its refusals and the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
from scipy.spatial.transform import Rotation
from typer.testing import CliRunner

from r2s2r.cli import app
from r2s2r.geometry.board import Checkerboard, board_texture, parse_board
from r2s2r.geometry.poses import pose_to_matrix
from r2s2r.ground.calibrate import (
    CalibrationResult,
    calibrate,
    calibrate_folder,
    fit_board_poses,
    reprojection_errors,
)
from r2s2r.ground.detect import (
    MIN_VIEWS,
    CalibrationError,
    Detections,
    _orient,
    detect,
    detect_folder,
    read_gray,
)
from r2s2r.ground.synthetic import BoardCamera, spread_board_poses
from r2s2r.sim.camera import Intrinsics

BOARD = Checkerboard(9, 6, 0.03)
FISHEYE = Intrinsics("fisheye", 640, 480, 252.0, 251.4, 321.3, 238.6, (0.04, -0.02, 0.01, -0.003))
PINHOLE = Intrinsics("pinhole", 1280, 720, 910.0, 908.0, 645.2, 355.1, (-0.12, 0.08, 8e-4, -5e-4))


def _views(intr: Intrinsics, n: int, seed: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """``n`` rendered views of BOARD (lightly noisy) and their true camera-from-board poses."""
    rng = np.random.default_rng(seed)
    cam = BoardCamera(intr, BOARD)
    poses = spread_board_poses(n, rng, intr, BOARD)
    return [cam.render(p, noise_std=1.0, rng=rng) for p in poses], poses


def _blank(intr: Intrinsics, seed: int) -> np.ndarray:
    """An image of the cell with no board in it."""
    rng = np.random.default_rng(seed)
    img = np.full((intr.height, intr.width), 110.0) + rng.normal(0, 2.0, (intr.height, intr.width))
    return np.clip(img, 0, 255).astype(np.uint8)


def _fronto_parallel(intr: Intrinsics, n: int, distance: float) -> list[np.ndarray]:
    """Views with the board square to the optical axis: shifted and turned in plane only."""
    rng = np.random.default_rng(5)
    cam = BoardCamera(intr, BOARD)
    images = []
    for _ in range(n):
        rot = Rotation.from_rotvec([0.0, 0.0, rng.uniform(-0.3, 0.3)])
        centre = np.array([rng.uniform(-0.03, 0.03), rng.uniform(-0.02, 0.02), distance])
        pose = np.concatenate([centre - rot.apply(BOARD.center_m), rot.as_quat(scalar_first=True)])
        images.append(cam.render(pose))
    return images


@pytest.fixture(scope="module")
def fisheye_views() -> tuple[list[np.ndarray], list[np.ndarray]]:
    return _views(FISHEYE, 12, seed=11)


@pytest.fixture(scope="module")
def fisheye_result(fisheye_views: tuple[list[np.ndarray], list[np.ndarray]]) -> CalibrationResult:
    images, _ = fisheye_views
    named = [(f"view{i:02d}", img) for i, img in enumerate(images)]
    named += [("empty_a", _blank(FISHEYE, 1)), ("empty_b", _blank(FISHEYE, 2))]
    return calibrate(detect(named, BOARD), BOARD, "fisheye")


# --- Board --------------------------------------------------------------------------------------


def test_board_parses_and_lays_out_its_corners() -> None:
    board = parse_board("checkerboard:9x6:0.025")
    assert (board.cols, board.rows, board.square_m) == (9, 6, 0.025)
    assert str(board) == "checkerboard:9x6:0.025"
    pts = board.object_points()
    assert pts.shape == (54, 1, 3) and pts.dtype == np.float64
    # Row by row: x runs along a row of `cols` corners, y down the rows.
    assert np.allclose(pts[1, 0], [0.025, 0, 0]) and np.allclose(pts[9, 0], [0, 0.025, 0])
    assert np.allclose(pts[-1, 0], [8 * 0.025, 5 * 0.025, 0])
    assert not board.is_symmetric and Checkerboard(8, 6, 0.02).is_symmetric


@pytest.mark.parametrize(
    "text",
    ["chessboard:9x6:0.02", "checkerboard:9x6", "checkerboard:9*6:0.02", "checkerboard:2x6:0.02"],
)
def test_bad_board_strings_name_the_string_and_the_form(text: str) -> None:
    with pytest.raises(ValueError, match="checkerboard") as err:
        parse_board(text)
    assert repr(text) in str(err.value)


def test_board_texture_puts_the_squares_where_the_board_frame_says() -> None:
    px = 20
    tex = board_texture(BOARD, px, margin_squares=1.0)
    assert tex.dtype == np.uint8 and tex.shape == ((6 + 1 + 2) * px, (9 + 1 + 2) * px, 3)
    assert np.all(tex[: px - 1] == 255) and np.all(tex[:, : px - 1] == 255)  # White margin.
    # The square diagonal to the origin corner is black, its neighbours white.
    assert tex[px + px // 2, px + px // 2, 0] == 0
    assert tex[px + px // 2, 2 * px + px // 2, 0] == 255
    assert tex[2 * px + px // 2, px + px // 2, 0] == 255
    # Its inner corners are found where the object points put them.
    gray = tex[..., 0]
    found = detect([("tex", gray)], BOARD).corners["tex"].reshape(-1, 2)
    expected = (BOARD.object_points().reshape(-1, 3)[:, :2] / BOARD.square_m + 2) * px - 0.5
    assert np.abs(found - expected).max() < 0.1


# --- Synthetic camera ---------------------------------------------------------------------------


@pytest.mark.parametrize("intr", [FISHEYE, PINHOLE], ids=["fisheye", "pinhole"])
def test_rendered_corners_sit_where_the_camera_projects_them(intr: Intrinsics) -> None:
    rng = np.random.default_rng(3)
    poses = spread_board_poses(4, rng, intr, BOARD)
    cam = BoardCamera(intr, BOARD)
    obj = BOARD.object_points().reshape(-1, 3)
    errors = []
    for pose in poses:
        m = pose_to_matrix(pose)
        truth = intr.project(obj @ m[:3, :3].T + m[:3, 3])
        assert np.all((truth > 0) & (truth < [intr.width, intr.height]))
        tilt = np.degrees(np.arccos(m[2, 2]))
        assert 15.0 < tilt < 50.0
        found = detect([("v", cam.render(pose))], BOARD).corners.get("v")
        if found is not None:
            errors.append(np.sqrt(np.mean(np.sum((found.reshape(-1, 2) - truth) ** 2, axis=1))))
    assert len(errors) >= 3
    assert max(errors) < 0.15


def test_corner_order_is_fixed_by_the_black_origin_square(
    fisheye_views: tuple[list[np.ndarray], list[np.ndarray]],
) -> None:
    # The SB detector, for one, may hand the grid back turned by half a turn.
    img = fisheye_views[0][0]
    found = detect([("v", img)], BOARD).corners["v"]
    assert np.array_equal(_orient(found[::-1].copy(), img, BOARD), found)
    assert np.array_equal(_orient(found, img, BOARD), found)


# --- Fitting ------------------------------------------------------------------------------------


def test_fisheye_fit_recovers_the_camera(fisheye_result: CalibrationResult) -> None:
    res = fisheye_result
    assert res.model == "fisheye" and res.image_size == (640, 480) and len(res.dist) == 4
    assert res.fx == pytest.approx(FISHEYE.fx, rel=0.005)
    assert res.fy == pytest.approx(FISHEYE.fy, rel=0.005)
    assert abs(res.cx - FISHEYE.cx) < 2.0 and abs(res.cy - FISHEYE.cy) < 2.0
    assert np.allclose(res.dist, FISHEYE.dist, atol=0.01)
    assert res.rms_px < 0.3 and res.loo_px <= 1.0
    assert len(res.views_used) >= 11 and set(res.view_loo_px) == set(res.views_used)
    assert res.loo_px >= res.rms_px * 0.9  # Held-out views cannot fit much better.


def test_views_without_the_board_are_reported_and_skipped(
    fisheye_result: CalibrationResult,
) -> None:
    rejected = fisheye_result.views_rejected
    assert "board found" in rejected["empty_a"] and "board found" in rejected["empty_b"]
    assert "empty_a" not in fisheye_result.views_used
    js = fisheye_result.to_json()
    assert "empty_b" in js["views_rejected"] and "empty_b" not in js["views_used"]


def test_fitted_board_poses_match_the_true_ones(
    fisheye_views: tuple[list[np.ndarray], list[np.ndarray]], fisheye_result: CalibrationResult
) -> None:
    _, poses = fisheye_views
    for view in fisheye_result.views_used:
        truth = pose_to_matrix(poses[int(view[4:])])
        est = pose_to_matrix(fisheye_result.board_pose(view))
        assert np.linalg.norm(est[:3, 3] - truth[:3, 3]) < 1e-3
        angle = np.degrees(Rotation.from_matrix(est[:3, :3].T @ truth[:3, :3]).magnitude())
        assert angle < 0.2


def test_pinhole_fit_recovers_the_camera() -> None:
    images, _ = _views(PINHOLE, 10, seed=4)
    res = calibrate(detect([(f"v{i}", im) for i, im in enumerate(images)], BOARD), BOARD, "pinhole")
    assert len(res.dist) == 4 and len(res.views_used) >= 9
    assert res.fx == pytest.approx(PINHOLE.fx, rel=0.005)
    assert res.fy == pytest.approx(PINHOLE.fy, rel=0.005)
    assert abs(res.cx - PINHOLE.cx) < 2.0 and abs(res.cy - PINHOLE.cy) < 2.0
    assert res.loo_px <= 1.0
    # The given-camera check agrees with the fit, and exposes a camera with a wrong focal length.
    intr = res.intrinsics()
    poses = {v: res.board_pose(v) for v in res.views_used}
    same = reprojection_errors(intr, BOARD, res.corners, poses)
    assert same.rms_px == pytest.approx(res.rms_px, rel=1e-3)
    wrong = Intrinsics("pinhole", 1280, 720, 0.95 * intr.fx, 0.95 * intr.fy, intr.cx, intr.cy)
    assert reprojection_errors(wrong, BOARD, res.corners, poses).rms_px > 10 * res.rms_px
    refit = fit_board_poses(wrong, BOARD, res.corners)
    assert reprojection_errors(wrong, BOARD, res.corners, refit).rms_px > 3 * res.rms_px


def test_a_wide_fisheye_is_fitted_where_opencvs_own_start_fails() -> None:
    # With these views cv2.fisheye.calibrate stops at "fabs(norm_u1) > 0" from its default start.
    wide = Intrinsics("fisheye", 640, 480, 180.0, 180.0, 318.0, 242.0, (0.05, -0.03, 0.01, -0.002))
    cam = BoardCamera(wide, BOARD)
    poses = spread_board_poses(10, np.random.default_rng(0), wide, BOARD)
    det = detect([(f"v{i}", cam.render(p)) for i, p in enumerate(poses)], BOARD)
    res = calibrate(det, BOARD, "fisheye", leave_one_out=False)
    assert res.fx == pytest.approx(180.0, rel=0.005) and res.rms_px < 0.2


def test_an_outlier_view_is_rejected_and_named(
    fisheye_views: tuple[list[np.ndarray], list[np.ndarray]],
) -> None:
    images, _ = fisheye_views
    det = detect([(f"view{i:02d}", img) for i, img in enumerate(images[:8])], BOARD)
    corners = dict(det.corners)
    bad = sorted(corners)[3]
    # A view whose corners were mislabelled by a few pixels (e.g. motion during exposure).
    corners[bad] = corners[bad] + np.random.default_rng(0).normal(0, 4.0, corners[bad].shape)
    res = calibrate(Detections(det.image_size, corners), BOARD, "fisheye", leave_one_out=False)
    assert bad not in res.views_used and "outlier" in res.views_rejected[bad]
    assert res.fx == pytest.approx(FISHEYE.fx, rel=0.01)


# --- Refusals -----------------------------------------------------------------------------------


def test_an_empty_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CalibrationError, match="no images"):
        detect_folder(tmp_path, BOARD)


def test_images_without_a_board_are_refused(tmp_path: Path) -> None:
    for i in range(3):
        cv2.imwrite(str(tmp_path / f"wall{i}.png"), _blank(FISHEYE, i))
    with pytest.raises(CalibrationError, match=r"found in 0 of 3 images.*at least 6"):
        calibrate_folder(tmp_path, BOARD, "fisheye")


def test_too_few_views_are_refused(
    fisheye_views: tuple[list[np.ndarray], list[np.ndarray]],
) -> None:
    images, _ = fisheye_views
    det = detect([(f"v{i}", img) for i, img in enumerate(images[: MIN_VIEWS - 2])], BOARD)
    with pytest.raises(CalibrationError, match=f"at least {MIN_VIEWS}"):
        calibrate(det, BOARD, "fisheye")


@pytest.mark.parametrize(
    ("intr", "distance"),
    [(FISHEYE, 0.35), (PINHOLE.scaled(640, 360), 0.5)],
    ids=["fisheye", "pinhole"],
)
def test_parallel_boards_are_refused(intr: Intrinsics, distance: float) -> None:
    images = _fronto_parallel(intr, MIN_VIEWS + 1, distance)
    det = detect([(f"v{i}", img) for i, img in enumerate(images)], BOARD)
    assert len(det.corners) == MIN_VIEWS + 1
    with pytest.raises(CalibrationError, match="normals.*tilted"):
        calibrate(det, BOARD, intr.model)


def test_unreadable_and_truncated_files_are_named(tmp_path: Path) -> None:
    ok, png = cv2.imencode(".png", _blank(FISHEYE, 0))
    ok2, jpg = cv2.imencode(".jpg", _blank(FISHEYE, 0))
    assert ok and ok2
    cases = {
        "cut.png": png.tobytes()[: len(png) // 2],
        "cut.jpg": jpg.tobytes()[: len(jpg) // 2],
        "junk.png": b"not an image at all",
    }
    for name, data in cases.items():
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(CalibrationError, match=name):
            read_gray(path)
    assert read_gray(_write(tmp_path / "fine.png", png.tobytes())).shape == (480, 640)
    with pytest.raises(CalibrationError, match="cut.jpg"):
        detect_folder(tmp_path, BOARD)


def test_images_of_different_sizes_are_refused() -> None:
    small = np.zeros((240, 320), np.uint8)
    with pytest.raises(CalibrationError, match=r"b\.png.*320x240.*640x480"):
        detect([("a.png", _blank(FISHEYE, 0)), ("b.png", small)], BOARD)


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


# --- Command line -------------------------------------------------------------------------------


def test_cli_prints_json_with_the_documented_keys(
    tmp_path: Path, fisheye_views: tuple[list[np.ndarray], list[np.ndarray]]
) -> None:
    images, _ = fisheye_views
    for i, img in enumerate(images[:8]):
        cv2.imwrite(str(tmp_path / f"cap{i:02d}.png"), img)
    cv2.imwrite(str(tmp_path / "nothing.jpg"), _blank(FISHEYE, 3))
    args = ["ground", "calibrate", "--images", str(tmp_path), "--board", "checkerboard:9x6:0.03"]
    result = CliRunner().invoke(app, [*args, "--model", "fisheye", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    for key in ("fx", "fy", "cx", "cy", "dist", "rms_px", "loo_px", "views_used", "views_rejected"):
        assert key in out
    assert out["fx"] == pytest.approx(FISHEYE.fx, rel=0.01) and len(out["dist"]) == 4
    assert "nothing.jpg" in out["views_rejected"] and len(out["views_used"]) >= 7
    table = CliRunner().invoke(app, [*args, "--model", "fisheye"])
    assert table.exit_code == 0 and "leave-one-out" in table.stdout and "k4=" in table.stdout


def test_cli_bad_input_exits_2_with_the_message(tmp_path: Path) -> None:
    cmd = ["ground", "calibrate", "--images", str(tmp_path), "--board", "checkerboard:9x6:0.03"]
    proc = subprocess.run(
        [sys.executable, "-m", "r2s2r", *cmd, "--model", "pinhole"], capture_output=True, text=True
    )
    assert proc.returncode == 2, proc.stderr
    assert "error:" in proc.stderr and "no images" in proc.stderr and "Traceback" not in proc.stderr
    # The same entry point turns these ValueErrors into messages, too.
    for args, message in (
        ([*cmd[:-1], "9x6", "--model", "pinhole"], "checkerboard:COLSxROWS:SQUARE_M"),
        ([*cmd, "--model", "kb8"], "pinhole or fisheye"),
    ):
        result = CliRunner().invoke(app, args)
        assert isinstance(result.exception, ValueError) and message in str(result.exception)
