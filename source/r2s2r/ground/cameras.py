"""Camera grounding through a rig: board captures, intrinsics, and extrinsics in the cell frame.

Capture (``board_capture.capture_cameras``): the presenter props the checkerboard up in varied
tilted poses for the head camera; at a few of those placements each arm moves its wrist camera
around the board (aimed with the CAD mount, which is close enough to point a camera) and the
arm's TCP pose is stored with every wrist image. Everything lands as plain files::

    DIR/cameras/meta.json                       board, placements, views
    DIR/cameras/head/pXX.png                    head views, one per placement
    DIR/cameras/<side>_wrist/pXX_vYY.png        wrist views
    DIR/cameras/<side>_wrist/tcp_poses.json     {view: TCP pose [x y z qw qx qy qz]}

Calibration (``ground_cameras``): intrinsics per camera (``calibrate``), then one joint
least-squares fit of every wrist camera's pose on its TCP (hand-eye) and of the board poses in
the cell, minimising the reprojection error of every wrist view through the arm's kinematics;
the head camera's pose follows from the boards the wrists located. Errors are reported per
view and leave-one-out (a view's corners predicted through the chain fitted without it), next
to the same error for the CAD-mounted cameras with the fitted intrinsics.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import least_squares
from scipy.spatial.transform import Rotation

from r2s2r.geometry.board import Checkerboard, parse_board
from r2s2r.geometry.poses import matrix_to_pose, pose_to_matrix
from r2s2r.ground.calibrate import CalibrationResult, calibrate, project, solve_pose
from r2s2r.ground.detect import CalibrationError, Detections, detect, read_gray
from r2s2r.sim.camera import Intrinsics
from r2s2r.spec import WorldSpec
from r2s2r.spec.world import ARM_SIDES, Pose

# The TCP sits this far along the flange's z axis (as in r2s2r.sim.vendor).
TCP_OFFSET_M = 0.12


def spec_pose_matrix(pose: Pose) -> np.ndarray:
    """A spec ``Pose`` as a 4x4 transform."""
    return pose_to_matrix(np.concatenate([pose.pos, pose.quat]))


def _tcp_from_flange(tcp_offset: float) -> np.ndarray:
    m = np.eye(4)
    m[2, 3] = -tcp_offset
    return m


def tcp_from_camera_nominal(
    world: WorldSpec, side: str, tcp_offset: float = TCP_OFFSET_M
) -> np.ndarray:
    """The CAD pose (4x4) of a wrist camera in its arm's TCP frame (the TCP sits
    ``tcp_offset`` along the flange's z axis)."""
    return _tcp_from_flange(tcp_offset) @ spec_pose_matrix(world.cameras[f"{side}_wrist"].pose)


# ----------------------------------------------------------------------------- calibration
@dataclass
class CameraGrounding:
    """One camera's grounded intrinsics and pose, with its errors next to the CAD camera's."""

    name: str
    calibration: CalibrationResult
    # Pose of the camera (OpenCV frame) in its mount frame: the cell, or its arm's flange.
    pose: np.ndarray
    # Reprojection RMS (px) through the fitted chain, per view and leave-one-out.
    chain_rms_px: float
    chain_loo_px: float
    chain_view_px: dict[str, float]
    # The same with the CAD pose and the fitted intrinsics.
    cad_rms_px: float
    cad_view_px: dict[str, float] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        c = self.calibration
        return {
            "fx": c.fx,
            "fy": c.fy,
            "cx": c.cx,
            "cy": c.cy,
            "dist": list(c.dist),
            "intrinsics_rms_px": c.rms_px,
            "intrinsics_loo_px": c.loo_px,
            "chain_rms_px": self.chain_rms_px,
            "loo_px": self.chain_loo_px,
            "cad_rms_px": self.cad_rms_px,
            "views_used": len(c.views_used),
            "views_rejected": dict(c.views_rejected),
            "pose": [float(v) for v in self.pose],
        }


# A rigid transform as the 6 numbers the least-squares fits vary: rotation vector, translation.
def _pose_vec(m: np.ndarray) -> np.ndarray:
    return np.concatenate([Rotation.from_matrix(m[:3, :3]).as_rotvec(), m[:3, 3]])


def _vec_pose(v: np.ndarray) -> np.ndarray:
    m = np.eye(4)
    m[:3, :3] = Rotation.from_rotvec(v[:3]).as_matrix()
    m[:3, 3] = v[3:]
    return m


def _pnp(intr: Intrinsics, obj: np.ndarray, corners: np.ndarray) -> np.ndarray:
    """Camera-from-board transform (4x4) of one view for known intrinsics."""
    rvec, tvec = solve_pose(intr.model, intr.K(), intr.D(), obj, corners)
    return _vec_pose(np.concatenate([np.ravel(rvec), np.ravel(tvec)]))


def _errors(
    intr: Intrinsics, obj: np.ndarray, cam_from_board: np.ndarray, corners: np.ndarray
) -> np.ndarray:
    """Pixel errors (N, 2) of the board corners projected from ``cam_from_board`` (4x4)."""
    rvec = Rotation.from_matrix(cam_from_board[:3, :3]).as_rotvec()
    tvec = np.ascontiguousarray(cam_from_board[:3, 3])
    return project(intr.model, intr.K(), intr.D(), obj, rvec, tvec) - corners.reshape(-1, 2)


def _rms(errors: list[np.ndarray]) -> float:
    """RMS (px) over every corner of pixel errors (N, 2) each; NaN for none."""
    sq = np.concatenate([np.sum(e.reshape(-1, 2) ** 2, axis=1) for e in errors])
    return float(np.sqrt(sq.mean())) if sq.size else math.nan


@dataclass
class _WristData:
    views: list[str]
    placements: list[str]
    tcp: list[np.ndarray]  # base_from_tcp 4x4
    corners: list[np.ndarray]
    cam_board: list[np.ndarray]  # camera_from_board 4x4 by PnP

    def subset(self, idx: list[int]) -> _WristData:
        def pick(items: list[Any]) -> list[Any]:
            return [items[i] for i in idx]

        return _WristData(
            pick(self.views),
            pick(self.placements),
            pick(self.tcp),
            pick(self.corners),
            pick(self.cam_board),
        )

    def boards(self, x: np.ndarray) -> dict[str, np.ndarray]:
        """Board poses in the arm base per placement, through camera-on-TCP ``x`` and the
        first view of each placement."""
        boards: dict[str, np.ndarray] = {}
        for plc, tcp, cam_board in zip(self.placements, self.tcp, self.cam_board, strict=True):
            boards.setdefault(plc, tcp @ x @ cam_board)
        return boards

    def errors(
        self,
        intr: Intrinsics,
        obj: np.ndarray,
        i: int,
        x: np.ndarray,
        boards: dict[str, np.ndarray],
    ) -> np.ndarray:
        """Pixel errors (N, 2) of view ``i`` through the chain ``x`` and ``boards``."""
        cam_board = np.linalg.inv(self.tcp[i] @ x) @ boards[self.placements[i]]
        return _errors(intr, obj, cam_board, self.corners[i])


def _fit_chain(
    intr: Intrinsics, obj: np.ndarray, data: _WristData, x0: np.ndarray
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Jointly fit the camera-on-TCP pose and the board poses to the wrist views, from ``x0``."""
    boards0 = data.boards(x0)
    keys = sorted(boards0)

    def unpack(p: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        x = _vec_pose(p[:6])
        return x, {k: _vec_pose(p[6 + 6 * i : 12 + 6 * i]) for i, k in enumerate(keys)}

    def residual(p: np.ndarray) -> np.ndarray:
        x, boards = unpack(p)
        return np.concatenate(
            [data.errors(intr, obj, i, x, boards).ravel() for i in range(len(data.views))]
        )

    p0 = np.concatenate([_pose_vec(x0)] + [_pose_vec(boards0[k]) for k in keys])
    sol = least_squares(residual, p0, method="lm", x_scale="jac")
    return unpack(sol.x)


def _wrist_chain(
    intr: Intrinsics, obj: np.ndarray, data: _WristData, x_nominal: np.ndarray
) -> tuple[np.ndarray, dict[str, np.ndarray], dict[str, np.ndarray], float]:
    """Hand-eye by joint reprojection: X, board poses, per-view errors and the LOO RMS."""
    x, boards = _fit_chain(intr, obj, data, x_nominal)
    everything = range(len(data.views))
    errors = {view: data.errors(intr, obj, i, x, boards) for i, view in enumerate(data.views)}
    loo_errors = []
    for i in everything:
        rest = [j for j in everything if j != i]
        if data.placements[i] not in {data.placements[j] for j in rest}:
            continue
        xi, bi = _fit_chain(intr, obj, data.subset(rest), x)
        loo_errors.append(data.errors(intr, obj, i, xi, bi))
    return x, boards, errors, _rms(loo_errors)


def _load_wrist(
    folder: Path, board: Checkerboard, progress: bool
) -> tuple[Detections, dict[str, np.ndarray]]:
    pose_file = folder / "tcp_poses.json"
    if not pose_file.exists():
        raise CalibrationError(
            f"{pose_file}: missing; a wrist capture stores the TCP pose of every view"
        )
    try:
        poses = {
            k: np.asarray(v, dtype=float) for k, v in json.loads(pose_file.read_text()).items()
        }
    except (json.JSONDecodeError, ValueError) as err:
        raise CalibrationError(
            f"{pose_file}: not a JSON map of view -> 7 numbers ({err})"
        ) from None
    images = [(p.stem, read_gray(p)) for p in sorted(folder.glob("*.png"))]
    missing = sorted(set(poses) - {n for n, _ in images})
    if missing:
        raise CalibrationError(f"{folder}: TCP poses for views with no image: {missing[:5]}")
    det = detect(images, board, progress=progress)
    return det, poses


def _ground_wrist(
    folder: Path, board: Checkerboard, nominal: WorldSpec, side: str, progress: bool
) -> tuple[CameraGrounding, dict[str, np.ndarray]]:
    """A wrist camera's grounding, and the board poses (4x4) in its arm's base frame."""
    name = f"{side}_wrist"
    obj = board.object_points()
    det, poses = _load_wrist(folder / name, board, progress)
    calib = calibrate(det, board, "fisheye")
    intr = calib.intrinsics()
    views = [v for v in calib.views_used if v in poses]
    corners = [calib.corners[v] for v in views]
    data = _WristData(
        views,
        [v.split("_")[0] for v in views],
        [pose_to_matrix(poses[v]) for v in views],
        corners,
        [_pnp(intr, obj, c) for c in corners],
    )
    x_nominal = tcp_from_camera_nominal(nominal, side)
    x, boards, errors, loo = _wrist_chain(intr, obj, data, x_nominal)
    # The CAD camera with fitted intrinsics: board poses placed through it, X held at CAD.
    cad_boards = data.boards(x_nominal)
    cad_errors = {v: data.errors(intr, obj, i, x_nominal, cad_boards) for i, v in enumerate(views)}
    flange_from_cam = np.linalg.inv(_tcp_from_flange(TCP_OFFSET_M)) @ x
    grounding = CameraGrounding(
        name,
        calib,
        matrix_to_pose(flange_from_cam),
        _rms(list(errors.values())),
        loo,
        {v: _rms([e]) for v, e in errors.items()},
        _rms(list(cad_errors.values())),
        {v: _rms([e]) for v, e in cad_errors.items()},
    )
    return grounding, boards


def _ground_head(
    folder: Path,
    board: Checkerboard,
    nominal: WorldSpec,
    boards_in_cell: dict[str, list[np.ndarray]],
    progress: bool,
) -> CameraGrounding:
    """The head camera: intrinsics from its own views, pose from the boards the wrists found."""
    obj = board.object_points()
    head_images = [(p.stem, read_gray(p)) for p in sorted((folder / "head").glob("*.png"))]
    det = detect(head_images, board, progress=progress)
    # A data sheet without distortion means the camera delivers rectified images (a stereo
    # camera's left view); fitting no distortion then pins the principal point down.
    rectified = not nominal.cameras["head"].dist
    calib = calibrate(det, board, "pinhole", distortion=not rectified)
    shared = [v for v in calib.views_used if v in boards_in_cell]
    if not shared:
        raise CalibrationError(
            f"{folder / 'head'}: the head camera saw none of the boards the wrist cameras "
            "located; capture the wrist views at placements the head camera also sees"
        )
    cell_board = {v: _mean_pose(boards_in_cell[v]) for v in shared}
    head_cad = spec_pose_matrix(nominal.cameras["head"].pose)
    calib, cell_cam, per_view, rms = _head_chain(calib, obj, cell_board, calib.views_used)
    loo_errs = []
    for v in shared if len(shared) > 1 else []:
        rest = {u: m for u, m in cell_board.items() if u != v}
        views = [u for u in calib.views_used if u != v]
        part, cam_v, _, _ = _head_chain(calib, obj, rest, views)
        loo_errs.append(
            _errors(part.intrinsics(), obj, np.linalg.inv(cam_v) @ cell_board[v], calib.corners[v])
        )
    intr = calib.intrinsics()
    cad_errs = [
        _errors(intr, obj, np.linalg.inv(head_cad) @ cell_board[v], calib.corners[v])
        for v in shared
    ]
    return CameraGrounding(
        "head",
        calib,
        matrix_to_pose(cell_cam),
        rms,
        _rms(loo_errs) if loo_errs else calib.loo_px,
        per_view,
        _rms(cad_errs),
    )


def ground_cameras(
    capture: Path, nominal: WorldSpec, progress: bool = True
) -> dict[str, CameraGrounding]:
    """Intrinsics and poses of every camera from a ``capture_cameras`` folder."""
    folder = Path(capture)
    if (folder / "cameras").is_dir():
        folder = folder / "cameras"
    meta_file = folder / "meta.json"
    if not meta_file.exists():
        raise CalibrationError(f"{meta_file}: missing; run 'r2s2r ground capture' first")
    board = parse_board(json.loads(meta_file.read_text())["board"])
    out: dict[str, CameraGrounding] = {}
    boards_in_cell: dict[str, list[np.ndarray]] = {}
    for side in ARM_SIDES:
        out[f"{side}_wrist"], boards = _ground_wrist(folder, board, nominal, side, progress)
        for plc, m in boards.items():
            boards_in_cell.setdefault(plc, []).append(m)
    out["head"] = _ground_head(folder, board, nominal, boards_in_cell, progress)
    return out


def _head_chain(
    calib: CalibrationResult,
    obj: np.ndarray,
    cell_board: dict[str, np.ndarray],
    views: list[str] | tuple[str, ...],
) -> tuple[CalibrationResult, np.ndarray, dict[str, float], float]:
    """Joint fit of a fixed camera: its pose in the cell and its focal lengths and principal
    point, from the views whose board pose in the cell is known (``cell_board``, located by
    the wrist cameras) and, with free board poses, from all its other ``views``.

    The known boards fix the metric scale that separates focal length from distance.
    """
    views = [v for v in views if v in calib.corners]
    known = [v for v in views if v in cell_board]
    free = [v for v in views if v not in cell_board]
    base = calib.intrinsics()

    def intrinsics(p: np.ndarray) -> Intrinsics:
        return Intrinsics(base.model, base.width, base.height, p[6], p[7], p[8], p[9], base.dist)

    def residual(p: np.ndarray) -> np.ndarray:
        intr, cell_cam = intrinsics(p), _vec_pose(p[:6])
        cam_cell = np.linalg.inv(cell_cam)
        out = [_errors(intr, obj, cam_cell @ cell_board[v], calib.corners[v]) for v in known]
        for i, v in enumerate(free):
            board = _vec_pose(p[10 + 6 * i : 16 + 6 * i])
            out.append(_errors(intr, obj, board, calib.corners[v]))
        return np.concatenate([e.ravel() for e in out])

    inits = [cell_board[v] @ np.linalg.inv(pose_to_matrix(calib.board_pose(v))) for v in known]
    parts = [_pose_vec(_mean_pose(inits)), np.array([calib.fx, calib.fy, calib.cx, calib.cy])]
    parts += [_pose_vec(pose_to_matrix(calib.board_pose(v))) for v in free]
    p0 = np.concatenate(parts)
    sol = least_squares(residual, p0, method="lm", x_scale="jac")
    p = sol.x
    fitted = replace(calib, fx=float(p[6]), fy=float(p[7]), cx=float(p[8]), cy=float(p[9]))
    intr, cam_cell = intrinsics(p), np.linalg.inv(_vec_pose(p[:6]))
    errors = {v: _errors(intr, obj, cam_cell @ cell_board[v], calib.corners[v]) for v in known}
    per_view = {v: _rms([e]) for v, e in errors.items()}
    return fitted, _vec_pose(p[:6]), per_view, _rms(list(errors.values()))


def _mean_pose(mats: list[np.ndarray]) -> np.ndarray:
    m = np.eye(4)
    m[:3, 3] = np.mean([a[:3, 3] for a in mats], axis=0)
    m[:3, :3] = Rotation.from_matrix(np.array([a[:3, :3] for a in mats])).mean().as_matrix()
    return m


def grounded_cameras(world: WorldSpec, cams: dict[str, CameraGrounding]) -> WorldSpec:
    """``world`` with the grounded intrinsics and poses of ``cams``."""
    specs = dict(world.cameras)
    for name, g in cams.items():
        c = g.calibration
        old = specs[name]
        sx, sy = old.width / c.image_size[0], old.height / c.image_size[1]
        specs[name] = old.replace(
            fx=c.fx * sx,
            fy=c.fy * sy,
            cx=(c.cx + 0.5) * sx - 0.5,
            cy=(c.cy + 0.5) * sy - 0.5,
            dist=tuple(c.dist),
            pose=Pose.from_dict({"pos": list(g.pose[:3]), "quat": list(g.pose[3:])}),
        )
    return world.replace(cameras=specs)
