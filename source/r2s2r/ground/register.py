"""Scene registration: belt, bins and objects located in head-camera RGB-D (world grounding).

This module holds the capture, the tuning, the results and the helpers the registration
modules share, plus :func:`register_scene`, which runs them on a capture, and
:func:`draw_overlay`, which draws a result over the camera image. The belt is registered by
:mod:`r2s2r.ground.register_belt`, the bins and objects by :mod:`r2s2r.ground.register_objects`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Annotated

import cv2
import numpy as np
from pydantic import Field
from scipy.spatial.transform import Rotation

from r2s2r.ground.pointcloud import (
    CameraView,
    Plane,
    pose_matrix,
    primitive_surface,
    silhouette,
    transform,
)
from r2s2r.spec import Spec, WorldSpec
from r2s2r.spec.base import NonNeg, NonNegInt, Pos, PosInt, Share
from r2s2r.spec.task import BinSpec, ObjectSpec
from r2s2r.spec.world import BinLayout, LayoutSpec

__all__ = [
    "BeltRegistration",
    "BinRegistration",
    "ObjectRegistration",
    "RegistrationCfg",
    "RegistrationError",
    "RgbdCapture",
    "SceneRegistration",
    "draw_overlay",
]

# Wall and floor thickness of a bin, as the scene builder makes them (metres).
BIN_WALL = 0.01
UP = np.array([0.0, 0.0, 1.0])


class RegistrationError(ValueError):
    """The capture cannot be registered; the message says what is wrong and what to capture."""


class RegistrationCfg(Spec):
    """Tuning of scene registration (metres and degrees)."""

    seed: NonNegInt = 0
    # How far the belt and bins may be from their drawn poses (horizontally / vertically).
    search_margin: Pos = 0.10
    search_height: Pos = 0.05
    # Belt: RANSAC inlier distance, surface band for its pixels, largest tilt from level, and
    # how far below the plane a neighbour must be for the pair to mark an edge.
    plane_threshold: Pos = 0.003
    surface_band: Pos = 0.002
    max_tilt_deg: Annotated[float, Field(gt=0, lt=90)] = 15.0
    edge_drop: Pos = 0.005
    ransac_points: PosInt = 20000
    # The belt must be seen over at least this share of its length and width.
    min_belt_coverage: Share = 0.5
    # Surface sample spacing of the registered models, and scene points used per ICP.
    model_spacing: Pos = 0.004
    bin_points: PosInt = 4000
    object_points: PosInt = 1500
    # Objects: lowest height above the belt that counts, depth jump that separates two
    # things, and the mask IoU an object pose needs to be accepted.
    object_min_height: NonNeg = 0.003
    depth_jump: Pos = 0.02
    iou_accept: Share = 0.6


# The default tuning, as the registration functions' default argument.
DEFAULT_CFG = RegistrationCfg()


@dataclass(frozen=True)
class RgbdCapture:
    """One head-camera frame: RGB (H, W, 3) uint8, z-depth (H, W) in metres (0 or NaN where
    unknown) and the calibrated view it was taken from."""

    rgb: np.ndarray
    depth: np.ndarray
    view: CameraView

    def __post_init__(self) -> None:
        """Check that images and intrinsics agree."""
        depth, intr = np.asarray(self.depth), self.view.intrinsics
        if depth.ndim != 2:
            raise RegistrationError(f"depth must be an (H, W) map in metres, got {depth.shape}")
        if depth.shape != (intr.height, intr.width):
            raise RegistrationError(
                f"depth is {depth.shape[1]}x{depth.shape[0]} (WxH) but the camera intrinsics "
                f"are for {intr.width}x{intr.height}: pass intrinsics for the capture's "
                f"resolution (Intrinsics.scaled({depth.shape[1]}, {depth.shape[0]})) or "
                "capture at the calibrated resolution"
            )
        if np.shape(self.rgb) != (*depth.shape, 3):
            raise RegistrationError(
                f"rgb is {np.shape(self.rgb)} but depth is {depth.shape}: give the colour "
                "image of the same frame, (H, W, 3)"
            )

    @cached_property
    def points(self) -> np.ndarray:
        """Cell-frame points (H, W, 3) of every pixel; NaN where depth is unknown."""
        return self.view.backproject(self.depth)

    @cached_property
    def valid(self) -> np.ndarray:
        """Pixels (H, W) with a depth."""
        return np.isfinite(self.points[..., 0])


@dataclass(frozen=True)
class BeltRegistration:
    """The belt's top surface: centre, heading, plane and fit residuals."""

    pos: np.ndarray  # (3,) centre of the top surface in the cell, m.
    yaw_deg: float
    plane: Plane
    length: float  # Known size used for the fit.
    width: float
    length_seen: float  # Between the two ends seen (NaN when an end is hidden).
    width_seen: float  # Between the two long edges seen (NaN when one is hidden).
    plane_rms: float  # RMS distance of the surface points from the plane, m.
    edge_rms: float  # RMS distance of the edge points from the fitted outline, m.
    edge_points: int

    @property
    def height(self) -> float:
        """Height of the top surface at its centre (m)."""
        return float(self.pos[2])

    @property
    def residual(self) -> float:
        """Combined plane and outline residual (m)."""
        return math.hypot(self.plane_rms, self.edge_rms)

    def to_local(self, points: np.ndarray) -> np.ndarray:
        """Points (..., 3) in the belt frame: along, across, above the top surface."""
        rot = Rotation.from_euler("z", self.yaw_deg, degrees=True).as_matrix()
        local = (np.asarray(points) - self.pos) @ rot
        local[..., 2] = self.plane.distance(points)
        return local


@dataclass(frozen=True)
class BinRegistration:
    """A registered bin: its origin (underside centre, as ``BinLayout.pos``) and yaw."""

    spec: BinSpec
    pos: np.ndarray  # (3,)
    yaw_deg: float
    residual: float  # RMS point-to-plane residual of the matched points, m.
    inlier_fraction: float  # Share of the cropped points the model explains.


@dataclass(frozen=True)
class ObjectRegistration:
    """A registered object on the belt and whether its pose passed the mask check."""

    spec: ObjectSpec
    pos: np.ndarray  # (3,) centre in the cell, m.
    quat: np.ndarray  # (4,) orientation (w, x, y, z).
    residual: float  # RMS point-to-plane residual of the matched points, m.
    iou: float  # Overlap of the mask rendered from the pose with the observed mask.
    accepted: bool
    mask: np.ndarray = field(repr=False)  # (H, W) bool observed mask.

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def pose(self) -> np.ndarray:
        """Position and quaternion (7,)."""
        return np.concatenate([self.pos, self.quat])


@dataclass(frozen=True)
class SceneRegistration:
    """Everything registered from the head camera, with the view it was seen from."""

    view: CameraView
    belt: BeltRegistration
    bins: dict[str, BinRegistration]
    objects: tuple[ObjectRegistration, ...] = ()

    def update_layout(self, layout: LayoutSpec) -> LayoutSpec:
        """``layout`` with the belt's and bins' poses replaced by the registered ones."""
        belt = layout.belt.replace(
            pos=tuple(float(v) for v in self.belt.pos), yaw_deg=self.belt.yaw_deg
        )
        bins = dict(layout.bins)
        for name, b in self.bins.items():
            bins[name] = BinLayout(
                pos=(float(b.pos[0]), float(b.pos[1]), float(b.pos[2])), yaw_deg=b.yaw_deg
            )
        return layout.replace(belt=belt, bins=bins)

    def update_world(self, world: WorldSpec) -> WorldSpec:
        """``world`` with its layout updated (validated copy)."""
        return world.replace(layout=self.update_layout(world.layout).model_dump())

    def summary(self) -> dict[str, object]:
        """Plain numbers for a report (mm, degrees)."""
        return {
            "belt": {
                "pos_m": [round(float(v), 5) for v in self.belt.pos],
                "yaw_deg": round(self.belt.yaw_deg, 3),
                "plane_rms_mm": round(1e3 * self.belt.plane_rms, 3),
                "edge_rms_mm": round(1e3 * self.belt.edge_rms, 3),
                "length_seen_m": round(self.belt.length_seen, 4),
                "width_seen_m": round(self.belt.width_seen, 4),
            },
            "bins": {
                n: {
                    "pos_m": [round(float(v), 5) for v in b.pos],
                    "yaw_deg": round(b.yaw_deg, 3),
                    "residual_mm": round(1e3 * b.residual, 3),
                    "inlier_fraction": round(b.inlier_fraction, 3),
                }
                for n, b in self.bins.items()
            },
            "objects": [
                {
                    "name": o.name,
                    "pose": [round(float(v), 5) for v in o.pose],
                    "residual_mm": round(1e3 * o.residual, 3),
                    "iou": round(o.iou, 3),
                    "accepted": o.accepted,
                }
                for o in self.objects
            ],
        }


# ---------------------------------------------------------------------------------- helpers
def yaw_rot(yaw_deg: float) -> np.ndarray:
    """Rotation matrix (3, 3) of a turn by ``yaw_deg`` about the vertical."""
    return Rotation.from_euler("z", yaw_deg, degrees=True).as_matrix()


def check_depth(capture: RgbdCapture) -> None:
    """Refuse a capture whose depth map has almost no valid pixels."""
    n = int(capture.valid.sum())
    if n < 0.05 * capture.valid.size:
        raise RegistrationError(
            f"the depth map has almost no valid pixels ({n} of {capture.valid.size} are finite "
            "and positive): capture the head camera's depth (metres) with the cell in view, "
            "not an empty, all-zero or all-NaN frame"
        )


def rect(pose: np.ndarray, hx: float, hy: float, z: float) -> np.ndarray:
    """Corners (4, 3) of a rectangle at local height ``z`` of a (4, 4) pose."""
    local = np.array([[hx, hy, z], [-hx, hy, z], [-hx, -hy, z], [hx, -hy, z]])
    return transform(pose, local)


def _outline(corners: np.ndarray) -> list[np.ndarray]:
    """Closed polylines (K, 3): each 4-corner rectangle (4, 3) sampled densely."""
    loop = np.concatenate([corners, corners[:1]])
    t = np.linspace(0.0, 1.0, 20)[:, None]
    return [np.concatenate([a + t * (b - a) for a, b in zip(loop[:-1], loop[1:], strict=True)])]


def draw_overlay(rgb: np.ndarray, registration: SceneRegistration) -> np.ndarray:
    """The registered belt, bins and objects drawn over an RGB image (H, W, 3) uint8 of the
    same camera: belt outline yellow, bins cyan, objects green if accepted, red if not."""
    view = registration.view
    out = np.ascontiguousarray(rgb, dtype=np.uint8).copy()

    def draw(lines: list[np.ndarray], colour: tuple[int, int, int]) -> None:
        for line in lines:
            px = view.project(line)
            px = px[np.all(np.isfinite(px), axis=1)]
            if len(px) > 1:
                cv2.polylines(out, [np.round(px).astype(np.int32)], False, colour, 2, cv2.LINE_AA)

    belt = registration.belt
    belt_pose = pose_matrix(yaw_rot(belt.yaw_deg), belt.pos)
    draw(_outline(rect(belt_pose, belt.length / 2, belt.width / 2, 0.0)), (255, 220, 0))
    for b in registration.bins.values():
        pose = pose_matrix(yaw_rot(b.yaw_deg), b.pos)
        hx, hy, h = *b.spec.half_size, b.spec.wall_height
        for half_x, half_y, z in (
            (hx, hy, h),
            (hx + BIN_WALL, hy + BIN_WALL, h),
            (hx, hy, BIN_WALL),
        ):
            draw(_outline(rect(pose, half_x, half_y, z)), (0, 220, 255))
    for o in registration.objects:
        pts, _ = primitive_surface(o.spec.shape, o.spec.size, 0.004)
        pose = pose_matrix(Rotation.from_quat(o.quat, scalar_first=True).as_matrix(), o.pos)
        mask = silhouette(view, transform(pose, pts), out.shape[:2]).astype(np.uint8)
        contours, _ = cv2.findContours(mask, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
        colour = (0, 230, 0) if o.accepted else (255, 40, 40)
        cv2.drawContours(out, contours, -1, colour, 2, cv2.LINE_AA)
        ys, xs = np.nonzero(mask)
        if len(xs):
            label = f"{o.name} IoU {o.iou:.2f}"
            org = (int(xs.min()), max(12, int(ys.min()) - 6))
            cv2.putText(out, label, org, cv2.FONT_HERSHEY_SIMPLEX, 0.5, colour, 1, cv2.LINE_AA)
    return out
