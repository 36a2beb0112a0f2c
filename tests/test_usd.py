"""The cell's USD export, opened with usd-core: every body, joint and camera with the values
of the compiled scene and its WorldSpec."""

from __future__ import annotations

import math

import mujoco
import numpy as np
import pytest

pxr = pytest.importorskip("pxr", reason="usd-core is the 'usd' extra (in dev)")
from pxr import Usd, UsdGeom, UsdPhysics  # noqa: E402

from r2s2r.geometry.rotations import quat_to_mat  # noqa: E402
from r2s2r.sim.scene import build_scene  # noqa: E402
from r2s2r.sim.usd import NAME_KEY, USD_FROM_CV, export_usd  # noqa: E402
from r2s2r.spec.worlds import load_task, load_world  # noqa: E402


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    world = load_world("nominal")
    # A distorted wrist camera and an off-centre head camera, so the values are not defaults.
    cams = dict(world.cameras)
    cams["left_wrist"] = cams["left_wrist"].replace(dist=(0.05, -0.01, 0.002, -0.0004), fx=251.5)
    cams["head"] = cams["head"].replace(cx=cams["head"].cx + 7.0)
    world = world.replace(cameras=cams)
    scene = build_scene(load_task("pick_sort"), world)
    path = export_usd(scene, tmp_path_factory.mktemp("usd") / "cell.usda")
    stage = Usd.Stage.Open(str(path))
    by_name = {}
    for prim in stage.Traverse():
        name = prim.GetCustomDataByKey(NAME_KEY)
        if name is not None:
            by_name.setdefault(prim.GetTypeName() or "Xform", {})[name] = prim
    return scene, stage, by_name


def _world_pose(prim) -> tuple[np.ndarray, np.ndarray]:
    m = np.array(UsdGeom.Xformable(prim).ComputeLocalToWorldTransform(Usd.TimeCode.Default()))
    # USD matrices are row-vector convention: the transpose of the rotation, translation last.
    return m[3, :3], m[:3, :3].T


def test_stage_units_and_physics_scene(exported):
    scene, stage, _ = exported
    assert UsdGeom.GetStageUpAxis(stage) == UsdGeom.Tokens.z
    assert UsdGeom.GetStageMetersPerUnit(stage) == 1.0
    phys = UsdPhysics.Scene(stage.GetPrimAtPath("/World/PhysicsScene"))
    assert phys.GetGravityMagnitudeAttr().Get() == pytest.approx(9.81)
    assert phys.GetPrim().GetAttribute("mjc:option:timestep").Get() == scene.world.timestep


def test_every_body_is_a_rigid_body_with_the_model_mass_and_pose(exported):
    scene, _, by_name = exported
    model = scene.model
    data = mujoco.MjData(model)
    mujoco.mj_kinematics(model, data)
    bodies = by_name["Xform"]
    for b in range(1, model.nbody):
        name = model.body(b).name
        prim = bodies[name]
        assert prim.HasAPI(UsdPhysics.RigidBodyAPI), name
        mass = UsdPhysics.MassAPI(prim)
        assert mass.GetMassAttr().Get() == pytest.approx(model.body_mass[b], rel=1e-6), name
        np.testing.assert_allclose(mass.GetDiagonalInertiaAttr().Get(), model.body_inertia[b])
        pos, rot = _world_pose(prim)
        np.testing.assert_allclose(pos, data.xpos[b], atol=1e-9, err_msg=name)
        np.testing.assert_allclose(rot, data.xmat[b].reshape(3, 3), atol=1e-9, err_msg=name)
    # The objects float (free joints: no joint prim); the arm bases root articulations.
    for obj in scene.task.all_objects:
        assert f"obj:{obj.name}" not in by_name.get("PhysicsRevoluteJoint", {})
    assert bodies["left_base"].HasAPI(UsdPhysics.ArticulationRootAPI)


def test_every_collision_geom_has_its_shape_and_size(exported):
    scene, _, by_name = exported
    model = scene.model
    shapes = {
        k: v
        for kind in ("Cube", "Sphere", "Capsule", "Cylinder", "Mesh")
        for k, v in by_name.get(kind, {}).items()
    }
    for g in range(model.ngeom):
        name = model.geom(g).name
        if not name or not (model.geom_contype[g] or model.geom_conaffinity[g]):
            continue
        prim = shapes[name]
        assert prim.HasAPI(UsdPhysics.CollisionAPI), name
        size = model.geom_size[g]
        if model.geom_type[g] == mujoco.mjtGeom.mjGEOM_SPHERE:
            assert prim.GetAttribute("radius").Get() == pytest.approx(size[0])
        if model.geom_type[g] in (mujoco.mjtGeom.mjGEOM_CAPSULE, mujoco.mjtGeom.mjGEOM_CYLINDER):
            assert prim.GetAttribute("radius").Get() == pytest.approx(size[0])
            assert prim.GetAttribute("height").Get() == pytest.approx(2 * size[1])
        if model.geom_type[g] == mujoco.mjtGeom.mjGEOM_ELLIPSOID:
            # A mesh collided as its convex hull, spanning the semi-axes exactly.
            points = np.array(prim.GetAttribute("points").Get())
            np.testing.assert_allclose(points.max(axis=0), size, rtol=1e-6)
            np.testing.assert_allclose(points.min(axis=0), -size, rtol=1e-6)
            approx = UsdPhysics.MeshCollisionAPI(prim).GetApproximationAttr().Get()
            assert approx == UsdPhysics.Tokens.convexHull
        assert tuple(prim.GetAttribute("mjc:friction").Get()) == pytest.approx(
            model.geom_friction[g]
        )


def test_every_joint_with_its_bodies_axis_and_limits(exported):
    scene, stage, by_name = exported
    model = scene.model
    joints = {**by_name.get("PhysicsRevoluteJoint", {}), **by_name.get("PhysicsPrismaticJoint", {})}
    hinge_slide = [
        j
        for j in range(model.njnt)
        if int(model.jnt_type[j])
        in (int(mujoco.mjtJoint.mjJNT_HINGE), int(mujoco.mjtJoint.mjJNT_SLIDE))
    ]
    assert len(joints) == len(hinge_slide) > 50
    data = mujoco.MjData(model)
    mujoco.mj_kinematics(model, data)
    for j in hinge_slide:
        name = model.joint(j).name
        joint = UsdPhysics.Joint(joints[name])
        child = model.jnt_bodyid[j]
        body1 = stage.GetPrimAtPath(joint.GetBody1Rel().GetTargets()[0])
        body0 = stage.GetPrimAtPath(joint.GetBody0Rel().GetTargets()[0])
        assert body1.GetCustomDataByKey(NAME_KEY) == model.body(child).name
        parent = model.body_parentid[child]
        assert body0.GetCustomDataByKey(NAME_KEY) == (model.body(parent).name or "world")
        revolute = model.jnt_type[j] == mujoco.mjtJoint.mjJNT_HINGE
        lo, hi = model.jnt_range[j]
        scale = math.degrees(1.0) if revolute else 1.0
        lower = joint.GetPrim().GetAttribute("physics:lowerLimit")
        upper = joint.GetPrim().GetAttribute("physics:upperLimit")
        if model.jnt_limited[j]:
            assert lower.Get() == pytest.approx(lo * scale), name
            assert upper.Get() == pytest.approx(hi * scale), name
        else:
            assert not lower.HasAuthoredValue() and not upper.HasAuthoredValue(), name
        # The joint frame's X axis, seen from the child, is the MuJoCo joint axis.
        q = joint.GetLocalRot1Attr().Get()
        rot1 = quat_to_mat(np.array([q.GetReal(), *q.GetImaginary()]))
        np.testing.assert_allclose(rot1[:, 0], model.jnt_axis[j], atol=1e-6, err_msg=name)
        # Both sides put the anchor at the same world point.
        p0, r0 = _world_pose(body0) if parent else (np.zeros(3), np.eye(3))
        p1, r1 = _world_pose(body1)
        a0 = p0 + r0 @ np.array(joint.GetLocalPos0Attr().Get())
        a1 = p1 + r1 @ np.array(joint.GetLocalPos1Attr().Get())
        np.testing.assert_allclose(a0, a1, atol=1e-6, err_msg=name)
        dof = model.jnt_dofadr[j]
        assert joints[name].GetAttribute("mjc:armature").Get() == pytest.approx(
            model.dof_armature[dof]
        )


def test_every_camera_has_the_worldspec_intrinsics_and_pose(exported):
    scene, _, by_name = exported
    model = scene.model
    data = mujoco.MjData(model)
    mujoco.mj_kinematics(model, data)
    cameras = by_name["Camera"]
    assert set(cameras) == set(scene.world.cameras)
    for name, cam in scene.world.cameras.items():
        prim = cameras[name]
        model_name = "opencvFisheye" if cam.model == "fisheye" else "opencvPinhole"
        prefix = f"omni:lensdistortion:{model_name}"
        assert prim.GetAttribute("omni:lensdistortion:model").Get() == model_name
        for key in ("fx", "fy", "cx", "cy"):
            assert prim.GetAttribute(f"{prefix}:{key}").Get() == pytest.approx(getattr(cam, key))
        assert tuple(prim.GetAttribute(f"{prefix}:imageSize").Get()) == (cam.width, cam.height)
        keys = (
            ("k1", "k2", "k3", "k4") if cam.model == "fisheye" else ("k1", "k2", "p1", "p2", "k3")
        )
        got = [prim.GetAttribute(f"{prefix}:{k}").Get() for k in keys]
        want = list(cam.dist) + [0.0] * (len(keys) - len(cam.dist))
        assert got == pytest.approx(want, abs=1e-7)
        usd_cam = UsdGeom.Camera(prim).GetCamera()
        fov = 2 * math.atan(usd_cam.horizontalAperture / (2 * usd_cam.focalLength))
        assert fov == pytest.approx(2 * math.atan(cam.width / (cam.fx + cam.fy)), rel=1e-6)
        # Pose: the OpenCV camera frame in the mount frame, USD's camera axes turned to it.
        pos, rot = _world_pose(prim)
        if cam.mount == "world":
            m_pos, m_rot = np.zeros(3), np.eye(3)
        else:
            b = model.body(cam.mount).id
            m_pos, m_rot = data.xpos[b], data.xmat[b].reshape(3, 3)
        want_rot = m_rot @ quat_to_mat(np.array(cam.pose.quat))
        np.testing.assert_allclose(pos, m_pos + m_rot @ np.array(cam.pose.pos), atol=1e-9)
        np.testing.assert_allclose(rot @ USD_FROM_CV, want_rot, atol=1e-9, err_msg=name)
    fisheye = cameras["left_wrist"]
    # An API schema usd-core does not know stays in the prim's metadata, as Kit reads it.
    assert "OmniLensDistortionOpenCvFisheyeAPI" in fisheye.GetMetadata(
        "apiSchemas"
    ).ApplyOperations([])


def test_usd_cores_own_validators_find_no_error(exported):
    """Every validator usd-core registers (UsdPhysics' collider, rigid body, joint and
    articulation checkers, UsdGeom's and UsdShade's) on the exported stage: no error."""
    from pxr import UsdValidation

    _, stage, _ = exported
    registry = UsdValidation.ValidationRegistry()
    validators = registry.GetOrLoadAllValidators()
    names = {v.GetMetadata().name for v in validators}
    assert "usdPhysicsValidators:ColliderChecker" in names
    errors = UsdValidation.ValidationContext(validators).Validate(stage)
    found = [
        (e.GetName(), e.GetMessage())
        for e in errors
        if e.GetType() == UsdValidation.ValidationErrorType.Error
    ]
    assert not found, found
