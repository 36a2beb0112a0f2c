"""Camera models and fisheye emulation for MuJoCo renders.

MuJoCo renders only ideal pinhole images. A fisheye (Kannala-Brandt, OpenCV ``cv2.fisheye``
conventions) or distorted pinhole view is emulated by rendering a wide ideal pinhole image from
the same camera centre and orientation and remapping it with precomputed ``cv2.remap`` maps.

Pixel convention (OpenCV): integer pixel coordinates are pixel centres, so an image of width
``w`` spans the continuous interval ``[-0.5, w - 0.5]``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import cv2
import numpy as np

if TYPE_CHECKING:
    from r2s2r.spec.world import IntrinsicsSpec

__all__ = [
    "MJ_FROM_CV",
    "FisheyeRemap",
    "Intrinsics",
    "WideRender",
    "cv_pose_from_mj",
    "mj_pose_from_cv",
    "pixels_per_radian",
    "plan_wide_render",
    "points_world_to_cv",
]

# Rotation taking OpenCV camera-frame vectors (x right, y down, z forward) to MuJoCo camera-frame
# vectors (x right, y up, looking along -z). It is its own inverse.
MJ_FROM_CV: np.ndarray = np.diag([1.0, -1.0, -1.0])
MJ_FROM_CV.setflags(write=False)

# Iteration criteria for OpenCV's iterative undistortion; wide angles need many iterations.
_UNDISTORT_CRITERIA = (cv2.TERM_CRITERIA_COUNT | cv2.TERM_CRITERIA_EPS, 200, 1e-14)
# A pixel whose undistorted ray does not reproject within this tolerance (px) is treated as invalid.
_ROUNDTRIP_TOL_PX = 1e-3
# Extra wide-render pixels kept around the outermost sampled position for bilinear interpolation.
_WIDE_MARGIN_PX = 2.0
# Map coordinate used for invalid output pixels; far enough outside to sample only the border.
_INVALID_COORD = -16.0


def cv_pose_from_mj(pos: np.ndarray, rot_mj: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Convert a MuJoCo camera pose (world position, 3x3 ``cam_xmat``) to an OpenCV camera pose."""
    rot = np.asarray(rot_mj, dtype=np.float64).reshape(3, 3)
    return np.asarray(pos, dtype=np.float64).reshape(3).copy(), rot @ MJ_FROM_CV


def mj_pose_from_cv(pos: np.ndarray, rot_cv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Convert an OpenCV camera pose (world position, camera-to-world rotation) to MuJoCo's."""
    rot = np.asarray(rot_cv, dtype=np.float64).reshape(3, 3)
    return np.asarray(pos, dtype=np.float64).reshape(3).copy(), rot @ MJ_FROM_CV


def points_world_to_cv(
    points: np.ndarray, cam_pos: np.ndarray, cam_rot_mj: np.ndarray
) -> np.ndarray:
    """Express world points (N,3) in the OpenCV frame of a MuJoCo camera (``cam_xpos/xmat``)."""
    pos, rot_cv = cv_pose_from_mj(cam_pos, cam_rot_mj)
    pts = np.asarray(points, dtype=np.float64).reshape(-1, 3)
    # Row-vector form of rot_cv.T @ (p - pos).
    return (pts - pos) @ rot_cv


@dataclass(frozen=True)
class Intrinsics:
    """Camera intrinsics in OpenCV conventions (pinhole or Kannala-Brandt fisheye)."""

    model: Literal["pinhole", "fisheye"]
    width: int
    height: int
    fx: float
    fy: float
    cx: float
    cy: float
    dist: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        """Validate and normalise the fields."""
        if self.model not in ("pinhole", "fisheye"):
            raise ValueError(f"model must be 'pinhole' or 'fisheye', got {self.model!r}")
        for name in ("width", "height"):
            value = getattr(self, name)
            if isinstance(value, bool) or int(value) != value or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
            object.__setattr__(self, name, int(value))
        for name in ("fx", "fy", "cx", "cy"):
            value = float(getattr(self, name))
            if not math.isfinite(value):
                raise ValueError(f"{name} must be finite, got {value!r}")
            if name in ("fx", "fy") and value <= 0.0:
                raise ValueError(f"{name} must be positive, got {value!r}")
            object.__setattr__(self, name, value)
        dist = tuple(float(d) for d in self.dist)
        allowed = (4,) if self.model == "fisheye" else (0, 4, 5)
        if len(dist) not in allowed:
            raise ValueError(
                f"dist for a {self.model} model must have {' or '.join(map(str, allowed))} "
                f"coefficients, got {len(dist)}"
            )
        if not all(math.isfinite(d) for d in dist):
            raise ValueError(f"dist coefficients must be finite, got {dist!r}")
        object.__setattr__(self, "dist", dist)

    @property
    def is_ideal_pinhole(self) -> bool:
        """Whether this is a pinhole model without distortion."""
        return self.model == "pinhole" and not any(self.dist)

    @classmethod
    def from_spec(cls, spec: IntrinsicsSpec) -> Intrinsics:
        """The intrinsics of a camera's spec (a WorldSpec camera or a driver's config)."""
        return cls(
            spec.model,
            spec.width,
            spec.height,
            spec.fx,
            spec.fy,
            spec.cx,
            spec.cy,
            tuple(spec.dist),
        )

    def K(self) -> np.ndarray:  # noqa: N802 - conventional name for the camera matrix.
        """Return the 3x3 camera matrix."""
        return np.array(
            [[self.fx, 0.0, self.cx], [0.0, self.fy, self.cy], [0.0, 0.0, 1.0]], dtype=np.float64
        )

    def D(self) -> np.ndarray:  # noqa: N802 - conventional name for the distortion vector.
        """Return the distortion coefficients as a float64 array (shape (4,), (5,) or (0,))."""
        return np.asarray(self.dist, dtype=np.float64)

    def scaled(self, width: int, height: int) -> Intrinsics:
        """Return the intrinsics of the same camera resampled to ``width`` x ``height``.

        Uses the pixel-centre convention: continuous coordinates ``u + 0.5`` scale linearly, so
        ``cx' = (cx + 0.5) * sx - 0.5`` and ``fx' = fx * sx`` with ``sx = width / self.width``
        (and likewise in y). Distortion coefficients act on normalized coordinates and are kept.
        """
        sx = width / self.width
        sy = height / self.height
        return Intrinsics(
            model=self.model,
            width=width,
            height=height,
            fx=self.fx * sx,
            fy=self.fy * sy,
            cx=(self.cx + 0.5) * sx - 0.5,
            cy=(self.cy + 0.5) * sy - 0.5,
            dist=self.dist,
        )

    def project(self, points_cam: np.ndarray) -> np.ndarray:
        """Project OpenCV camera-frame points (N,3) to pixels (N,2); NaN where ``z <= 0``."""
        pts = np.asarray(points_cam, dtype=np.float64).reshape(-1, 3)
        out = np.full((pts.shape[0], 2), np.nan, dtype=np.float64)
        front = pts[:, 2] > 0.0
        if not np.any(front):
            return out
        obj = np.ascontiguousarray(pts[front]).reshape(-1, 1, 3)
        zero = np.zeros(3, dtype=np.float64)
        if self.model == "fisheye":
            img, _ = cv2.fisheye.projectPoints(obj, zero, zero, self.K(), self.D())
        else:
            img, _ = cv2.projectPoints(obj, zero, zero, self.K(), self.D())
        out[front] = img.reshape(-1, 2)
        return out

    def undistort_pixels(self, pixels: np.ndarray) -> np.ndarray:
        """Map pixels (N,2) to normalized rays ``(x/z, y/z)`` (N,2) by iterative inversion.

        The result is not guaranteed to be valid where the distortion is not invertible; check it
        with :meth:`project` (``FisheyeRemap`` does so).
        """
        px = np.ascontiguousarray(pixels, dtype=np.float64).reshape(-1, 1, 2)
        if self.is_ideal_pinhole:
            flat = px.reshape(-1, 2)
            return np.stack(
                [(flat[:, 0] - self.cx) / self.fx, (flat[:, 1] - self.cy) / self.fy], axis=1
            )
        if self.model == "fisheye":
            und = cv2.fisheye.undistortPoints(px, self.K(), self.D(), criteria=_UNDISTORT_CRITERIA)
        else:
            eye = np.eye(3)
            und = cv2.undistortPointsIter(px, self.K(), self.D(), eye, eye, _UNDISTORT_CRITERIA)
        return und.reshape(-1, 2).astype(np.float64)


@dataclass(frozen=True)
class WideRender:
    """An ideal pinhole MuJoCo render: square pixels, principal point at the image centre.

    ``fovy_deg`` is MuJoCo's full vertical field of view (``model.cam_fovy``), measured between
    the outer edges of the top and bottom pixel rows. The model's ``visual/global`` ``offwidth``
    and ``offheight`` must be at least ``width`` and ``height`` for offscreen rendering.
    """

    width: int
    height: int
    fovy_deg: float
    max_fov_deg: float = 180.0

    @property
    def focal(self) -> float:
        """Focal length in pixels, as MuJoCo derives it from ``fovy_deg`` and ``height``."""
        return 0.5 * self.height / math.tan(math.radians(self.fovy_deg) / 2.0)

    @property
    def fovx_deg(self) -> float:
        """Full horizontal field of view in degrees."""
        return 2.0 * math.degrees(math.atan(0.5 * self.width / self.focal))

    def intrinsics(self) -> Intrinsics:
        """Return the equivalent ideal pinhole :class:`Intrinsics`."""
        f = self.focal
        return Intrinsics(
            "pinhole", self.width, self.height, f, f, (self.width - 1) / 2, (self.height - 1) / 2
        )


def _output_rays(intr: Intrinsics, max_fov_deg: float) -> tuple[np.ndarray, np.ndarray]:
    """Return normalized rays (h,w,2) of every output pixel centre and their validity mask (h,w).

    A ray is valid when the undistortion converged (it reprojects onto its pixel) and its angle
    from the optical axis is below ``max_fov_deg / 2``.
    """
    us, vs = np.meshgrid(
        np.arange(intr.width, dtype=np.float64), np.arange(intr.height, dtype=np.float64)
    )
    pixels = np.stack([us.ravel(), vs.ravel()], axis=1)
    rays = intr.undistort_pixels(pixels)
    finite = np.all(np.isfinite(rays), axis=1) & np.all(np.abs(rays) < 1e5, axis=1)
    rays = np.where(finite[:, None], rays, 0.0)
    reproj = intr.project(np.concatenate([rays, np.ones((rays.shape[0], 1))], axis=1))
    err = np.linalg.norm(reproj - pixels, axis=1)
    theta = np.arctan(np.linalg.norm(rays, axis=1))
    valid = finite & (err < _ROUNDTRIP_TOL_PX) & (theta < math.radians(max_fov_deg) / 2.0)
    shape = (intr.height, intr.width)
    return rays.reshape(*shape, 2), valid.reshape(shape)


def pixels_per_radian(intr: Intrinsics, max_fov_deg: float = 180.0) -> float:
    """The most pixels that a turn of one radian in the direction of what a pixel shows moves
    its image point, anywhere in ``intr``'s image (within ``max_fov_deg / 2`` of the axis):
    how far, at most, an image point moves per radian that its ray turns.

    It is the largest inverse singular value of the map from pixel to unit ray direction (an
    ideal pinhole's is f / cos^2 of the widest angle, in its corners; a fisheye's is close to
    its focal length everywhere)."""
    rays, valid = _output_rays(intr, max_fov_deg)
    unit = np.concatenate([rays, np.ones(rays.shape[:2] + (1,))], axis=-1)
    unit /= np.linalg.norm(unit, axis=-1, keepdims=True)
    # The ray's change per pixel step along u and v, where a pixel and its neighbours are valid.
    du = unit[1:-1, 2:] - unit[1:-1, :-2]
    dv = unit[2:, 1:-1] - unit[:-2, 1:-1]
    ok = valid[1:-1, 1:-1] & valid[1:-1, 2:] & valid[1:-1, :-2] & valid[2:, 1:-1] & valid[:-2, 1:-1]
    if not np.any(ok):
        raise ValueError(f"no valid pixel neighbourhood in a {intr.width}x{intr.height} image")
    # J^T J of the 3x2 Jacobian (central differences over two pixels); its smaller eigenvalue is
    # the squared smallest singular value (radians per pixel).
    a = np.einsum("...i,...i", du, du)[ok] / 4.0
    b = np.einsum("...i,...i", du, dv)[ok] / 4.0
    c = np.einsum("...i,...i", dv, dv)[ok] / 4.0
    smallest = (a + c) / 2.0 - np.sqrt(((a - c) / 2.0) ** 2 + b**2)
    return float(1.0 / np.sqrt(max(float(smallest.min()), 1e-30)))


def plan_wide_render(
    intr: Intrinsics,
    max_fov_deg: float = 150.0,
    oversample: float = 1.0,
    max_size: int = 1024,
    square: bool = False,
) -> WideRender:
    """Choose the wide pinhole render needed to emulate ``intr`` by remapping.

    The render covers every output pixel whose ray is less than ``max_fov_deg / 2`` off axis
    (plus a small interpolation margin), with a centre pixel density of at least
    ``oversample * max(fx, fy)``. If that needs more than ``max_size`` pixels on a side the
    density is reduced to fit. Other output pixels render black.
    """
    if not 0.0 < max_fov_deg < 180.0:
        raise ValueError(f"max_fov_deg must be in (0, 180), got {max_fov_deg!r}")
    if not oversample > 0.0:
        raise ValueError(f"oversample must be positive, got {oversample!r}")
    if max_size < 8:
        raise ValueError(f"max_size must be at least 8, got {max_size!r}")
    rays, valid = _output_rays(intr, max_fov_deg)
    if not np.any(valid):
        raise ValueError("no output pixel has a valid ray within max_fov_deg")
    ext_x = float(np.max(np.abs(rays[..., 0][valid])))
    ext_y = float(np.max(np.abs(rays[..., 1][valid])))
    if square:
        ext_x = ext_y = max(ext_x, ext_y)
    half_cap = max_size // 2
    focal = oversample * max(intr.fx, intr.fy)
    if max(ext_x, ext_y) * focal + _WIDE_MARGIN_PX > half_cap:
        focal = (half_cap - _WIDE_MARGIN_PX) / max(ext_x, ext_y)
    # Symmetric extents keep the principal point at the image centre.
    half_w = min(half_cap, math.ceil(ext_x * focal + _WIDE_MARGIN_PX))
    half_h = min(half_cap, math.ceil(ext_y * focal + _WIDE_MARGIN_PX))
    width, height = 2 * half_w, 2 * half_h
    fovy = 2.0 * math.degrees(math.atan(0.5 * height / focal))
    return WideRender(width=width, height=height, fovy_deg=fovy, max_fov_deg=max_fov_deg)


class FisheyeRemap:
    """Precomputed remap from a wide pinhole render to a fisheye or distorted pinhole image.

    Works for any non-ideal (or off-centre) output model despite the name. Invalid output pixels
    (beyond ``wide.max_fov_deg / 2``, where the distortion cannot be inverted, or outside the wide
    render) become black.
    """

    def __init__(self, intr_out: Intrinsics, wide: WideRender) -> None:
        """Precompute float and fixed-point maps for ``intr_out`` from ``wide``."""
        self.intr_out = intr_out
        self.wide = wide
        rays, valid = _output_rays(intr_out, wide.max_fov_deg)
        f = wide.focal
        map_x = rays[..., 0] * f + (wide.width - 1) / 2.0
        map_y = rays[..., 1] * f + (wide.height - 1) / 2.0
        # Rays whose bilinear footprint leaves the render's pixel centres are invalid, too.
        inside = (
            (map_x >= 0) & (map_x <= wide.width - 1) & (map_y >= 0) & (map_y <= wide.height - 1)
        )
        self.valid: np.ndarray = valid & inside
        self.map_x: np.ndarray = np.where(self.valid, map_x, _INVALID_COORD).astype(np.float32)
        self.map_y: np.ndarray = np.where(self.valid, map_y, _INVALID_COORD).astype(np.float32)
        self._map1, self._map2 = cv2.convertMaps(self.map_x, self.map_y, cv2.CV_16SC2)
        self._nn_map1, _ = cv2.convertMaps(
            self.map_x, self.map_y, cv2.CV_16SC2, nninterpolation=True
        )
        # Nearest-neighbour remapping with a CV_16SC2 map needs no fractional table.
        self._nn_map2 = np.empty((0, 0), dtype=np.uint16)

    @property
    def shape(self) -> tuple[int, int]:
        """Output image shape ``(height, width)``."""
        return self.intr_out.height, self.intr_out.width

    def _check_input(self, img: np.ndarray) -> None:
        """Raise ValueError if ``img`` does not match the planned wide render size."""
        if img.shape[:2] != (self.wide.height, self.wide.width):
            raise ValueError(
                f"wide image must be {self.wide.height}x{self.wide.width}, got {img.shape[:2]}"
            )

    def __call__(self, wide_img: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """Remap a wide (H,W,3) uint8 render to the output (h,w,3) uint8 image (bilinear)."""
        self._check_input(wide_img)
        return cv2.remap(
            wide_img,
            self._map1,
            self._map2,
            cv2.INTER_LINEAR,
            dst=out,
            borderMode=cv2.BORDER_CONSTANT,
            borderValue=(0, 0, 0, 0),
        )

    def remap_depth(
        self, wide_depth: np.ndarray, linear: bool = False, out: np.ndarray | None = None
    ) -> np.ndarray:
        """Remap a wide (H,W) float32 depth render to the output (h,w) float32 depth.

        MuJoCo's depth is the z-distance along the optical axis. Both cameras share the centre
        and orientation, so a point's z is the same in the output camera frame and the sampled
        value is directly the output depth. Nearest sampling (default) avoids blending across
        depth discontinuities. Invalid pixels get depth 0.
        """
        self._check_input(wide_depth)
        depth = np.asarray(wide_depth, dtype=np.float32)
        if linear:
            return cv2.remap(
                depth,
                self._map1,
                self._map2,
                cv2.INTER_LINEAR,
                dst=out,
                borderMode=cv2.BORDER_CONSTANT,
                borderValue=0.0,
            )
        return cv2.remap(
            depth,
            self._nn_map1,
            self._nn_map2,
            cv2.INTER_NEAREST,
            dst=out,
            borderMode=cv2.BORDER_CONSTANT,
            borderValue=0.0,
        )
