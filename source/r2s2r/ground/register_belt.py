"""Belt registration in head-camera RGB-D: the belt is the dominant level plane near its drawn
pose (RANSAC); its edges are where the plane's inliers border something lower (occluders are
always higher, so objects and arms never make edges), and a rectangle of the known width is
fitted to them.
"""

from __future__ import annotations

import math

import cv2
import numpy as np

from r2s2r.ground.pointcloud import Plane, fit_plane, pose_matrix, ransac_plane
from r2s2r.ground.register import (
    DEFAULT_CFG,
    UP,
    BeltRegistration,
    RegistrationCfg,
    RegistrationError,
    RgbdCapture,
    check_depth,
    rect,
    yaw_rot,
)
from r2s2r.spec.world import BeltLayout

__all__ = ["register_belt"]


# What every refusal suggests.
_HINT = (
    "capture the head camera's depth with the belt in view (is this a depth map of the "
    "cell, in metres, with the calibrated head camera pose?)"
)


def register_belt(
    capture: RgbdCapture, nominal: BeltLayout, cfg: RegistrationCfg = DEFAULT_CFG
) -> BeltRegistration:
    """Fit the belt's top plane near its drawn pose and its outline of known size."""
    check_depth(capture)
    pts = capture.points
    half_l, half_w = nominal.length / 2, nominal.width / 2
    region = _search_region(capture, nominal, cfg)
    where = (
        f"within {cfg.search_margin * 1e3:.0f} mm / {cfg.search_height * 1e3:.0f} mm of the "
        f"drawn belt pose {tuple(round(v, 3) for v in nominal.pos)}"
    )
    if region.sum() < 500:
        raise RegistrationError(f"no depth points {where}: {_HINT}")
    plane, dist, on = _belt_surface(pts, region, cfg, where)
    plane_rms = float(np.sqrt(np.mean(dist[on] ** 2)))
    edges = _edge_points(capture, plane, dist, on, cfg)

    # In-plane frame: origin under the drawn centre, e1 along the drawn heading.
    origin = plane.project(np.asarray(nominal.pos, dtype=np.float64))
    e1 = plane.project(origin + yaw_rot(nominal.yaw_deg)[:, 0]) - origin
    e1 /= np.linalg.norm(e1)
    e2 = np.cross(plane.normal, e1)
    lo, hi = _surface_extent(pts[on][:: max(1, int(on.sum()) // 20000)] - origin, e1, e2)
    if hi[0] - lo[0] < cfg.min_belt_coverage * nominal.length or (
        hi[1] - lo[1] < cfg.min_belt_coverage * nominal.width
    ):
        raise RegistrationError(
            f"the level surface {where} spans only {hi[0] - lo[0]:.3f} x {hi[1] - lo[1]:.3f} m, "
            f"but the belt is {nominal.length} x {nominal.width} m: {_HINT}"
        )
    e = edges - origin
    fit = _fit_outline(np.stack([e @ e1, e @ e2], axis=1), (lo + hi) / 2, half_l, half_w)
    centre2, theta, length_seen, width_seen, edge_rms, n_edges = fit
    pos = origin + centre2[0] * e1 + centre2[1] * e2
    pos = plane.project(pos)
    axis3 = math.cos(theta) * e1 + math.sin(theta) * e2
    yaw = math.degrees(math.atan2(axis3[1], axis3[0]))
    yaw = nominal.yaw_deg + (yaw - nominal.yaw_deg + 90.0) % 180.0 - 90.0
    # The fitted outline must be mostly filled by the plane (noise fits some plane, too).
    filled = _outline_filled(capture, on, pos, yaw, half_l, half_w)
    if filled < cfg.min_belt_coverage or edge_rms > 0.005:
        raise RegistrationError(
            f"the belt outline found {where} is only {100 * filled:.0f}% covered by its plane "
            f"and fits its edges to {1e3 * edge_rms:.1f} mm RMS: {_HINT}"
        )
    return BeltRegistration(
        pos=pos,
        yaw_deg=float(yaw),
        plane=plane,
        length=nominal.length,
        width=nominal.width,
        length_seen=length_seen,
        width_seen=width_seen,
        plane_rms=plane_rms,
        edge_rms=edge_rms,
        edge_points=n_edges,
    )


def _search_region(capture: RgbdCapture, nominal: BeltLayout, cfg: RegistrationCfg) -> np.ndarray:
    """Pixels (H, W) whose points lie within the search margin and height of the drawn belt."""
    local = (capture.points - np.asarray(nominal.pos)) @ yaw_rot(nominal.yaw_deg)
    m = cfg.search_margin
    with np.errstate(invalid="ignore"):
        return np.asarray(
            capture.valid
            & (np.abs(local[..., 0]) <= nominal.length / 2 + m)
            & (np.abs(local[..., 1]) <= nominal.width / 2 + m)
            & (np.abs(local[..., 2]) <= cfg.search_height)
        )


def _belt_surface(
    pts: np.ndarray, region: np.ndarray, cfg: RegistrationCfg, where: str
) -> tuple[Plane, np.ndarray, np.ndarray]:
    """The level plane in ``region`` of the points (H, W, 3) (RANSAC on a sample, refitted to
    its inliers, facing up), every pixel's distance (H, W) from it, and the pixels (H, W) of
    its large connected surfaces."""
    rng = np.random.default_rng(cfg.seed)
    cloud = pts[region]
    sample = cloud[rng.choice(len(cloud), min(len(cloud), cfg.ransac_points), replace=False)]
    try:
        plane, _ = ransac_plane(
            sample, cfg.plane_threshold, rng, up=UP, max_tilt_deg=cfg.max_tilt_deg
        )
    except ValueError as err:
        raise RegistrationError(f"no level plane {where} ({err}): {_HINT}") from None
    with np.errstate(invalid="ignore"):
        on = region & (np.abs(plane.distance(pts)) < cfg.plane_threshold)
    plane = fit_plane(pts[on][:: max(1, int(on.sum()) // 50000)])
    if plane.normal @ UP < 0:
        plane = Plane(-plane.normal, -plane.offset)
    dist = plane.distance(pts)
    with np.errstate(invalid="ignore"):
        on = region & (np.abs(dist) < cfg.surface_band)
    count, labels, stats, _ = cv2.connectedComponentsWithStats(on.astype(np.uint8), connectivity=8)
    if count < 2:
        raise RegistrationError(f"no level surface {where}: {_HINT}")
    areas = stats[1:, cv2.CC_STAT_AREA]
    on = np.isin(labels, 1 + np.flatnonzero(areas >= 0.05 * areas.max()))
    return plane, dist, on


def _edge_points(
    capture: RgbdCapture, plane: Plane, dist: np.ndarray, on: np.ndarray, cfg: RegistrationCfg
) -> np.ndarray:
    """The belt's edge points (N, 3) in the cell frame.

    An edge point is a surface pixel next to a pixel below the plane (or without depth); the
    edge is where the ray between the two pixel centres meets the plane.
    """
    with np.errstate(invalid="ignore"):
        beyond = ~capture.valid | (dist < -cfg.edge_drop)
    subpix = []
    for dv, du in ((0, 1), (0, -1), (1, 0), (-1, 0)):
        a = on[max(0, -dv) : on.shape[0] - max(0, dv), max(0, -du) : on.shape[1] - max(0, du)]
        b = beyond[max(0, dv) :, max(0, du) :][: a.shape[0], : a.shape[1]]
        v, u = np.nonzero(a & b)
        v, u = v + max(0, -dv), u + max(0, -du)
        subpix.append(np.stack([u + du / 2, v + dv / 2], axis=1))
    edges = capture.view.intersect_plane(np.concatenate(subpix).astype(np.float64), plane)
    return np.asarray(edges[np.all(np.isfinite(edges), axis=1)])


def _surface_extent(
    surf: np.ndarray, e1: np.ndarray, e2: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The 1st and 99th percentiles (2,) of surface points (N, 3), given from the in-plane
    frame's origin, along its axes ``e1`` and ``e2``."""
    s2 = np.stack([surf @ e1, surf @ e2], axis=1)
    return np.percentile(s2, 1, axis=0), np.percentile(s2, 99, axis=0)


def _outline_filled(
    capture: RgbdCapture, on: np.ndarray, pos: np.ndarray, yaw: float, half_l: float, half_w: float
) -> float:
    """The share of the belt outline at ``pos`` turned by ``yaw`` (degrees), as the head camera
    sees it, that the surface pixels ``on`` (H, W) fill."""
    outline = np.zeros(on.shape, np.uint8)
    corners = rect(pose_matrix(yaw_rot(yaw), pos), half_l, half_w, 0.0)
    px = capture.view.project(corners)
    if np.all(np.isfinite(px)):
        cv2.fillConvexPoly(outline, np.round(px).astype(np.int32), 1)
    return float(on[outline > 0].mean()) if outline.any() else 0.0


def _fit_outline(
    pts: np.ndarray, centre: np.ndarray, half_l: float, half_w: float
) -> tuple[np.ndarray, float, float, float, float, int]:
    """Fit a rectangle (half sizes ``half_l`` x ``half_w``) to 2-D edge points (N, 2).

    Long sides: a common direction (total least squares) and their offsets; ends: robust
    means. Where both of a pair are seen the centre is their midpoint, else the known size
    places it. Returns centre (2,), heading (rad), length and width seen (NaN if one of a
    pair is hidden), RMS residual and the number of edge points used.
    """
    c, theta = np.asarray(centre, dtype=np.float64).copy(), 0.0
    ends = np.array([half_l, half_l])
    length_seen = width_seen = math.nan
    rms, used = math.nan, 0
    for gate in (0.06, 0.03, 0.015, 0.008, 0.005, 0.005):
        d = np.array([math.cos(theta), math.sin(theta)])
        n = np.array([-d[1], d[0]])
        s, t = (pts - c) @ d, (pts - c) @ n
        inside_s = (s > -ends[1] + gate) & (s < ends[0] - gate)
        inside_t = np.abs(t) < half_w - gate
        sides = [inside_s & (np.abs(t - sign * half_w) < gate) for sign in (1, -1)]
        caps = [inside_t & (np.abs(s - sign * ends[i]) < gate) for i, sign in ((0, 1), (1, -1))]
        res = []
        if sum(int(k.sum()) >= 10 for k in sides) >= 1:
            groups = [pts[k] - pts[k].mean(axis=0) for k in sides if k.sum() >= 10]
            _, _, vt = np.linalg.svd(np.concatenate(groups), full_matrices=False)
            direction = vt[0] if vt[0] @ d > 0 else -vt[0]
            theta = math.atan2(direction[1], direction[0])
            d = direction
            n = np.array([-d[1], d[0]])
        t = (pts - c) @ n
        offs = [float(np.median(t[k])) if k.sum() >= 10 else math.nan for k in sides]
        if not math.isnan(offs[0]) and not math.isnan(offs[1]):
            shift_t, width_seen = (offs[0] + offs[1]) / 2, offs[0] - offs[1]
        elif not math.isnan(offs[0]):
            shift_t, width_seen = offs[0] - half_w, math.nan
        elif not math.isnan(offs[1]):
            shift_t, width_seen = offs[1] + half_w, math.nan
        else:
            raise RegistrationError(
                "no long edge of the belt was found: capture the head camera's depth with "
                "the belt's sides in view"
            )
        s = (pts - c) @ d
        stops = [float(np.median(s[k])) if k.sum() >= 10 else math.nan for k in caps]
        if not math.isnan(stops[0]) and not math.isnan(stops[1]):
            shift_s, length_seen = (stops[0] + stops[1]) / 2, stops[0] - stops[1]
            ends = np.array([length_seen / 2, length_seen / 2])
        elif not math.isnan(stops[0]):
            shift_s, length_seen = stops[0] - half_l, math.nan
        elif not math.isnan(stops[1]):
            shift_s, length_seen = stops[1] + half_l, math.nan
        else:
            shift_s = 0.0
        c = c + shift_s * d + shift_t * n
        s, t = (pts - c) @ d, (pts - c) @ n
        for k, sign in zip(sides, (1, -1), strict=True):
            res.append(t[k] - sign * (width_seen / 2 if not math.isnan(width_seen) else half_w))
        for k, sign, e in zip(caps, (1, -1), ends, strict=True):
            res.append(s[k] - sign * e)
        r = np.concatenate(res)
        rms, used = float(np.sqrt(np.mean(r**2))), int(r.size)
    return c, theta, length_seen, width_seen, rms, used
