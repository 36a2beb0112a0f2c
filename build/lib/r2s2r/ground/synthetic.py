"""A synthetic camera that sees a checkerboard: ground truth for calibration tests and benches.

Images are rendered by inverse mapping: every pixel is split into ``n x n`` sub-pixel samples,
each sample is undistorted to a ray (pinhole with OpenCV distortion, or Kannala–Brandt
fisheye, as :class:`~r2s2r.sim.camera.Intrinsics` models them), the ray is intersected with
the board plane and the board's reflectance is read there; the samples' mean is the pixel
(box-filter antialiasing). Rays are undistorted once per camera at the pixel corners and their
unit directions interpolated bilinearly inside each pixel: on the fisheye lenses of the tests
a sample lands within 0.002 px of where the lens model puts it, also near 90 degrees off axis
(interpolating ``x/z, y/z`` instead errs by up to 0.05 px there).
"""

from __future__ import annotations

import math

import cv2
import numpy as np
from scipy.spatial.transform import Rotation

from r2s2r.geometry.board import Checkerboard
from r2s2r.geometry.poses import as_pose, pose_to_matrix
from r2s2r.sim.camera import Intrinsics

__all__ = ["BoardCamera", "spread_board_poses"]

# Undistortion iterations: plenty for a smooth lens, and ten times faster than OpenCV's default
# in camera.py's 200-iteration criteria on a million points.
_UNDISTORT_CRITERIA = (cv2.TERM_CRITERIA_COUNT | cv2.TERM_CRITERIA_EPS, 30, 1e-12)
# A pixel corner whose ray does not reproject within this tolerance (px) has no valid ray.
_ROUNDTRIP_TOL_PX = 1e-3


def _corner_rays(intr: Intrinsics) -> tuple[np.ndarray, np.ndarray]:
    """Unit rays (H+1, W+1, 3) through every pixel corner and their validity (H+1, W+1)."""
    us, vs = np.meshgrid(
        np.arange(intr.width + 1, dtype=np.float64) - 0.5,
        np.arange(intr.height + 1, dtype=np.float64) - 0.5,
    )
    px = np.stack([us.ravel(), vs.ravel()], axis=1).reshape(-1, 1, 2)
    if intr.model == "fisheye":
        und = cv2.fisheye.undistortPoints(px, intr.K(), intr.D(), criteria=_UNDISTORT_CRITERIA)
    else:
        eye = np.eye(3)
        und = cv2.undistortPointsIter(px, intr.K(), intr.D(), eye, eye, _UNDISTORT_CRITERIA)
    rays = und.reshape(-1, 2)
    finite = np.all(np.isfinite(rays), axis=1) & np.all(np.abs(rays) < 1e4, axis=1)
    rays = np.where(finite[:, None], rays, 0.0)
    back = intr.project(np.concatenate([rays, np.ones((len(rays), 1))], axis=1))
    valid = finite & (np.linalg.norm(back - px.reshape(-1, 2), axis=1) < _ROUNDTRIP_TOL_PX)
    shape = (intr.height + 1, intr.width + 1)
    dirs = np.concatenate([rays, np.ones((len(rays), 1))], axis=1)
    dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
    return dirs.reshape(*shape, 3), valid.reshape(shape)


class BoardCamera:
    """Renders a checkerboard at a given pose as seen by a camera with known intrinsics."""

    def __init__(
        self,
        intr: Intrinsics,
        board: Checkerboard,
        supersample: int = 8,
        margin_squares: float = 1.0,
        levels: tuple[int, int, int] = (25, 235, 110),
    ) -> None:
        """Precompute the rays; ``levels`` are the grey values of black, white and background."""
        if supersample < 1:
            raise ValueError(f"supersample must be at least 1, got {supersample}")
        self.intr = intr
        self.board = board
        self.supersample = supersample
        self.margin_m = margin_squares * board.square_m
        self.levels = levels
        rays, valid = _corner_rays(intr)
        self._rays = rays
        # A pixel is rendered only if all four of its corners have rays.
        self.valid: np.ndarray = valid[:-1, :-1] & valid[1:, :-1] & valid[:-1, 1:] & valid[1:, 1:]

    def _board_points(
        self, ray: np.ndarray, rot: np.ndarray, centre: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Board-frame (x, y) where rays (..., 3) meet the board plane; NaN behind the camera."""
        # The ray directions in the board frame: rot.T @ ray.
        dx = rot[0, 0] * ray[..., 0] + rot[1, 0] * ray[..., 1] + rot[2, 0] * ray[..., 2]
        dy = rot[0, 1] * ray[..., 0] + rot[1, 1] * ray[..., 1] + rot[2, 1] * ray[..., 2]
        dz = rot[0, 2] * ray[..., 0] + rot[1, 2] * ray[..., 1] + rot[2, 2] * ray[..., 2]
        with np.errstate(divide="ignore", invalid="ignore"):
            s = -centre[2] / dz
            s = np.where(s > 0, s, np.nan)
        return centre[0] + s * dx, centre[1] + s * dy

    def sample(self, pose_cam_board: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per pixel (H, W): the mean reflectance of the samples that hit the board (NaN if none)
        and the fraction of samples that hit it.

        Pixels whose four corners fall in the same cell of the board's layout (one square, one
        side of the margin, or one side off the card) take that cell's value; only the others,
        the pixels an edge crosses, are supersampled.
        """
        m = pose_to_matrix(as_pose(pose_cam_board, "board pose"))
        rot, trans = m[:3, :3], m[:3, 3]
        # The camera centre in the board frame; rays go to the board frame through rot.T.
        centre = -rot.T @ trans
        bx, by = self._board_points(self._rays, rot, centre)
        # Cells: rectangles of the board plane bounded by the card, margin and square edges.
        s, (w, h), mg = self.board.square_m, self.board.size_m, self.margin_m
        edges_x = np.concatenate([[-s - mg], np.arange(-1, self.board.cols + 1) * s, [w - s + mg]])
        edges_y = np.concatenate([[-s - mg], np.arange(-1, self.board.rows + 1) * s, [h - s + mg]])
        ix = np.searchsorted(edges_x, np.nan_to_num(bx, nan=np.inf), side="right")
        iy = np.searchsorted(edges_y, np.nan_to_num(by, nan=np.inf), side="right")
        ny = len(edges_y) + 1
        # Rays that miss the plane (it is behind the camera there) make a cell of their own.
        cell = np.where(np.isnan(bx), -1, ix * ny + iy)
        mids_x = np.concatenate([[-np.inf], (edges_x[:-1] + edges_x[1:]) / 2, [np.inf]])
        mids_y = np.concatenate([[-np.inf], (edges_y[:-1] + edges_y[1:]) / 2, [np.inf]])
        with np.errstate(invalid="ignore"):
            table = self.board.intensity(mids_x[:, None], mids_y[None, :], mg).ravel()
        c00 = cell[:-1, :-1]
        uniform = (c00 == cell[1:, :-1]) & (c00 == cell[:-1, 1:]) & (c00 == cell[1:, 1:])
        mean = np.where(uniform & (c00 >= 0), table[np.maximum(c00, 0)], np.nan)
        cover = np.where(uniform & ~np.isnan(mean), 1.0, 0.0)
        # Supersample the pixels that an edge crosses.
        rows, cols = np.nonzero(~uniform)
        r = self._rays
        r00, r01 = r[rows, cols], r[rows, cols + 1]
        r10, r11 = r[rows + 1, cols], r[rows + 1, cols + 1]
        n = self.supersample
        total = np.zeros(len(rows))
        hits = np.zeros(len(rows))
        for a in (np.arange(n) + 0.5) / n:
            for b in (np.arange(n) + 0.5) / n:
                # Bilinear blend of the pixel's four corner rays at sub-pixel offset (a, b).
                ray = (1 - a) * (1 - b) * r00 + a * (1 - b) * r01 + (1 - a) * b * r10 + a * b * r11
                x, y = self._board_points(ray, rot, centre)
                with np.errstate(invalid="ignore"):
                    value = self.board.intensity(x, y, mg)
                seen = ~np.isnan(value)
                total += np.where(seen, value, 0.0)
                hits += seen
        with np.errstate(invalid="ignore"):
            mean[rows, cols] = np.where(hits > 0, total / hits, np.nan)
        cover[rows, cols] = hits / (n * n)
        return mean, cover

    def render(
        self,
        pose_cam_board: np.ndarray,
        rgb: bool = False,
        noise_std: float = 0.0,
        blur_sigma_px: float = 0.0,
        rng: np.random.Generator | None = None,
    ) -> np.ndarray:
        """Render the board at ``pose_cam_board`` (camera-from-board, (7,) x y z qw qx qy qz).

        Returns (H, W) uint8 grey, or (H, W, 3) uint8 RGB with ``rgb``. Pixels without a valid
        ray are black; optional Gaussian blur and additive Gaussian noise (grey levels).
        """
        black, white, background = self.levels
        refl, cover = self.sample(pose_cam_board)
        board_grey = black + (white - black) * np.nan_to_num(refl)
        grey = cover * board_grey + (1.0 - cover) * background
        if blur_sigma_px > 0.0:
            grey = cv2.GaussianBlur(grey, (0, 0), blur_sigma_px)
        if noise_std > 0.0:
            gen = rng if rng is not None else np.random.default_rng()
            grey = grey + gen.normal(0.0, noise_std, grey.shape)
        grey = np.where(self.valid, grey, 0.0)
        img = np.clip(np.rint(grey), 0, 255).astype(np.uint8)
        return np.repeat(img[..., None], 3, axis=2) if rgb else img


def _outline(board: Checkerboard, margin_m: float, per_edge: int = 16) -> np.ndarray:
    """Points (4 * per_edge, 3) along the edge of the printed squares plus ``margin_m``."""
    s = board.square_m
    w, h = board.size_m
    x0, y0, x1, y1 = -s - margin_m, -s - margin_m, w - s + margin_m, h - s + margin_m
    t = np.linspace(0.0, 1.0, per_edge, endpoint=False)
    edges = [
        np.stack([x0 + t * (x1 - x0), np.full_like(t, y0)], 1),
        np.stack([np.full_like(t, x1), y0 + t * (y1 - y0)], 1),
        np.stack([x1 - t * (x1 - x0), np.full_like(t, y1)], 1),
        np.stack([np.full_like(t, x0), y1 - t * (y1 - y0)], 1),
    ]
    pts = np.concatenate(edges)
    return np.concatenate([pts, np.zeros((len(pts), 1))], axis=1)


def spread_board_poses(
    n: int,
    rng: np.random.Generator,
    intr: Intrinsics,
    board: Checkerboard,
    tilt_deg: tuple[float, float] = (20.0, 45.0),
    fill: tuple[float, float] = (0.3, 0.55),
    roll_deg: float = 20.0,
    margin_px: float = 8.0,
    margin_squares: float = 0.5,
    min_square_px: float = 10.0,
) -> list[np.ndarray]:
    """``n`` camera-from-board poses (7,) that suit calibration: tilted, spread, fully in view.

    The tilt axes turn evenly around the optical axis (one per view, jittered), tilts are drawn
    from ``tilt_deg``, in-plane roll from ``±roll_deg`` (small, so detectors keep the corner
    order), the board centre is aimed at a random image point and set at the distance where the
    board spans ``fill`` of the image width. A pose is redrawn until the board and
    ``margin_squares`` of white around it project at least ``margin_px`` inside the image and
    no square edge images shorter than ``min_square_px`` (corner detectors need that much).
    """
    if n < 1:
        raise ValueError(f"n must be positive, got {n}")
    outline = _outline(board, margin_squares * board.square_m)
    corners = board.object_points().reshape(-1, 3)
    width_m = board.size_m[0]
    lo = np.array([margin_px, margin_px])
    hi = np.array([intr.width - 1 - margin_px, intr.height - 1 - margin_px])
    poses: list[np.ndarray] = []
    for k in range(n):
        azimuth = 2 * math.pi * (k + rng.uniform(-0.4, 0.4)) / n
        for attempt in range(500):
            # Shrink the board and the aim region if a view keeps falling off the image.
            shrink = 1.0 if attempt < 100 else 0.5 + 0.5 * (500 - attempt) / 400
            tilt = math.radians(rng.uniform(*tilt_deg))
            axis = np.array([math.cos(azimuth), math.sin(azimuth), 0.0])
            roll = math.radians(rng.uniform(-roll_deg, roll_deg))
            rot = Rotation.from_rotvec(axis * tilt) * Rotation.from_rotvec([0.0, 0.0, roll])
            aim = np.array([intr.width, intr.height]) * (0.5 + shrink * rng.uniform(-0.3, 0.3, 2))
            ray = intr.undistort_pixels(aim[None])[0]
            distance = intr.fx * width_m / (intr.width * shrink * rng.uniform(*fill))
            centre = np.array([ray[0], ray[1], 1.0]) / math.hypot(*ray, 1.0) * distance
            trans = centre - rot.apply(board.center_m)
            px = intr.project(rot.apply(outline) + trans)
            if not (np.all(np.isfinite(px)) and np.all((px >= lo) & (px <= hi))):
                continue
            grid = intr.project(rot.apply(corners) + trans).reshape(board.rows, board.cols, 2)
            shortest = min(
                np.linalg.norm(np.diff(grid, axis=0), axis=2).min(),
                np.linalg.norm(np.diff(grid, axis=1), axis=2).min(),
            )
            if shortest >= min_square_px:
                poses.append(np.concatenate([trans, rot.as_quat(scalar_first=True)]))
                break
        else:
            raise ValueError(
                f"could not place view {k} of the board in the {intr.width}x{intr.height} image; "
                f"change fill, tilt_deg or min_square_px"
            )
    return poses
