"""Scene registration on the twin's renders, checked against its hidden truth (tests only),
plus the geometry underneath (ICP, RANSAC, resting poses) on synthetic points."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from r2s2r.ground.pointcloud import (
    CameraView,
    IcpModel,
    Plane,
    box_surface,
    icp,
    pose_matrix,
    primitive_surface,
    ransac_plane,
    transform,
)
from r2s2r.ground.register import (
    RegistrationError,
    RgbdCapture,
    SceneRegistration,
    draw_overlay,
)
from r2s2r.ground.register_belt import register_belt
from r2s2r.ground.register_objects import rest_on
from r2s2r.ground.scene import register_scene
from r2s2r.rig.twin import TwinRig
from r2s2r.sim.camera import Intrinsics
from r2s2r.spec import TaskSpec, WorldSpec
from r2s2r.spec.worlds import load_task, load_world, world_at


@dataclass
class TwinScene:
    """Captures of one twin cell and what the tests may know about it."""

    empty: RgbdCapture
    populated: RgbdCapture
    truth: WorldSpec
    nominal: WorldSpec
    object_name: str
    object_pose: np.ndarray


def capture_twin(seed: int, object_name: str) -> TwinScene:
    """Empty (belt stopped at its start) and populated head-camera RGB-D at full resolution."""
    nominal = load_world("nominal")
    head = nominal.cameras["head"]
    full = world_at((head.width, head.height), nominal)
    rig = TwinRig(seed=seed, world=full)
    truth = rig.reveal_truth().world
    # The head camera's calibration stands in for what camera calibration would give.
    view = CameraView.from_spec(truth.cameras["head"])
    rig.presenter.present(object_name)
    rig.conveyor.set_speed(0.0)
    cam = rig.cameras["head"]
    empty = RgbdCapture(cam.read().image, cam.read_depth().image, view)
    rig.conveyor.set_speed(0.08)
    rig.step(60)
    populated = RgbdCapture(cam.read().image, cam.read_depth().image, view)
    return TwinScene(empty, populated, truth, full, object_name, rig.object_pose())


@pytest.fixture(scope="module")
def scene() -> TwinScene:
    return capture_twin(0, "red_block")


@pytest.fixture(scope="module")
def registered(scene: TwinScene, task: TaskSpec) -> SceneRegistration:
    return register_scene(scene.empty, task, scene.nominal.layout, scene.populated)


def layout_errors_mm(reg: SceneRegistration, truth: WorldSpec) -> tuple[float, float]:
    """Belt and worst-bin position errors (mm) of the layout the registration writes."""
    layout = reg.update_layout(load_world("nominal").layout)
    belt = np.linalg.norm(np.subtract(layout.belt.pos, truth.layout.belt.pos)) * 1e3
    bins = max(
        np.linalg.norm(np.subtract(layout.bins[n].pos, b.pos)) * 1e3
        for n, b in truth.layout.bins.items()
    )
    return float(belt), float(bins)


def test_belt_and_bins_are_registered_within_targets(
    scene: TwinScene, registered: SceneRegistration
) -> None:
    belt_mm, bins_mm = layout_errors_mm(registered, scene.truth)
    nominal_mm = np.linalg.norm(
        np.subtract(scene.nominal.layout.belt.pos, scene.truth.layout.belt.pos)
    )
    assert nominal_mm * 1e3 > 20.0  # The drawn belt is far off, so the test can fail.
    assert belt_mm < 3.0
    assert bins_mm < 5.0
    assert abs(registered.belt.yaw_deg - scene.truth.layout.belt.yaw_deg) < 0.2
    assert registered.belt.plane_rms < 0.001 and registered.belt.edge_rms < 0.002
    assert all(b.residual < 0.002 for b in registered.bins.values())
    world = registered.update_world(scene.nominal)
    assert world.layout.belt.pos == pytest.approx(registered.belt.pos.tolist())
    assert world.cameras == scene.nominal.cameras


def test_object_pose_is_accepted_on_mask_iou(
    scene: TwinScene, registered: SceneRegistration
) -> None:
    assert [o.name for o in registered.objects] == [scene.object_name]
    obj = registered.objects[0]
    error_mm = np.linalg.norm(obj.pos - scene.object_pose[:3]) * 1e3
    print(f"{obj.name}: IoU {obj.iou:.3f}, position error {error_mm:.2f} mm")
    assert obj.accepted and obj.iou >= 0.6
    assert error_mm < 5.0
    # Stable contact: the cube's centre is its half-size above the registered belt.
    height = registered.belt.plane.distance(obj.pos)
    assert height == pytest.approx(obj.spec.size[2], abs=1e-6)
    summary = registered.summary()
    assert summary["objects"][0]["accepted"] is True  # type: ignore[index]


def test_overlay_draws_the_registered_models(
    scene: TwinScene, registered: SceneRegistration
) -> None:
    img = draw_overlay(scene.populated.rgb, registered)
    assert img.shape == scene.populated.rgb.shape and img.dtype == np.uint8
    changed = np.any(img != scene.populated.rgb, axis=2)
    assert 2000 < changed.sum() < 0.2 * changed.size


def test_bad_depth_is_refused_with_a_clear_error(scene: TwinScene, world: WorldSpec) -> None:
    view, rgb = scene.empty.view, scene.empty.rgb
    shape = scene.empty.depth.shape
    for blank in (np.zeros(shape, np.float32), np.full(shape, np.nan, np.float32)):
        with pytest.raises(RegistrationError, match="no valid pixels|almost no valid"):
            register_belt(RgbdCapture(rgb, blank, view), world.layout.belt)
    wall = np.full(shape, 0.5, np.float32)  # Something right in front of the lens.
    with pytest.raises(RegistrationError, match="belt"):
        register_belt(RgbdCapture(rgb, wall, view), world.layout.belt)
    floor = np.full(shape, 1.9, np.float32)  # A far, featureless surface.
    with pytest.raises(RegistrationError, match="capture"):
        register_belt(RgbdCapture(rgb, floor, view), world.layout.belt)
    noise = np.random.default_rng(0).uniform(0.5, 3.0, shape).astype(np.float32)
    with pytest.raises(RegistrationError, match="covered by its plane"):
        register_belt(RgbdCapture(rgb, noise, view), world.layout.belt)
    upside_down = np.ascontiguousarray(scene.empty.depth[::-1])  # Another scene's geometry.
    with pytest.raises(RegistrationError, match="belt"):
        register_belt(RgbdCapture(rgb, upside_down, view), world.layout.belt)


def test_shape_mismatches_are_named(scene: TwinScene) -> None:
    small = np.ones((256, 256), np.float32)
    with pytest.raises(RegistrationError, match=r"256x256.*1280x720"):
        RgbdCapture(np.zeros((256, 256, 3), np.uint8), small, scene.empty.view)
    with pytest.raises(RegistrationError, match="rgb"):
        RgbdCapture(np.zeros((10, 10, 3), np.uint8), scene.empty.depth, scene.empty.view)
    scaled = Intrinsics.from_spec(scene.truth.cameras["head"]).scaled(256, 256)
    view = CameraView(scaled, scene.empty.view.rotation, scene.empty.view.position)
    RgbdCapture(np.zeros((256, 256, 3), np.uint8), small, view)  # Matching: accepted.


def _visible(points: np.ndarray, normals: np.ndarray, eye: np.ndarray) -> np.ndarray:
    return np.einsum("ij,ij->i", normals, eye - points) > 0


@pytest.mark.parametrize("point_to_plane", [True, False])
def test_icp_recovers_a_known_transform(point_to_plane: bool) -> None:
    model = IcpModel(*box_surface((0.05, 0.03, 0.02), 0.003))
    truth = pose_matrix(
        Rotation.from_rotvec([0.1, -0.15, 0.25]).as_matrix(), np.array([0.3, -0.2, 0.8])
    )
    eye = np.array([0.8, -0.9, 1.6])  # Three faces in view: no sliding direction is free.
    pts, nrm = transform(truth, model.points), model.normals @ truth[:3, :3].T
    scene = pts[_visible(pts, nrm, eye)]
    init = truth.copy()
    init[:3, :3] = Rotation.from_rotvec([0.0, 0.05, -0.12]).as_matrix() @ truth[:3, :3]
    init[:3, 3] += [0.012, -0.008, 0.006]
    # Point-to-point converges slowly, so it keeps a wide gate throughout.
    gates = (0.03, 0.02, 0.01, 0.005) if point_to_plane else (0.03,)
    fit = icp(model, scene, init, gates, viewpoint=eye, point_to_plane=point_to_plane)
    assert np.abs(fit.pose[:3, 3] - truth[:3, 3]).max() < 2e-4
    angle = Rotation.from_matrix(fit.pose[:3, :3] @ truth[:3, :3].T).magnitude()
    assert np.degrees(angle) < 0.1
    assert fit.rmse < 1e-6 and fit.inlier_fraction > 0.9


def test_planar_icp_keeps_a_symmetric_model_in_place() -> None:
    # A cylinder's turn about its axis is unobservable; the solve must not drift along it.
    model = IcpModel(*primitive_surface("cylinder", (0.03, 0.05), 0.004))
    truth = pose_matrix(np.eye(3), np.array([-0.6, 0.0, 0.865]))
    eye = np.array([0.0, -0.37, 1.96])
    pts, nrm = transform(truth, model.points), model.normals @ truth[:3, :3].T
    init = truth.copy()
    init[:3, 3] += [0.004, -0.003, 0.0]
    fit = icp(model, pts[_visible(pts, nrm, eye)], init, 0.01, dof=("rz", "x", "y"), viewpoint=eye)
    assert np.abs(fit.pose[:3, 3] - truth[:3, 3]).max() < 5e-4


def test_ransac_plane_ignores_clutter() -> None:
    rng = np.random.default_rng(1)
    plane_pts = np.column_stack([rng.uniform(-1, 1, (3000, 2)), np.full(3000, 0.8)])
    clutter = rng.uniform([-1, -1, 0.0], [1, 1, 1.5], (2000, 3))
    plane, inliers = ransac_plane(
        np.concatenate([plane_pts, clutter]), 0.002, rng, up=np.array([0.0, 0.0, 1.0])
    )
    assert plane.normal[2] > 0.9999 and plane.offset == pytest.approx(-0.8, abs=1e-6)
    assert inliers[:3000].all()


def test_rest_on_turns_a_stable_face_down(task: TaskSpec) -> None:
    brick = next(o for o in task.objects if o.name == "yellow_brick")
    plane = Plane(np.array([0.0, 0.0, 1.0]), -0.815)
    tilted = Rotation.from_euler("xyz", [8, -5, 30], degrees=True).as_matrix()
    pose = rest_on(brick, pose_matrix(tilted, np.array([0.1, 0.0, 0.86])), plane)
    corners = transform(pose, box_surface(brick.size, 1.0)[0])
    assert corners[:, 2].min() == pytest.approx(0.815, abs=1e-9)
    assert pose[:3, 2] @ plane.normal == pytest.approx(1.0)
    assert pose[:3, 3][:2] == pytest.approx([0.1, 0.0])


@pytest.mark.slow
@pytest.mark.parametrize(("seed", "name"), [(1, "green_can"), (2, "teal_prism"), (3, "brown_slab")])
def test_registration_meets_targets_on_other_seeds(seed: int, name: str) -> None:
    task = load_task("pick_sort")
    s = capture_twin(seed, name)
    reg = register_scene(s.empty, task, s.nominal.layout, s.populated)
    belt_mm, bins_mm = layout_errors_mm(reg, s.truth)
    assert belt_mm < 3.0 and bins_mm < 5.0
    accepted = [o for o in reg.objects if o.accepted]
    assert [o.name for o in accepted] == [name]
    assert np.linalg.norm(accepted[0].pos - s.object_pose[:3]) < 0.006
