"""Camera intrinsics fitted to checkerboard corners (found by :mod:`r2s2r.ground.detect`): the
fit, outlier rejection, leave-one-out error, and board poses and reprojection errors for given
cameras.

Uses the OpenCV 4.x API (the project pins ``opencv-python-headless<5``): ``cv2.calibrateCamera``
for the pinhole model and ``cv2.fisheye.calibrate`` for Kannala–Brandt; OpenCV 5 changed the
fisheye call pattern, so moving to it needs this module adapted and its tests rerun.

Models:

- ``pinhole``: OpenCV's radial-tangential model with k1, k2, p1, p2 (k3 is held at zero unless
  asked for: it is poorly determined by a dozen views and tends to go wild outside the area
  the board covered).
- ``fisheye``: Kannala–Brandt with k1..k4, skew fixed at zero.

Every fit is checked: views whose reprojection error stands far above the rest are dropped and
the camera refitted, a view set whose boards are all (nearly) parallel is refused, and the
leave-one-out error (fit on the other views, locate the held-out board with the fitted camera,
measure its reprojection RMS) says how well the camera predicts a view it has not seen.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import cv2
import numpy as np
from scipy.optimize import least_squares
from scipy.spatial.transform import Rotation

from r2s2r.geometry.board import Checkerboard
from r2s2r.geometry.poses import as_pose
from r2s2r.ground.detect import (
    CAPTURE_HINT,
    MIN_VIEWS,
    CalibrationError,
    Detections,
    detect_folder,
)
from r2s2r.sim.camera import Intrinsics

__all__ = [
    "CalibrationResult",
    "Reprojection",
    "calibrate",
    "calibrate_folder",
    "fit_board_poses",
    "pose_from_rvec",
    "project",
    "reprojection_errors",
    "rvec_from_pose",
    "solve_pose",
]

Model = Literal["pinhole", "fisheye"]

# Boards whose normals all lie within this angle of each other leave the focal length unknown.
MIN_NORMAL_SPREAD_DEG = 15.0
# A view is an outlier when its RMS exceeds both this many medians and the floor below.
OUTLIER_FACTOR = 3.0
OUTLIER_FLOOR_PX = 0.5
_TERM = (cv2.TERM_CRITERIA_COUNT | cv2.TERM_CRITERIA_EPS, 100, 1e-10)


@dataclass(frozen=True)
class Reprojection:
    """Reprojection error of board corners, per view and over all corners (RMS, pixels)."""

    rms_px: float
    per_view_px: dict[str, float]


@dataclass(frozen=True)
class CalibrationResult:
    """A fitted camera with its errors, the views it used and the board poses it found."""

    model: Model
    image_size: tuple[int, int]
    fx: float
    fy: float
    cx: float
    cy: float
    dist: tuple[float, ...]
    # RMS over all corners of the used views (pixels).
    rms_px: float
    # Leave-one-out RMS over all corners of the used views (pixels).
    loo_px: float
    view_rms_px: dict[str, float]
    view_loo_px: dict[str, float]
    views_used: tuple[str, ...]
    # View name -> reason: no board found, or an outlier.
    views_rejected: dict[str, str]
    # Camera-from-board pose of every used view as OpenCV rotation and translation vectors (3,).
    rvecs: dict[str, np.ndarray]
    tvecs: dict[str, np.ndarray]
    corners: dict[str, np.ndarray]

    def intrinsics(self) -> Intrinsics:
        """The fitted camera as :class:`~r2s2r.sim.camera.Intrinsics`."""
        w, h = self.image_size
        return Intrinsics(self.model, w, h, self.fx, self.fy, self.cx, self.cy, self.dist)

    def board_pose(self, view: str) -> np.ndarray:
        """Camera-from-board pose of a used view, (7,) ``[x y z qw qx qy qz]``."""
        return pose_from_rvec(self.rvecs[view], self.tvecs[view])

    def to_json(self) -> dict[str, Any]:
        """The summary as JSON-ready data."""
        return {
            "model": self.model,
            "image_size": list(self.image_size),
            "fx": self.fx,
            "fy": self.fy,
            "cx": self.cx,
            "cy": self.cy,
            "dist": list(self.dist),
            "rms_px": self.rms_px,
            "loo_px": self.loo_px,
            "views_used": list(self.views_used),
            "views_rejected": dict(self.views_rejected),
            "view_rms_px": dict(self.view_rms_px),
            "view_loo_px": dict(self.view_loo_px),
        }


def pose_from_rvec(rvec: np.ndarray, tvec: np.ndarray) -> np.ndarray:
    """OpenCV ``rvec, tvec`` as a (7,) pose ``[x y z qw qx qy qz]``."""
    quat = Rotation.from_rotvec(np.ravel(rvec)).as_quat(scalar_first=True)
    return as_pose(np.concatenate([np.ravel(tvec), quat]))


def rvec_from_pose(pose: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A (7,) pose as OpenCV ``rvec, tvec`` (both (3,))."""
    pose = as_pose(pose)
    return Rotation.from_quat(pose[3:], scalar_first=True).as_rotvec(), pose[:3].copy()


# --- Fitting ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Fit:
    K: np.ndarray
    D: np.ndarray
    rvecs: list[np.ndarray]
    tvecs: list[np.ndarray]


def project(
    model: Model, K: np.ndarray, D: np.ndarray, obj: np.ndarray, rvec: np.ndarray, tvec: np.ndarray
) -> np.ndarray:
    """Board points (N, 1, 3) to pixels (N, 2)."""
    r, t = np.reshape(rvec, (3, 1)), np.reshape(tvec, (3, 1))
    if model == "fisheye":
        px, _ = cv2.fisheye.projectPoints(obj, r, t, K, D)
    else:
        px, _ = cv2.projectPoints(obj, r, t, K, D)
    return px.reshape(-1, 2)


def _rms(a: np.ndarray, b: np.ndarray) -> float:
    return float(
        np.sqrt(np.mean(np.sum((np.reshape(a, (-1, 2)) - np.reshape(b, (-1, 2))) ** 2, 1)))
    )


def _fit_fisheye(
    obj: np.ndarray, img: list[np.ndarray], size: tuple[int, int], warm: _Fit | None
) -> _Fit:
    """Kannala–Brandt fit, robust to OpenCV's fragile start.

    ``cv2.fisheye.calibrate`` starts from one focal-length guess and can stop with an error
    (``fabs(norm_u1) > 0``) or settle in a poor minimum. A working ``warm`` start is kept;
    otherwise OpenCV's own start and a ladder of focal guesses are all tried and the fit with
    the lowest RMS wins.
    """
    flags = cv2.fisheye.CALIB_RECOMPUTE_EXTRINSIC | cv2.fisheye.CALIB_FIX_SKEW
    w, h = size
    base = max(w, h) / math.pi
    cold: list[tuple[np.ndarray, np.ndarray] | None] = [None]
    for scale in (1.0, 0.7, 1.4, 2.0, 3.0):
        f = base * scale
        cold.append(
            (np.array([[f, 0, (w - 1) / 2], [0, f, (h - 1) / 2], [0, 0, 1.0]]), np.zeros(4))
        )
    starts = ([(warm.K, warm.D)] if warm is not None else []) + cold
    best: tuple[float, _Fit] | None = None
    last = ""
    for i, start in enumerate(starts):
        guess = cv2.fisheye.CALIB_USE_INTRINSIC_GUESS if start is not None else 0
        k0, d0 = start if start is not None else (np.eye(3), np.zeros(4))
        try:
            rms, K, D, rvecs, tvecs = cv2.fisheye.calibrate(
                [obj] * len(img),
                img,
                size,
                k0.copy(),
                d0.copy(),
                flags=flags | guess,
                criteria=_TERM,
            )
        except cv2.error as err:
            last = err.err
            continue
        fit = _Fit(K, D.ravel(), [np.ravel(r) for r in rvecs], [np.ravel(t) for t in tvecs])
        if np.all(np.isfinite(K)) and (best is None or rms < best[0]):
            best = (float(rms), fit)
        if warm is not None and i == 0 and best is not None:
            break
    if best is None:
        raise CalibrationError(
            f"OpenCV could not fit a fisheye camera to these views ({last}); {CAPTURE_HINT}"
        )
    return best[1]


def _fit(
    model: Model,
    obj: np.ndarray,
    img: list[np.ndarray],
    size: tuple[int, int],
    k3: bool,
    warm: _Fit | None = None,
    distortion: bool = True,
) -> _Fit:
    """Fit the camera to the views' corners (raises CalibrationError if OpenCV fails).

    ``warm`` is a fit to similar views to start from (used by the fisheye model only);
    ``distortion=False`` holds a pinhole camera's distortion at zero (a rectified image).
    """
    if model == "fisheye":
        fit = _fit_fisheye(obj, img, size, warm)
    else:
        flags = 0 if k3 else cv2.CALIB_FIX_K3
        if not distortion:
            flags |= (
                cv2.CALIB_FIX_K1 | cv2.CALIB_FIX_K2 | cv2.CALIB_FIX_K3 | cv2.CALIB_ZERO_TANGENT_DIST
            )
        try:
            _, K, D, rvecs, tvecs = cv2.calibrateCamera(
                [obj.astype(np.float32)] * len(img),
                [p.astype(np.float32) for p in img],
                size,
                None,
                None,
                flags=flags,
                criteria=_TERM,
            )
        except cv2.error as err:
            raise CalibrationError(
                f"OpenCV could not fit a pinhole camera to these views ({err.err}); {CAPTURE_HINT}"
            ) from None
        D = D.ravel()[: 5 if k3 else 4]
        fit = _Fit(K, D, [np.ravel(r) for r in rvecs], [np.ravel(t) for t in tvecs])
    K, D = fit.K, fit.D
    if not np.all(np.isfinite(K)) or not np.all(np.isfinite(D)) or K[0, 0] <= 0 or K[1, 1] <= 0:
        raise CalibrationError(f"the {model} fit diverged; {CAPTURE_HINT}")
    return fit


def solve_pose(
    model: Model, K: np.ndarray, D: np.ndarray, obj: np.ndarray, corners: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Camera-from-board ``rvec, tvec`` that minimise the pixel reprojection error."""
    if model == "fisheye":
        rays = cv2.fisheye.undistortPoints(corners, K, D)
    else:
        rays = cv2.undistortPointsIter(corners, K, D, np.eye(3), np.eye(3), _TERM)
    ok, rvec, tvec = cv2.solvePnP(obj, rays, np.eye(3), None, flags=cv2.SOLVEPNP_IPPE)
    if not ok:
        raise CalibrationError("could not locate the board in a view")
    x0 = np.concatenate([rvec.ravel(), tvec.ravel()])
    target = corners.reshape(-1)

    def residual(x: np.ndarray) -> np.ndarray:
        return project(model, K, D, obj, x[:3], x[3:]).reshape(-1) - target

    sol = least_squares(residual, x0, method="lm", xtol=1e-12, ftol=1e-12)
    return sol.x[:3], sol.x[3:]


def _normal_spread_deg(rvecs: Iterable[np.ndarray]) -> float:
    """Largest angle between two board normals (degrees)."""
    normals = np.array([Rotation.from_rotvec(r).as_matrix()[:, 2] for r in rvecs])
    cos = np.clip(normals @ normals.T, -1.0, 1.0)
    return float(np.degrees(np.arccos(cos.min())))


def calibrate(
    detections: Detections,
    board: Checkerboard,
    model: str,
    k3: bool = False,
    leave_one_out: bool = True,
    distortion: bool = True,
) -> CalibrationResult:
    """Fit ``model`` (``pinhole`` or ``fisheye``) to the detections; see the module docstring.

    ``distortion=False`` fits a pinhole camera without lens distortion, for images a camera
    already rectifies (a stereo camera's output): fewer unknowns pin the principal point down.

    Views with no board and outlier views (RMS above ``OUTLIER_FACTOR`` medians and
    ``OUTLIER_FLOOR_PX``, dropped one at a time, worst first) are reported in
    ``views_rejected``. ``leave_one_out=False`` skips the LOO error (reported as NaN).
    """
    if model not in ("pinhole", "fisheye"):
        raise ValueError(f"model must be 'pinhole' or 'fisheye', got {model!r}")
    cam: Model = "fisheye" if model == "fisheye" else "pinhole"
    rejected = dict(detections.missing)
    used = sorted(detections.corners)
    if len(used) < MIN_VIEWS:
        raise CalibrationError(
            f"the board was found in {len(used)} of {len(used) + len(rejected)} images but "
            f"calibration needs at least {MIN_VIEWS}; {CAPTURE_HINT}"
        )
    obj = board.object_points()
    size = detections.image_size
    fit: _Fit | None = None
    while True:
        fit = _fit(
            cam,
            obj,
            [detections.corners[v] for v in used],
            size,
            k3,
            warm=fit,
            distortion=distortion,
        )
        errors = {
            v: _rms(project(cam, fit.K, fit.D, obj, r, t), detections.corners[v])
            for v, r, t in zip(used, fit.rvecs, fit.tvecs, strict=True)
        }
        median = float(np.median(list(errors.values())))
        worst = max(errors, key=errors.__getitem__)
        limit = max(OUTLIER_FACTOR * median, OUTLIER_FLOOR_PX)
        if errors[worst] <= limit or len(used) <= MIN_VIEWS:
            break
        rejected[worst] = (
            f"outlier: reprojection RMS {errors[worst]:.2f} px > {OUTLIER_FACTOR:g} x median "
            f"{median:.2f} px"
        )
        used.remove(worst)
    spread = _normal_spread_deg(fit.rvecs)
    if spread < MIN_NORMAL_SPREAD_DEG:
        raise CalibrationError(
            f"the board normals of the {len(used)} views lie within {spread:.1f} degrees of each "
            f"other (at least {MIN_NORMAL_SPREAD_DEG:g} needed): parallel boards leave the focal "
            f"length undetermined; {CAPTURE_HINT}"
        )
    loo = {v: math.nan for v in used}
    if leave_one_out:
        for i, view in enumerate(used):
            rest = [detections.corners[v] for j, v in enumerate(used) if j != i]
            part = _fit(cam, obj, rest, size, k3, warm=fit, distortion=distortion)
            held = detections.corners[view]
            rvec, tvec = solve_pose(cam, part.K, part.D, obj, held)
            loo[view] = _rms(project(cam, part.K, part.D, obj, rvec, tvec), held)
    K, D = fit.K, fit.D
    return CalibrationResult(
        model=cam,
        image_size=size,
        fx=float(K[0, 0]),
        fy=float(K[1, 1]),
        cx=float(K[0, 2]),
        cy=float(K[1, 2]),
        dist=tuple(float(d) for d in D),
        rms_px=float(np.sqrt(np.mean(np.square(list(errors.values()))))),
        loo_px=float(np.sqrt(np.mean(np.square(list(loo.values()))))),
        view_rms_px=errors,
        view_loo_px=loo,
        views_used=tuple(used),
        views_rejected=rejected,
        rvecs=dict(zip(used, fit.rvecs, strict=True)),
        tvecs=dict(zip(used, fit.tvecs, strict=True)),
        corners={v: detections.corners[v] for v in used},
    )


def calibrate_folder(
    folder: Path, board: Checkerboard, model: str, progress: bool = False, k3: bool = False
) -> CalibrationResult:
    """Detect the board in a folder of images and fit ``model`` to them."""
    if model not in ("pinhole", "fisheye"):
        raise ValueError(f"model must be 'pinhole' or 'fisheye', got {model!r}")
    return calibrate(detect_folder(folder, board, progress), board, model, k3=k3)


# --- Given cameras ------------------------------------------------------------------------------


def fit_board_poses(
    intr: Intrinsics, board: Checkerboard, corners: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """Camera-from-board poses (7,) per view for a camera with the given intrinsics."""
    obj = board.object_points()
    out = {}
    for view, pts in corners.items():
        rvec, tvec = solve_pose(intr.model, intr.K(), intr.D(), obj, np.asarray(pts))
        out[view] = pose_from_rvec(rvec, tvec)
    return out


def reprojection_errors(
    intr: Intrinsics,
    board: Checkerboard,
    corners: Mapping[str, np.ndarray],
    poses: Mapping[str, np.ndarray],
) -> Reprojection:
    """Reprojection error of detected corners for given intrinsics and camera-from-board poses.

    For example, a camera placed by CAD and the robot's kinematics, against the detections.
    """
    missing = sorted(set(corners) - set(poses))
    if missing:
        raise ValueError(f"no board pose for views {missing}")
    obj = board.object_points()
    per_view = {}
    squares = []
    for view, pts in corners.items():
        rvec, tvec = rvec_from_pose(poses[view])
        err = project(intr.model, intr.K(), intr.D(), obj, rvec, tvec) - np.reshape(pts, (-1, 2))
        sq = np.sum(err**2, axis=1)
        per_view[view] = float(np.sqrt(sq.mean()))
        squares.append(sq)
    rms = float(np.sqrt(np.concatenate(squares).mean())) if squares else math.nan
    return Reprojection(rms, per_view)
