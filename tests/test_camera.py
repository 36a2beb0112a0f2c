"""Tests for camera models and fisheye emulation by remapping wide MuJoCo renders."""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")

import cv2
import mujoco
import numpy as np
import pytest

try:
    from r2s2r.sim import camera
except ModuleNotFoundError:
    # The package is not installed; fall back to the source tree.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "source"))
    from r2s2r.sim import camera

Intrinsics = camera.Intrinsics
FisheyeRemap = camera.FisheyeRemap
MJ_FROM_CV = camera.MJ_FROM_CV
plan_wide_render = camera.plan_wide_render
points_world_to_cv = camera.points_world_to_cv

FISHEYE_NATIVE = Intrinsics(
    "fisheye", 640, 480, 229.0, 229.0, 321.3, 238.2, (-0.02, 0.005, -0.001, 0.0002)
)
PINHOLE_NATIVE = Intrinsics(
    "pinhole", 640, 480, 400.0, 400.0, 324.0, 236.0, (-0.1, 0.02, 0.001, -0.0015, -0.002)
)

# Marker colours (RGB in {0, 1}); each must be unique within a scene.
COLOURS = [(1, 0, 0), (0, 1, 0), (0, 0, 1), (1, 1, 0), (0, 1, 1), (1, 0, 1), (1, 1, 1)]


def _marker_points(spec: Sequence[tuple[float, float, float]]) -> np.ndarray:
    """Turn (off-axis angle deg, azimuth deg, distance m) triples into OpenCV-frame points."""
    pts = []
    for theta_deg, phi_deg, dist in spec:
        th, ph = math.radians(theta_deg), math.radians(phi_deg)
        pts.append(
            dist
            * np.array([math.sin(th) * math.cos(ph), math.sin(th) * math.sin(ph), math.cos(th)])
        )
    return np.array(pts)


def _build_scene(points_world: np.ndarray, radii: np.ndarray) -> tuple[mujoco.MjModel, int]:
    """Build a dark scene with a camera and emissive marker spheres at world positions."""
    materials = "\n".join(
        f'<material name="c{i}" rgba="{c[0]} {c[1]} {c[2]} 1" emission="1" specular="0"/>'
        for i, c in enumerate(COLOURS)
    )
    geoms = "\n".join(
        f'<geom type="sphere" size="{r:.6f}" pos="{p[0]:.9f} {p[1]:.9f} {p[2]:.9f}" '
        f'material="c{i}" contype="0" conaffinity="0"/>'
        for i, (p, r) in enumerate(zip(points_world, radii, strict=True))
    )
    xml = f"""
    <mujoco>
      <visual>
        <global offwidth="1024" offheight="1024"/>
        <quality shadowsize="0" offsamples="0"/>
        <headlight ambient="0 0 0" diffuse="0 0 0" specular="0 0 0"/>
      </visual>
      <asset>
        {materials}
      </asset>
      <worldbody>
        <camera name="cam" pos="0.1 -0.2 0.5" xyaxes="0.3 -1 0 0.1 0.2 1"/>
        {geoms}
      </worldbody>
    </mujoco>
    """
    model = mujoco.MjModel.from_xml_string(xml)
    return model, mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, "cam")


def _render_markers(
    intr_out: Intrinsics, spec: Sequence[tuple[float, float, float]], ang_radius: float
) -> tuple[np.ndarray, np.ndarray]:
    """Render markers through the wide-render remap; return the image and expected pixels."""
    points_cv = _marker_points(spec)
    radii = ang_radius * np.linalg.norm(points_cv, axis=1)
    # Compile once without markers to read the camera pose, then place markers in the world.
    model, cam_id = _build_scene(np.zeros((0, 3)), np.zeros(0))
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    rot_cv = data.cam_xmat[cam_id].reshape(3, 3) @ MJ_FROM_CV
    world = data.cam_xpos[cam_id] + points_cv @ rot_cv.T
    model, cam_id = _build_scene(world, radii)
    data = mujoco.MjData(model)
    wide = plan_wide_render(intr_out)
    model.cam_fovy[cam_id] = wide.fovy_deg
    mujoco.mj_forward(model, data)
    renderer = mujoco.Renderer(model, wide.height, wide.width)
    try:
        renderer.update_scene(data, camera=cam_id)
        wide_img = renderer.render()
    finally:
        renderer.close()
    out = FisheyeRemap(intr_out, wide)(wide_img)
    pts = points_world_to_cv(data.geom_xpos, data.cam_xpos[cam_id], data.cam_xmat[cam_id])
    np.testing.assert_allclose(pts, points_cv, atol=1e-6)
    return out, intr_out.project(pts)


def _centroid(img: np.ndarray, colour: tuple[int, int, int]) -> tuple[np.ndarray, int]:
    """Return the colour-weighted centroid (u, v) of a marker and its pixel count."""
    f = img.astype(np.float64)
    on = [c for c in range(3) if colour[c]]
    off = [c for c in range(3) if not colour[c]]
    w = f[..., on].min(axis=-1) - (f[..., off].max(axis=-1) if off else 0.0)
    w = np.where(w > 20.0, w, 0.0)
    vs, us = np.nonzero(w)
    weights = w[vs, us]
    return np.array([us @ weights, vs @ weights]) / weights.sum(), len(us)


def _check_markers(
    intr_out: Intrinsics, spec: Sequence[tuple[float, float, float]], ang_radius: float
) -> None:
    """Assert every rendered marker centroid lies within 1 px of its model projection."""
    img, expected = _render_markers(intr_out, spec, ang_radius)
    errors = []
    for colour, uv in zip(COLOURS, expected, strict=False):
        assert 6 <= uv[0] <= intr_out.width - 7 and 6 <= uv[1] <= intr_out.height - 7, uv
        centroid, count = _centroid(img, colour)
        assert count >= 12, (colour, count)
        errors.append(float(np.linalg.norm(centroid - uv)))
    print(f"{intr_out.model} marker errors (px): {np.round(errors, 3)}")
    # Stricter than the 1 px acceptance bound: a half-pixel convention slip gives ~0.6 px here.
    assert max(errors) < 0.5, errors


def test_fisheye_render_matches_projection() -> None:
    """Markers up to 70 deg off axis land where cv2.fisheye.projectPoints puts them."""
    intr = FISHEYE_NATIVE.scaled(256, 256)
    spec = [
        (0, 0, 1.0),
        (25, 45, 0.8),
        (45, 200, 1.5),
        (60, 330, 1.2),
        (70, 175, 0.7),
        (55, 100, 2.0),
        (68, 15, 1.0),
    ]
    _check_markers(intr, spec, ang_radius=0.035)


def test_distorted_pinhole_render_matches_projection() -> None:
    """Markers seen by a distorted pinhole camera land where cv2.projectPoints puts them."""
    intr = PINHOLE_NATIVE.scaled(256, 256)
    spec = [
        (0, 0, 1.0),
        (30, 0, 0.8),
        (33, 180, 1.5),
        (25, 60, 1.2),
        (24, 250, 0.7),
        (28, 320, 2.0),
        (22, 130, 1.0),
    ]
    _check_markers(intr, spec, ang_radius=0.025)


@pytest.mark.parametrize("native", [FISHEYE_NATIVE, PINHOLE_NATIVE])
def test_remap_maps_round_trip(native: Intrinsics) -> None:
    """Each valid map entry, taken back through the wide pinhole, reprojects onto its pixel."""
    intr = native.scaled(256, 256)
    wide = plan_wide_render(intr)
    remap = FisheyeRemap(intr, wide)
    f, cxw, cyw = wide.focal, (wide.width - 1) / 2, (wide.height - 1) / 2
    rays = np.stack(
        [(remap.map_x - cxw) / f, (remap.map_y - cyw) / f, np.ones(remap.shape)], axis=-1
    )
    proj = intr.project(rays[remap.valid]).reshape(-1, 2)
    vs, us = np.nonzero(remap.valid)
    err = np.linalg.norm(proj - np.stack([us, vs], axis=1), axis=1)
    assert err.max() < 0.05, err.max()
    # Every pixel whose ray is comfortably inside the field-of-view cap must be valid.
    theta = np.arctan(np.linalg.norm(rays[..., :2], axis=-1))
    assert remap.valid.mean() > 0.7
    assert np.all(~remap.valid | (theta < math.radians(wide.max_fov_deg / 2)))


def test_fisheye_undistort_converges_at_wide_angles() -> None:
    """Undistortion inverts cv2.fisheye.projectPoints up to 74 deg off axis."""
    intr = FISHEYE_NATIVE
    theta = np.radians(np.linspace(0.0, 74.0, 75))
    phi = np.radians(np.linspace(0.0, 360.0, 75, endpoint=False))
    pts = np.stack([np.sin(theta) * np.cos(phi), np.sin(theta) * np.sin(phi), np.cos(theta)], 1)
    zero = np.zeros(3)
    px, _ = cv2.fisheye.projectPoints(pts.reshape(-1, 1, 3), zero, zero, intr.K(), intr.D())
    rays = intr.undistort_pixels(px.reshape(-1, 2))
    np.testing.assert_allclose(rays, pts[:, :2] / pts[:, 2:], atol=1e-9)


@pytest.mark.parametrize("native", [FISHEYE_NATIVE, PINHOLE_NATIVE])
@pytest.mark.parametrize("size", [(256, 256), (320, 200), (1280, 960)])
def test_scaled_is_consistent(native: Intrinsics, size: tuple[int, int]) -> None:
    """Projecting with scaled intrinsics equals scaling pixel-centre coordinates."""
    rng = np.random.default_rng(0)
    pts = rng.uniform([-0.5, -0.4, 0.5], [0.5, 0.4, 1.5], size=(50, 3))
    scaled = native.scaled(*size)
    s = np.array([size[0] / native.width, size[1] / native.height])
    np.testing.assert_allclose(
        scaled.project(pts), (native.project(pts) + 0.5) * s - 0.5, atol=1e-9
    )
    assert (scaled.width, scaled.height) == size


def test_project_and_helpers() -> None:
    """Points behind the camera give NaN; the ideal pinhole flag and K are correct."""
    ideal = Intrinsics("pinhole", 64, 48, 50.0, 50.0, 31.5, 23.5)
    assert ideal.is_ideal_pinhole and not FISHEYE_NATIVE.is_ideal_pinhole
    assert not PINHOLE_NATIVE.is_ideal_pinhole
    uv = ideal.project(np.array([[0.0, 0.0, 1.0], [0.0, 0.0, -1.0]]))
    np.testing.assert_allclose(uv[0], [31.5, 23.5])
    assert np.all(np.isnan(uv[1]))
    np.testing.assert_allclose(ideal.K() @ [0.1, 0.2, 1.0], [36.5, 33.5, 1.0])


def test_remap_depth_keeps_z() -> None:
    """A constant-z wide depth map stays constant on valid pixels and is 0 elsewhere."""
    intr = FISHEYE_NATIVE.scaled(128, 128)
    remap = FisheyeRemap(intr, plan_wide_render(intr))
    depth = np.full((remap.wide.height, remap.wide.width), 2.5, dtype=np.float32)
    for linear in (False, True):
        out = remap.remap_depth(depth, linear=linear)
        assert out.shape == remap.shape
        np.testing.assert_allclose(out[remap.valid], 2.5, rtol=1e-6)
        assert np.all(out[~remap.valid] == 0.0)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"dist": (0.1, 0.0, 0.0)}, "dist"),
        ({"dist": ()}, "dist"),
        ({"fx": 0.0}, "fx"),
        ({"fy": -1.0}, "fy"),
        ({"width": 0}, "width"),
        ({"height": -5}, "height"),
        ({"cx": float("nan")}, "cx"),
        ({"model": "orthographic"}, "model"),
    ],
)
def test_invalid_intrinsics_raise(kwargs: dict[str, object], field: str) -> None:
    """Invalid fields raise ValueError naming the field."""
    args: dict[str, object] = {
        "model": "fisheye",
        "width": 64,
        "height": 48,
        "fx": 30.0,
        "fy": 30.0,
        "cx": 31.5,
        "cy": 23.5,
        "dist": (0.0,) * 4,
    }
    args.update(kwargs)
    with pytest.raises(ValueError, match=field):
        Intrinsics(**args)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="dist"):
        Intrinsics("pinhole", 64, 48, 30.0, 30.0, 31.5, 23.5, (0.0,) * 3)


def test_plan_respects_density_and_size_cap() -> None:
    """The plan meets the centre density when it fits and shrinks to max_size otherwise."""
    intr = FISHEYE_NATIVE.scaled(256, 256)
    wide = plan_wide_render(intr, oversample=1.0)
    assert wide.focal >= max(intr.fx, intr.fy) - 1e-9
    assert wide.width % 2 == 0 and wide.height % 2 == 0
    capped = plan_wide_render(intr, oversample=2.0, max_size=300, square=True)
    assert capped.width == capped.height <= 300
    remap = FisheyeRemap(intr, capped)
    assert remap.valid.sum() == FisheyeRemap(intr, wide).valid.sum()
    with pytest.raises(ValueError, match="max_fov_deg"):
        plan_wide_render(intr, max_fov_deg=180.0)


SMALL_PINHOLE = Intrinsics("pinhole", 64, 48, 50.0, 50.0, 31.5, 23.5)


@pytest.mark.parametrize(
    ("native", "max_fov_deg"),
    [(FISHEYE_NATIVE, 150.0), (PINHOLE_NATIVE, 180.0), (SMALL_PINHOLE, 180.0)],
)
def test_pixels_per_radian_bounds_how_far_a_turn_moves_a_point(
    native: Intrinsics, max_fov_deg: float
) -> None:
    """No ray within the field of view, turned by a small angle in any direction, moves its
    image point by more than ``pixels_per_radian`` times the angle; some turn comes close.
    An ideal pinhole's is f / cos^2 of its widest angle (one pixel in from its corners)."""
    intr = native.scaled(96, 72) if native.width > 96 else native
    per_radian = camera.pixels_per_radian(intr, max_fov_deg)
    rng = np.random.default_rng(0)
    pixels = rng.uniform([1, 1], [intr.width - 2, intr.height - 2], (4000, 2))
    rays = np.concatenate([intr.undistort_pixels(pixels), np.ones((len(pixels), 1))], axis=1)
    rays /= np.linalg.norm(rays, axis=1, keepdims=True)
    keep = rays[:, 2] > math.cos(math.radians(max_fov_deg / 2 - 1))
    back = intr.project(rays)
    keep &= np.linalg.norm(back - pixels, axis=1) < 1e-6
    rays, pixels = rays[keep], pixels[keep]
    angle = 1e-4
    side = rng.normal(size=rays.shape)
    side -= np.einsum("ij,ij->i", side, rays)[:, None] * rays
    side /= np.linalg.norm(side, axis=1, keepdims=True)
    turned = rays * math.cos(angle) + side * math.sin(angle)
    moved = np.linalg.norm(intr.project(turned) - pixels, axis=1) / angle
    assert moved.max() <= per_radian * 1.01
    assert moved.max() >= per_radian * 0.8
    if intr.is_ideal_pinhole:
        corner = np.array([intr.width - 2 - intr.cx, intr.height - 2 - intr.cy]) / intr.fx
        assert per_radian == pytest.approx(intr.fx * (1 + corner @ corner), rel=0.02)
