"""Bin and object registration in head-camera RGB-D, on a registered belt.

Bins are their known wall/rim/floor model registered by a coarse search plus ICP. Objects are
points above the belt, split into connected components, identified among the task's objects
by colour and fit, registered by ICP, snapped to rest on the belt, and accepted on mask IoU.
"""

from __future__ import annotations

import math

import cv2
import numpy as np
from scipy.spatial.transform import Rotation

from r2s2r.ground.pointcloud import (
    IcpModel,
    Plane,
    box_surface,
    icp,
    pose_matrix,
    primitive_surface,
    silhouette,
    transform,
)
from r2s2r.ground.register import (
    BIN_WALL,
    DEFAULT_CFG,
    UP,
    BeltRegistration,
    BinRegistration,
    ObjectRegistration,
    RegistrationCfg,
    RegistrationError,
    RgbdCapture,
    check_depth,
    yaw_rot,
)
from r2s2r.spec.task import BinSpec, ObjectSpec
from r2s2r.spec.world import BinLayout

__all__ = ["bin_model", "register_bins", "register_objects", "rest_on"]


# ------------------------------------------------------------------------------------ bins
def bin_model(spec: BinSpec, spacing: float) -> IcpModel:
    """Surface samples of a bin in its frame (origin at the floor's underside centre): floor
    top, inner and outer wall faces and the rim, with normals pointing out of the material."""
    hx, hy, h, w = *spec.half_size, spec.wall_height, BIN_WALL
    pts, nrm = [], []
    # The solid outer box (walls' outsides, rim and underside) minus the inner cavity.
    p, n = box_surface((hx + w, hy + w, h / 2), spacing, (0.0, 0.0, h / 2))
    outer = p[:, 2] < h - 1e-9
    rim = (p[:, 2] > h - 1e-9) & ((np.abs(p[:, 0]) > hx) | (np.abs(p[:, 1]) > hy))
    keep = (outer & (p[:, 2] > 1e-9)) | rim
    pts.append(p[keep])
    nrm.append(n[keep])
    p, n = box_surface((hx, hy, (h - w) / 2), spacing, (0.0, 0.0, (h + w) / 2))
    cavity = p[:, 2] < h - 1e-9  # Inner walls and floor top; normals point into the cavity.
    pts.append(p[cavity])
    nrm.append(-n[cavity])
    return IcpModel(np.concatenate(pts), np.concatenate(nrm))


def register_bins(
    capture: RgbdCapture,
    bins: tuple[BinSpec, ...],
    nominal: dict[str, BinLayout],
    belt: BeltRegistration | None = None,
    cfg: RegistrationCfg = DEFAULT_CFG,
) -> dict[str, BinRegistration]:
    """Register each bin's model near its drawn pose (coarse search, then ICP in x, y, z and
    yaw); points on the registered belt are left out."""
    check_depth(capture)
    pts, valid = capture.points, capture.valid
    if belt is not None:
        bl = belt.to_local(np.where(valid[..., None], pts, 0.0))
        on_belt = (
            (np.abs(bl[..., 0]) < belt.length / 2 + 0.05)
            & (np.abs(bl[..., 1]) < belt.width / 2 + 0.005)
            & (bl[..., 2] > -0.1)
        )
        valid = valid & ~on_belt
    rng = np.random.default_rng(cfg.seed)
    out = {}
    for spec in bins:
        if spec.name not in nominal:
            raise RegistrationError(f"the layout has no drawn pose for bin {spec.name!r}")
        drawn = nominal[spec.name]
        model = bin_model(spec, cfg.model_spacing)
        rot0, pos0 = yaw_rot(drawn.yaw_deg), np.asarray(drawn.pos, dtype=np.float64)
        reach = max(spec.half_size) + BIN_WALL + min(cfg.search_margin, 0.05)
        local = (np.where(valid[..., None], pts, 0.0) - pos0) @ rot0
        crop = (
            valid
            & (np.abs(local[..., 0]) < reach)
            & (np.abs(local[..., 1]) < reach)
            & (local[..., 2] > 0.004)
            & (local[..., 2] < spec.wall_height + 0.015)
        )
        cloud = pts[crop]
        if len(cloud) < 200:
            raise RegistrationError(
                f"bin {spec.name!r}: only {len(cloud)} depth points near its drawn pose "
                f"{drawn.pos}: capture the head camera's depth with the bins in view"
            )
        cloud = cloud[rng.choice(len(cloud), min(len(cloud), cfg.bin_points), replace=False)]
        init = _coarse_bin_search(model, cloud, rot0, pos0)
        gates = (0.02, 0.015, 0.01, 0.007, 0.005, 0.004)
        fit = icp(
            model,
            cloud,
            init,
            gates,
            dof=("rz", "x", "y", "z"),
            viewpoint=capture.view.position,
            iterations=40,
        )
        yaw = math.degrees(math.atan2(fit.pose[1, 0], fit.pose[0, 0]))
        # A square bin looks the same every quarter turn: report the turn nearest the drawing.
        period = 90.0 if abs(spec.half_size[0] - spec.half_size[1]) < 1e-6 else 180.0
        yaw = drawn.yaw_deg + (yaw - drawn.yaw_deg + period / 2) % period - period / 2
        out[spec.name] = BinRegistration(
            spec, fit.pose[:3, 3].copy(), float(yaw), fit.rmse, fit.inlier_fraction
        )
    return out


def _coarse_bin_search(
    model: IcpModel, cloud: np.ndarray, rot0: np.ndarray, pos0: np.ndarray
) -> np.ndarray:
    """The pose near the drawn one (+-4 cm, +-6 degrees) under which most points lie on the
    model, as ICP's starting point."""
    sample = cloud[:: max(1, len(cloud) // 800)]
    best, best_pose = -1, pose_matrix(rot0, pos0)
    for dyaw in (-6.0, -3.0, 0.0, 3.0, 6.0):
        rot = yaw_rot(dyaw) @ rot0
        for dx in np.arange(-0.04, 0.0401, 0.01):
            for dy in np.arange(-0.04, 0.0401, 0.01):
                pos = pos0 + [dx, dy, 0.0]
                dist, _ = model.tree.query((sample - pos) @ rot, distance_upper_bound=0.006)
                score = int(np.isfinite(dist).sum())
                if score > best:
                    best, best_pose = score, pose_matrix(rot, pos)
    return best_pose


# --------------------------------------------------------------------------------- objects
# Rotations that turn local axis 0, 1 or 2 to point up.
_LAY = {
    0: Rotation.from_euler("y", -90, degrees=True),
    1: Rotation.from_euler("x", 90, degrees=True),
    2: Rotation.identity(),
}


def _stable_axes(obj: ObjectSpec) -> list[int]:
    """Local axes an object can rest with pointing up (either sign)."""
    if obj.shape == "sphere":
        return [2]
    if obj.shape in ("cylinder", "capsule"):
        return [2, 0]
    return [0, 1, 2]


def _support_height(obj: ObjectSpec, axis: int) -> float:
    """Height of an object's centre above the surface when resting with ``axis`` up."""
    size = obj.size
    if obj.shape == "sphere":
        return size[0]
    if obj.shape == "cylinder":
        return size[1] if axis == 2 else size[0]
    if obj.shape == "capsule":
        return size[0] + size[1] if axis == 2 else size[0]
    return size[axis]


def rest_on(obj: ObjectSpec, pose: np.ndarray, plane: Plane) -> np.ndarray:
    """``pose`` (4, 4) corrected to rest in stable contact on ``plane``: the stable local
    axis nearest the plane normal is turned onto it (least rotation) and the object is moved
    along the normal until it touches the surface."""
    rot, up = pose[:3, :3], plane.normal
    axes = _stable_axes(obj)
    cos = [float(rot[:, a] @ up) for a in axes]
    k = int(np.argmax(np.abs(cos)))
    axis, sign = axes[k], math.copysign(1.0, cos[k])
    current = sign * rot[:, axis]
    turn, _ = Rotation.align_vectors(up[None], current[None])
    new_rot = turn.as_matrix() @ rot
    centre = plane.project(pose[:3, 3]) + _support_height(obj, axis) * up
    return pose_matrix(new_rot, centre)


def _chroma(rgb: np.ndarray) -> np.ndarray:
    """Chromaticity (..., 3): colour with brightness divided out."""
    rgb = np.asarray(rgb, dtype=np.float64)
    return rgb / np.maximum(rgb.sum(axis=-1, keepdims=True), 1e-9)


def _object_masks(
    capture: RgbdCapture,
    belt: BeltRegistration,
    objects: tuple[ObjectSpec, ...],
    cfg: RegistrationCfg,
) -> list[np.ndarray]:
    """Connected image regions (H, W) bool of things standing on the belt."""
    pts, valid = capture.points, capture.valid
    local = belt.to_local(np.where(valid[..., None], pts, 0.0))
    tallest = max(2.0 * max(o.size) + (o.size[1] if o.shape == "capsule" else 0) for o in objects)
    above = (
        valid
        & (np.abs(local[..., 0]) < belt.length / 2 + 0.03)
        & (np.abs(local[..., 1]) < belt.width / 2 + 0.03)
        & (local[..., 2] > cfg.object_min_height)
        & (local[..., 2] < tallest + 0.02)
    )
    # A depth jump between two raised pixels separates an object from whatever hangs over it.
    depth = np.where(valid, capture.depth, 0.0).astype(np.float32)
    cut = np.zeros_like(above)
    for axis in (0, 1):
        step = (np.abs(np.diff(depth, axis=axis)) > cfg.depth_jump) & (
            above[1:] & above[:-1] if axis == 0 else above[:, 1:] & above[:, :-1]
        )
        if axis == 0:
            cut[1:] |= step
            cut[:-1] |= step
        else:
            cut[:, 1:] |= step
            cut[:, :-1] |= step
    mask = (above & ~cut).astype(np.uint8)
    count, labels, stats, _ = cv2.connectedComponentsWithStats(mask, connectivity=4)
    # The smallest object's top face, seen from the camera, sets the smallest region kept.
    intr = capture.view.intrinsics
    dist = float(np.linalg.norm(capture.view.position - belt.pos))
    smallest = min(math.pi * min(o.size[:2]) ** 2 / 2 for o in objects)
    min_area = max(12, int(0.25 * smallest * intr.fx * intr.fy / dist**2))
    regions = []
    for k in 1 + np.flatnonzero(stats[1:, cv2.CC_STAT_AREA] >= min_area):
        region = labels == k
        # Something resting on the belt stands over it: its middle lies inside the outline.
        s, t = np.median(local[region][:, :2], axis=0)
        if abs(s) <= belt.length / 2 and abs(t) <= belt.width / 2:
            regions.append(region)
    return regions


def register_objects(
    capture: RgbdCapture,
    belt: BeltRegistration,
    objects: tuple[ObjectSpec, ...],
    cfg: RegistrationCfg = DEFAULT_CFG,
) -> tuple[ObjectRegistration, ...]:
    """Segment, identify and register the objects standing on the belt."""
    check_depth(capture)
    rng = np.random.default_rng(cfg.seed)
    models = {
        o.name: IcpModel(*primitive_surface(o.shape, o.size, cfg.model_spacing)) for o in objects
    }
    found = []
    for mask in _object_masks(capture, belt, objects, cfg):
        cloud = capture.points[mask]
        cloud = cloud[rng.choice(len(cloud), min(len(cloud), cfg.object_points), replace=False)]
        colour = _chroma(np.median(capture.rgb[mask].astype(np.float64), axis=0))
        best: tuple[float, ObjectRegistration] | None = None
        for obj in objects:
            reg = _fit_object(capture, belt, obj, models[obj.name], cloud, mask, cfg)
            tint = float(np.linalg.norm(colour - _chroma(np.asarray(obj.rgba[:3]))))
            score = (1.0 - reg.iou) + 3.0 * tint + reg.residual / 0.005
            if best is None or score < best[0]:
                best = (score, reg)
        assert best is not None
        found.append(best[1])
    return tuple(found)


def _fit_object(
    capture: RgbdCapture,
    belt: BeltRegistration,
    obj: ObjectSpec,
    model: IcpModel,
    cloud: np.ndarray,
    mask: np.ndarray,
    cfg: RegistrationCfg,
) -> ObjectRegistration:
    """Best resting pose of one candidate object for a segmented region."""
    plane, eye = belt.plane, capture.view.position
    flat = plane.project(cloud)
    centre = flat.mean(axis=0)
    _, _, vt = np.linalg.svd(flat - centre, full_matrices=False)
    heading = math.atan2(vt[0][1], vt[0][0])
    turn_up, _ = Rotation.align_vectors(plane.normal[None], UP[None])
    best: tuple[float, np.ndarray, float] | None = None
    for axis in _stable_axes(obj):
        lay = _LAY[axis]
        for extra in (0.0, 90.0) if obj.shape != "sphere" else (0.0,):
            rot = turn_up * Rotation.from_euler("z", heading + math.radians(extra)) * lay
            init = pose_matrix(rot.as_matrix(), centre + _support_height(obj, axis) * plane.normal)
            fit = icp(model, cloud, init, (0.015, 0.01, 0.007, 0.005), viewpoint=eye, iterations=20)
            pose = rest_on(obj, fit.pose, plane)
            settled = icp(
                model, cloud, pose, 0.005, dof=("rz", "x", "y"), viewpoint=eye, iterations=15
            )
            if (
                settled.rmse <= fit.rmse * 1.5
                and settled.inlier_fraction >= fit.inlier_fraction * 0.9
            ):
                fit = settled
            pose = rest_on(obj, fit.pose, plane)
            # Unexplained points count as misfits of a few millimetres.
            cost = fit.rmse + 0.005 * (1.0 - fit.inlier_fraction)
            if best is None or cost < best[0]:
                best = (cost, pose, fit.rmse)
    assert best is not None
    _, pose, rmse = best
    rendered = silhouette(capture.view, transform(pose, model.points), mask.shape)
    iou = float((rendered & mask).sum() / max(1, (rendered | mask).sum()))
    quat = Rotation.from_matrix(pose[:3, :3]).as_quat(scalar_first=True)
    return ObjectRegistration(obj, pose[:3, 3].copy(), quat, rmse, iou, iou >= cfg.iou_accept, mask)
