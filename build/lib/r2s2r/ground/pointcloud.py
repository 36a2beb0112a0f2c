"""Point clouds from RGB-D: back-projection, RANSAC plane fitting and ICP (numpy + cKDTree).

Used by scene registration (``register.py``, ``register_belt.py``, ``register_objects.py``).
Frames: the camera is OpenCV-style (x right, y down, z along the optical axis); a
:class:`CameraView` maps it into the cell frame.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import cv2
import numpy as np
from scipy.spatial import cKDTree
from scipy.spatial.transform import Rotation

from r2s2r.sim.camera import Intrinsics
from r2s2r.spec.world import CameraSpec

# Names of the six pose increments an ICP may solve for: rotations about, and translations
# along, the cell axes (rotations act about the current model centre).
DOF_NAMES = ("rx", "ry", "rz", "x", "y", "z")


@dataclass(frozen=True)
class CameraView:
    """A calibrated camera: intrinsics plus the OpenCV camera frame's pose in the cell."""

    intrinsics: Intrinsics
    rotation: np.ndarray  # (3, 3) camera-to-cell rotation.
    position: np.ndarray  # (3,) camera centre in the cell frame, metres.

    @classmethod
    def from_spec(cls, cam: CameraSpec) -> CameraView:
        """The view of a world-mounted camera's spec (calibrated or nominal)."""
        if cam.mount != "world":
            raise ValueError(f"scene registration needs a world-mounted camera, got {cam.mount}")
        rot = Rotation.from_quat(cam.pose.quat, scalar_first=True).as_matrix()
        return cls(Intrinsics.from_spec(cam), rot, np.asarray(cam.pose.pos, dtype=np.float64))

    def to_camera(self, points: np.ndarray) -> np.ndarray:
        """Cell-frame points (N, 3) in the camera frame (N, 3)."""
        return (np.asarray(points, dtype=np.float64).reshape(-1, 3) - self.position) @ self.rotation

    def project(self, points: np.ndarray) -> np.ndarray:
        """Pixels (N, 2) of cell-frame points (N, 3); NaN behind the camera."""
        return self.intrinsics.project(self.to_camera(points))

    def rays(self, pixels: np.ndarray) -> np.ndarray:
        """Unit-depth rays (N, 3) in the cell frame (camera z = 1) through pixels (N, 2)."""
        norm = self.intrinsics.undistort_pixels(np.asarray(pixels, dtype=np.float64))
        cam = np.concatenate([norm, np.ones((norm.shape[0], 1))], axis=1)
        return cam @ self.rotation.T

    def backproject(self, depth: np.ndarray) -> np.ndarray:
        """Cell-frame points (H, W, 3) of a z-depth map (H, W) in metres; NaN where invalid."""
        h, w = depth.shape
        us, vs = np.meshgrid(np.arange(w, dtype=np.float64), np.arange(h, dtype=np.float64))
        rays = self.rays(np.stack([us.ravel(), vs.ravel()], axis=1))
        d = np.asarray(depth, dtype=np.float64).ravel()
        valid = np.isfinite(d) & (d > 0.0)
        pts = np.where(valid[:, None], rays * d[:, None] + self.position, np.nan)
        return pts.reshape(h, w, 3)

    def intersect_plane(self, pixels: np.ndarray, plane: Plane) -> np.ndarray:
        """Cell-frame points (N, 3) where the rays through sub-pixel positions (N, 2) meet
        ``plane``; NaN for rays parallel to it."""
        rays = self.rays(pixels)
        denom = rays @ plane.normal
        with np.errstate(divide="ignore", invalid="ignore"):
            t = -(self.position @ plane.normal + plane.offset) / denom
        t = np.where(np.abs(denom) > 1e-9, t, np.nan)
        return self.position + rays * t[:, None]


@dataclass(frozen=True)
class Plane:
    """The plane ``normal . p + offset = 0`` (unit normal)."""

    normal: np.ndarray  # (3,)
    offset: float

    def distance(self, points: np.ndarray) -> np.ndarray:
        """Signed distances (...,) of points (..., 3), positive on the normal's side."""
        return np.asarray(points) @ self.normal + self.offset

    def project(self, points: np.ndarray) -> np.ndarray:
        """Orthogonal projections (..., 3) of points (..., 3) onto the plane."""
        return points - self.distance(points)[..., None] * self.normal


def fit_plane(points: np.ndarray) -> Plane:
    """Least-squares plane through points (N, 3), N >= 3 (smallest principal axis)."""
    centre = points.mean(axis=0)
    _, _, vt = np.linalg.svd(points - centre, full_matrices=False)
    normal = vt[2] / np.linalg.norm(vt[2])
    return Plane(normal, float(-normal @ centre))


def ransac_plane(
    points: np.ndarray,
    threshold: float,
    rng: np.random.Generator,
    iterations: int = 300,
    up: np.ndarray | None = None,
    max_tilt_deg: float = 90.0,
) -> tuple[Plane, np.ndarray]:
    """RANSAC plane of points (N, 3): the plane with most points within ``threshold`` (m),
    refitted on them; only planes within ``max_tilt_deg`` of ``up`` count. Returns the plane
    (normal towards ``up`` when given) and the inlier mask (N,)."""
    n = points.shape[0]
    if n < 3:
        raise ValueError(f"a plane needs at least 3 points, got {n}")
    idx = rng.integers(0, n, size=(iterations, 3))
    a, b, c = points[idx[:, 0]], points[idx[:, 1]], points[idx[:, 2]]
    normals = np.cross(b - a, c - a)
    lengths = np.linalg.norm(normals, axis=1)
    ok = lengths > 1e-12
    normals[ok] /= lengths[ok, None]
    if up is not None:
        cos = np.abs(normals @ up)
        ok &= cos >= np.cos(np.radians(max_tilt_deg))
    if not ok.any():
        raise ValueError("no sampled plane had the required orientation")
    normals, a = normals[ok], a[ok]
    offsets = -np.einsum("ij,ij->i", normals, a)
    # Score candidates in chunks to bound memory (candidates x points).
    counts = np.concatenate(
        [
            (np.abs(points @ normals[i : i + 32].T + offsets[i : i + 32]) < threshold).sum(0)
            for i in range(0, normals.shape[0], 32)
        ]
    )
    best = int(np.argmax(counts))
    plane = Plane(normals[best], float(offsets[best]))
    for _ in range(3):
        inliers = np.abs(plane.distance(points)) < threshold
        plane = fit_plane(points[inliers])
    inliers = np.abs(plane.distance(points)) < threshold
    if up is not None and plane.normal @ up < 0:
        plane = Plane(-plane.normal, -plane.offset)
    return plane, inliers


@dataclass(frozen=True)
class IcpResult:
    """An ICP outcome: the model pose, its inlier residual and support."""

    pose: np.ndarray  # (4, 4) model-to-cell transform.
    rmse: float  # RMS point-to-plane (or point-to-point) residual of inliers, metres.
    inlier_fraction: float  # Share of scene points matched within the last distance gate.
    iterations: int


def transform(pose: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Apply a (4, 4) pose to points (N, 3)."""
    return points @ pose[:3, :3].T + pose[:3, 3]


class IcpModel:
    """A rigid model: surface samples (M, 3) with outward normals (M, 3), in its own frame."""

    def __init__(self, points: np.ndarray, normals: np.ndarray) -> None:
        self.points = np.asarray(points, dtype=np.float64)
        self.normals = np.asarray(normals, dtype=np.float64)
        self.tree = cKDTree(self.points)


def _pairs(
    model: IcpModel, scene: np.ndarray, pose: np.ndarray, gate: float, viewpoint: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Scene points (K, 3) matched to model points (K, 3) with normals (K, 3), in the cell."""
    local = (scene - pose[:3, 3]) @ pose[:3, :3]
    dist, j = model.tree.query(local, distance_upper_bound=gate)
    keep = np.isfinite(dist)
    m = transform(pose, model.points[j[keep]])
    n = model.normals[j[keep]] @ pose[:3, :3].T
    s = scene[keep]
    if viewpoint is not None:
        front = np.einsum("ij,ij->i", n, viewpoint - m) > 0.0
        m, n, s = m[front], n[front], s[front]
    return s, m, n


def icp(
    model: IcpModel,
    scene: np.ndarray,
    init: np.ndarray,
    max_dist: float | Sequence[float],
    dof: Sequence[str] = DOF_NAMES,
    point_to_plane: bool = True,
    viewpoint: np.ndarray | None = None,
    iterations: int = 30,
    tol: float = 1e-6,
) -> IcpResult:
    """Register ``model`` to scene points (N, 3), starting from pose ``init`` (4, 4).

    Each scene point is matched to its nearest model point (the scene sees part of the
    model); pairs farther than ``max_dist`` (a constant, or one gate per iteration, the last
    repeated) are dropped, and so are model points facing away from ``viewpoint``. The pose
    increments in ``dof`` (``DOF_NAMES``) are solved by linearised least squares.
    """
    use = [DOF_NAMES.index(d) for d in dof]
    gates = [float(max_dist)] if isinstance(max_dist, int | float) else [float(g) for g in max_dist]
    pose = np.asarray(init, dtype=np.float64).copy()
    it = 0
    for it in range(1, iterations + 1):
        s, m, n = _pairs(model, scene, pose, gates[min(it - 1, len(gates) - 1)], viewpoint)
        if m.shape[0] < max(6, len(use)):
            break
        centre = m.mean(axis=0)
        mc = m - centre
        if point_to_plane:
            jac = np.concatenate([np.cross(mc, n), n], axis=1)
            res = np.einsum("ij,ij->i", n, s - m)
        else:
            # Three rows per pair: (s - m) = omega x mc + v, with omega x mc = -[mc]x omega.
            k = mc.shape[0]
            skew = np.zeros((k, 3, 3))
            skew[:, 0, 1], skew[:, 0, 2] = mc[:, 2], -mc[:, 1]
            skew[:, 1, 0], skew[:, 1, 2] = -mc[:, 2], mc[:, 0]
            skew[:, 2, 0], skew[:, 2, 1] = mc[:, 1], -mc[:, 0]
            jac = np.concatenate([skew, np.broadcast_to(np.eye(3), (k, 3, 3))], axis=2)
            jac, res = jac.reshape(3 * k, 6), (s - m).reshape(-1)
        x = np.zeros(6)
        # Lightly damped normal equations: directions the scene cannot fix (a cylinder's turn
        # about its axis) stay put instead of drifting.
        a = jac[:, use]
        ata = a.T @ a
        ata[np.diag_indices_from(ata)] += 1e-6 * np.trace(ata) / len(use) + 1e-12
        x[use] = np.linalg.solve(ata, a.T @ res)
        # A direction the points barely constrain (a cube's top seen from above constrains no
        # sliding) can still ask for a large step: move no further than the match gate.
        gate = gates[min(it - 1, len(gates) - 1)]
        x[3:] *= min(1.0, gate / max(float(np.linalg.norm(x[3:])), 1e-12))
        x[:3] *= min(1.0, 0.1 / max(float(np.linalg.norm(x[:3])), 1e-12))
        step = np.eye(4)
        step[:3, :3] = Rotation.from_rotvec(x[:3]).as_matrix()
        step[:3, 3] = centre - step[:3, :3] @ centre + x[3:]
        pose = step @ pose
        if np.linalg.norm(x) < tol and it >= len(gates):
            break
    s, m, n = _pairs(model, scene, pose, gates[-1], viewpoint)
    if m.shape[0] == 0:
        return IcpResult(pose, math.inf, 0.0, it)
    err = np.einsum("ij,ij->i", n, s - m) if point_to_plane else np.linalg.norm(s - m, axis=1)
    return IcpResult(pose, float(np.sqrt(np.mean(err**2))), m.shape[0] / scene.shape[0], it)


def pose_matrix(rotation: np.ndarray, position: np.ndarray) -> np.ndarray:
    """A (4, 4) pose from a rotation (3, 3) and a position (3,)."""
    pose = np.eye(4)
    pose[:3, :3], pose[:3, 3] = rotation, position
    return pose


def _face(
    centre: np.ndarray, u: np.ndarray, v: np.ndarray, hu: float, hv: float, spacing: float
) -> np.ndarray:
    """Grid samples (K, 3) of the rectangle ``centre + a u + b v``, |a| <= hu, |b| <= hv."""
    nu, nv = max(2, int(np.ceil(2 * hu / spacing)) + 1), max(2, int(np.ceil(2 * hv / spacing)) + 1)
    a, b = np.meshgrid(np.linspace(-hu, hu, nu), np.linspace(-hv, hv, nv))
    return centre + a.reshape(-1, 1) * u + b.reshape(-1, 1) * v


def box_surface(
    half: Sequence[float], spacing: float, centre: Sequence[float] = (0.0, 0.0, 0.0)
) -> tuple[np.ndarray, np.ndarray]:
    """Samples (N, 3) and outward normals (N, 3) of a box's six faces."""
    c = np.asarray(centre, dtype=np.float64)
    h = np.asarray(half, dtype=np.float64)
    pts, nrm = [], []
    eye = np.eye(3)
    for k in range(3):
        i, j = (k + 1) % 3, (k + 2) % 3
        for sign in (1.0, -1.0):
            p = _face(c + sign * h[k] * eye[k], eye[i], eye[j], h[i], h[j], spacing)
            pts.append(p)
            nrm.append(np.tile(sign * eye[k], (p.shape[0], 1)))
    return np.concatenate(pts), np.concatenate(nrm)


def _sphere_dirs(n: int) -> np.ndarray:
    """Near-uniform unit vectors (n, 3) on a Fibonacci spiral."""
    k = np.arange(n) + 0.5
    z = 1.0 - 2.0 * k / n
    r = np.sqrt(np.maximum(0.0, 1.0 - z**2))
    phi = np.pi * (1.0 + 5**0.5) * k
    return np.stack([r * np.cos(phi), r * np.sin(phi), z], axis=1)


def _disk(radius: float, z: float, spacing: float) -> np.ndarray:
    """Near-uniform samples (K, 3) of a disk of ``radius`` at height ``z`` (sunflower)."""
    n = max(8, int(np.pi * radius**2 / spacing**2))
    k = np.arange(n) + 0.5
    r = radius * np.sqrt(k / n)
    phi = np.pi * (1.0 + 5**0.5) * k
    return np.stack([r * np.cos(phi), r * np.sin(phi), np.full(n, z)], axis=1)


def primitive_surface(
    shape: str, size: Sequence[float], spacing: float
) -> tuple[np.ndarray, np.ndarray]:
    """Surface samples (N, 3) and outward normals (N, 3) of a MuJoCo primitive (half-sizes,
    radius, half-length) in its own frame."""
    if shape == "box":
        return box_surface(size, spacing)
    if shape in ("sphere", "ellipsoid"):
        axes = np.asarray([size[0]] * 3 if shape == "sphere" else size, dtype=np.float64)
        area = 4.0 * np.pi * float(np.mean(axes)) ** 2
        dirs = _sphere_dirs(max(64, int(area / spacing**2)))
        normals = dirs / axes
        return dirs * axes, normals / np.linalg.norm(normals, axis=1, keepdims=True)
    if shape in ("cylinder", "capsule"):
        r, hl = float(size[0]), float(size[1])
        ring = max(12, int(2 * np.pi * r / spacing))
        rows = max(2, int(np.ceil(2 * hl / spacing)) + 1)
        phi, z = np.meshgrid(
            np.linspace(0, 2 * np.pi, ring, endpoint=False), np.linspace(-hl, hl, rows)
        )
        side_n = np.stack([np.cos(phi).ravel(), np.sin(phi).ravel(), np.zeros(phi.size)], axis=1)
        side = side_n * r + np.stack([np.zeros(z.size), np.zeros(z.size), z.ravel()], axis=1)
        if shape == "cylinder":
            top, bottom = _disk(r, hl, spacing), _disk(r, -hl, spacing)
            caps_n = [
                np.tile([0.0, 0.0, 1.0], (len(top), 1)),
                np.tile([0.0, 0.0, -1.0], (len(bottom), 1)),
            ]
            return np.concatenate([side, top, bottom]), np.concatenate([side_n, *caps_n])
        dirs = _sphere_dirs(max(32, int(4 * np.pi * r**2 / spacing**2)))
        ends = dirs * r + np.where(dirs[:, 2:] >= 0, hl, -hl) * np.array([0.0, 0.0, 1.0])
        return np.concatenate([side, ends]), np.concatenate([side_n, dirs])
    raise ValueError(f"unknown primitive shape {shape!r}")


def silhouette(view: CameraView, points: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """Mask (H, W) of the image region covered by a convex body sampled by points (N, 3):
    the filled convex hull of their projections (sub-pixel accurate)."""
    mask = np.zeros(shape, dtype=np.uint8)
    px = view.project(points)
    px = px[np.all(np.isfinite(px), axis=1)]
    if px.shape[0] < 3:
        return mask.astype(bool)
    hull = cv2.convexHull(np.round(px * 16).astype(np.int32))
    cv2.fillConvexPoly(mask, hull, 1, lineType=cv2.LINE_8, shift=4)
    return mask.astype(bool)
