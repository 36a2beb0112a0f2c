"""The cell exported to USD (usd-core's ``pxr``): the scene Isaac Sim renders and Newton reads.

Everything comes from the compiled scene (``build_scene``) and its WorldSpec, so the USD file
holds the same numbers as the MuJoCo cell:

- every body as a rigid body (``UsdPhysics.RigidBodyAPI`` + ``MassAPI``: mass, centre of mass,
  principal inertia and axes), flat under ``/World`` at its pose in the model's reference
  configuration (qpos0), with its collision geoms (``CollisionAPI``) and visual-only geoms;
- every hinge and slide joint as a ``UsdPhysics`` revolute or prismatic joint between its
  parent and child bodies (limits; armature, damping, stiffness and spring reference in
  MuJoCo's ``mjc:`` attributes, which Newton's USD importer reads); free joints are
  floating rigid bodies, and each arm's base carries ``ArticulationRootAPI``;
- the three cameras as ``UsdGeom.Camera`` prims at the WorldSpec's poses (the wrist cameras
  under their flange's body), with the WorldSpec's intrinsics in the lens-distortion API
  that Isaac Sim's RTX renderer and Isaac Lab's camera read (``omni:lensdistortion:*``,
  ``opencvPinhole`` or ``opencvFisheye``: the same OpenCV models the calibration uses, so
  the fisheye wrist cameras are not approximated there);
- the physics scene: gravity and the timestep (``mjc:option:timestep``).

What is approximated: the plain USD camera projection (focal length and apertures, which
renderers that ignore the lens-distortion API use) has square pixels and a centred principal
point (the mean of fx, fy; cx, cy are in the distortion API only). Actuators, the
Cartesian controller and the belt's velocity drive are not exported (the env keeps them in
the MuJoCo model it simulates), nor are textures. An ellipsoid is a triangle mesh
(``ELLIPSOID_SLICES`` x ``ELLIPSOID_STACKS``) collided as its convex hull: UsdPhysics allows
no non-uniformly scaled sphere collider, and usd-core's validators find no error in the stage.

Each prim keeps its MuJoCo name in ``customData["r2s2r:name"]`` (USD prim names cannot hold
``:``, and a body, its geom and its joint may share one): bodies are ``/World/<body>``, their
geoms ``geom_<name>``, joints ``joint_<name>`` and cameras ``camera_<name>`` under them.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import mujoco
import numpy as np

from r2s2r.geometry.rotations import mat_to_quat, quat_conj, quat_mul, quat_to_mat
from r2s2r.sim.lean import ellipsoid_mesh
from r2s2r.sim.scene import Scene
from r2s2r.spec.world import CameraSpec

try:
    from pxr import Gf, Sdf, Usd, UsdGeom, UsdPhysics
except ImportError as _err:
    from r2s2r.optional import missing_extra

    raise missing_extra(_err, "usd") from _err

NAME_KEY = "r2s2r:name"
# The ellipsoid collider's tessellation (its hull is within 2 % of the true surface).
ELLIPSOID_SLICES, ELLIPSOID_STACKS = 24, 12
# USD cameras look along -Z with +Y up; OpenCV cameras along +Z with +Y down.
USD_FROM_CV = np.diag([1.0, -1.0, -1.0])
# The pixel pitch (mm) that turns pixel intrinsics into USD focal length and apertures.
PIXEL_MM = 0.003
_FISHEYE_MAX_FOV = 200.0


def _gf_quat(q: np.ndarray) -> Gf.Quatf:
    return Gf.Quatf(float(q[0]), Gf.Vec3f(float(q[1]), float(q[2]), float(q[3])))


def _gf_quatd(q: np.ndarray) -> Gf.Quatd:
    return Gf.Quatd(float(q[0]), Gf.Vec3d(float(q[1]), float(q[2]), float(q[3])))


def _vec3f(v: Any) -> Gf.Vec3f:
    return Gf.Vec3f(*(float(x) for x in v))


def prim_name(name: str, fallback: str) -> str:
    """A valid USD prim name for a MuJoCo name (``obj:green_can`` -> ``obj_green_can``)."""
    from pxr import Tf

    return Tf.MakeValidIdentifier(name) if name else fallback


def _xform(stage: Usd.Stage, path: str, pos: Any, quat: Any, name: str) -> UsdGeom.Xform:
    xf = UsdGeom.Xform.Define(stage, path)
    xf.AddTranslateOp(UsdGeom.XformOp.PrecisionDouble).Set(Gf.Vec3d(*(float(x) for x in pos)))
    xf.AddOrientOp(UsdGeom.XformOp.PrecisionDouble).Set(_gf_quatd(np.asarray(quat)))
    xf.GetPrim().SetCustomDataByKey(NAME_KEY, name)
    return xf


def export_usd(scene: Scene, path: str | Path) -> Path:
    """Write ``scene`` (bodies, joints, geoms, cameras, physics scene) to ``path`` (.usda or
    .usd); returns the path."""
    path = Path(path)
    if path.suffix not in (".usd", ".usda", ".usdc"):
        raise ValueError(f"USD export: {path} must end in .usd, .usda or .usdc")
    path.parent.mkdir(parents=True, exist_ok=True)
    model = scene.model
    data = mujoco.MjData(model)
    mujoco.mj_kinematics(model, data)
    stage = Usd.Stage.CreateNew(str(path))
    UsdGeom.SetStageUpAxis(stage, UsdGeom.Tokens.z)
    UsdGeom.SetStageMetersPerUnit(stage, 1.0)
    UsdPhysics.SetStageKilogramsPerUnit(stage, 1.0)
    world = UsdGeom.Xform.Define(stage, "/World")
    stage.SetDefaultPrim(world.GetPrim())
    _physics_scene(stage, model)
    body_paths = _bodies(stage, model, data)
    _joints(stage, model, data, body_paths)
    _cameras(stage, scene, body_paths)
    stage.GetRootLayer().Save()
    return path


def _physics_scene(stage: Usd.Stage, model: mujoco.MjModel) -> None:
    phys = UsdPhysics.Scene.Define(stage, "/World/PhysicsScene")
    g = np.asarray(model.opt.gravity, dtype=float)
    norm = float(np.linalg.norm(g))
    phys.CreateGravityDirectionAttr(_vec3f(g / norm if norm else [0.0, 0.0, -1.0]))
    phys.CreateGravityMagnitudeAttr(norm)
    prim = phys.GetPrim()
    prim.CreateAttribute("mjc:option:timestep", Sdf.ValueTypeNames.Double).Set(
        float(model.opt.timestep)
    )


def _bodies(stage: Usd.Stage, model: mujoco.MjModel, data: mujoco.MjData) -> dict[int, str]:
    """One rigid body prim per body (static geoms of the world body under ``/World/static``);
    returns body id -> prim path."""
    paths: dict[int, str] = {0: "/World/static"}
    _xform(stage, "/World/static", (0, 0, 0), (1, 0, 0, 0), "world")
    for b in range(1, model.nbody):
        name = model.body(b).name
        path = f"/World/{prim_name(name, f'body_{b}')}"
        paths[b] = path
        xf = _xform(stage, path, data.xpos[b], data.xquat[b], name)
        prim = xf.GetPrim()
        UsdPhysics.RigidBodyAPI.Apply(prim)
        # A body welded to the world (no joint up to the world) is kinematic.
        if model.body_weldid[b] == 0:
            UsdPhysics.RigidBodyAPI(prim).CreateKinematicEnabledAttr(True)
        mass = UsdPhysics.MassAPI.Apply(prim)
        mass.CreateMassAttr(float(model.body_mass[b]))
        mass.CreateCenterOfMassAttr(_vec3f(model.body_ipos[b]))
        mass.CreateDiagonalInertiaAttr(_vec3f(model.body_inertia[b]))
        mass.CreatePrincipalAxesAttr(_gf_quat(model.body_iquat[b]))
    for g in range(model.ngeom):
        _geom(stage, model, g, paths[int(model.geom_bodyid[g])])
    for root in _articulation_roots(model):
        UsdPhysics.ArticulationRootAPI.Apply(stage.GetPrimAtPath(paths[root]))
    return paths


def _articulation_roots(model: mujoco.MjModel) -> list[int]:
    """The bodies that start a jointed tree below the world (the arm bases, the belt)."""
    roots = []
    for b in range(1, model.nbody):
        if model.body_parentid[b] == 0 and model.body_jntnum[b] == 0:
            children = np.flatnonzero(model.body_parentid == b)
            if any(model.body_jntnum[c] > 0 for c in children):
                roots.append(b)
    return roots


def _geom(stage: Usd.Stage, model: mujoco.MjModel, g: int, body_path: str) -> None:
    gtype = model.geom_type[g]
    name = model.geom(g).name
    path = f"{body_path}/{prim_name(f'geom_{name or g}', '')}"
    size = model.geom_size[g]
    pos, quat = model.geom_pos[g], model.geom_quat[g]
    if gtype == mujoco.mjtGeom.mjGEOM_PLANE:
        # An infinite plane in MuJoCo: a large thin box in USD.
        size = np.array([size[0] or 50.0, size[1] or 50.0, 0.001])
        pos = pos - quat_to_mat(quat)[:, 2] * 0.001
        gtype = mujoco.mjtGeom.mjGEOM_BOX
    if gtype == mujoco.mjtGeom.mjGEOM_BOX:
        geom = UsdGeom.Cube.Define(stage, path)
        geom.CreateSizeAttr(2.0)
        scale = _vec3f(size)
    elif gtype == mujoco.mjtGeom.mjGEOM_SPHERE:
        geom = UsdGeom.Sphere.Define(stage, path)
        geom.CreateRadiusAttr(float(size[0]))
        scale = None
    elif gtype == mujoco.mjtGeom.mjGEOM_CAPSULE or gtype == mujoco.mjtGeom.mjGEOM_CYLINDER:
        # MuJoCo's size is (radius, half-length) for both; USD's height is the whole length.
        shape = UsdGeom.Capsule if gtype == mujoco.mjtGeom.mjGEOM_CAPSULE else UsdGeom.Cylinder
        geom = shape.Define(stage, path)
        geom.CreateRadiusAttr(float(size[0]))
        geom.CreateHeightAttr(float(2 * size[1]))
        geom.CreateAxisAttr(UsdGeom.Tokens.z)
        scale = None
    elif gtype == mujoco.mjtGeom.mjGEOM_ELLIPSOID:
        # UsdPhysics refuses a non-uniformly scaled sphere collider: a mesh, collided as its
        # convex hull (the ellipsoid is convex, so the hull is the mesh itself).
        verts, _, faces = ellipsoid_mesh(size, ELLIPSOID_SLICES, ELLIPSOID_STACKS)
        geom = UsdGeom.Mesh.Define(stage, path)
        geom.CreatePointsAttr([Gf.Vec3f(*(float(x) for x in v)) for v in verts])
        geom.CreateFaceVertexCountsAttr([3] * len(faces))
        geom.CreateFaceVertexIndicesAttr([int(i) for i in faces.ravel()])
        geom.CreateExtentAttr([Gf.Vec3f(*(-float(x) for x in size)), _vec3f(size)])
        geom.CreateSubdivisionSchemeAttr(UsdGeom.Tokens.none)
        scale = None
    else:
        raise ValueError(
            f"USD export: geom {name or g} has type {mujoco.mjtGeom(gtype).name}, which the "
            "exporter does not write (the cell uses primitives only)"
        )
    geom.AddTranslateOp(UsdGeom.XformOp.PrecisionDouble).Set(Gf.Vec3d(*(float(x) for x in pos)))
    geom.AddOrientOp(UsdGeom.XformOp.PrecisionDouble).Set(_gf_quatd(quat))
    if scale is not None:
        geom.AddScaleOp().Set(scale)
    rgba = model.geom_rgba[g]
    geom.CreateDisplayColorAttr([Gf.Vec3f(*(float(c) for c in rgba[:3]))])
    geom.CreateDisplayOpacityAttr([float(rgba[3])])
    prim = geom.GetPrim()
    prim.SetCustomDataByKey(NAME_KEY, name)
    collides = bool(model.geom_contype[g] or model.geom_conaffinity[g])
    if collides:
        UsdPhysics.CollisionAPI.Apply(prim)
        if isinstance(geom, UsdGeom.Mesh):
            hull = UsdPhysics.MeshCollisionAPI.Apply(prim)
            hull.CreateApproximationAttr(UsdPhysics.Tokens.convexHull)
        prim.CreateAttribute("mjc:condim", Sdf.ValueTypeNames.Int).Set(int(model.geom_condim[g]))
        friction = model.geom_friction[g]
        prim.CreateAttribute("mjc:friction", Sdf.ValueTypeNames.Double3).Set(
            Gf.Vec3d(*(float(f) for f in friction))
        )
    else:
        UsdGeom.Imageable(prim).CreatePurposeAttr(UsdGeom.Tokens.guide)


def _joints(
    stage: Usd.Stage, model: mujoco.MjModel, data: mujoco.MjData, body_paths: dict[int, str]
) -> None:
    for j in range(model.njnt):
        jtype = model.jnt_type[j]
        if jtype == mujoco.mjtJoint.mjJNT_FREE:
            continue  # A floating rigid body.
        if jtype == mujoco.mjtJoint.mjJNT_BALL:
            raise ValueError(f"USD export: joint {model.joint(j).name} is a ball joint")
        child = int(model.jnt_bodyid[j])
        parent = int(model.body_parentid[child])
        name = model.joint(j).name
        path = f"{body_paths[child]}/{prim_name(f'joint_{name or j}', '')}"
        revolute = jtype == mujoco.mjtJoint.mjJNT_HINGE
        joint = (UsdPhysics.RevoluteJoint if revolute else UsdPhysics.PrismaticJoint).Define(
            stage, path
        )
        # The joint frame: its anchor in the child, its X axis along the joint axis.
        axis = model.jnt_axis[j]
        local_rot1 = _rotation_x_to(axis)
        local_pos1 = model.jnt_pos[j]
        # The same frame in the parent body at qpos0.
        p_pos, p_quat = data.xpos[parent], data.xquat[parent]
        c_pos, c_quat = data.xpos[child], data.xquat[child]
        anchor_world = c_pos + quat_to_mat(c_quat) @ local_pos1
        rel = quat_conj(p_quat)
        local_pos0 = quat_to_mat(p_quat).T @ (anchor_world - p_pos)
        local_rot0 = quat_mul(quat_mul(rel, c_quat), local_rot1)
        joint.CreateAxisAttr("X")
        joint.CreateBody0Rel().SetTargets([body_paths[parent]])
        joint.CreateBody1Rel().SetTargets([body_paths[child]])
        joint.CreateLocalPos0Attr(_vec3f(local_pos0))
        joint.CreateLocalRot0Attr(_gf_quat(local_rot0))
        joint.CreateLocalPos1Attr(_vec3f(local_pos1))
        joint.CreateLocalRot1Attr(_gf_quat(local_rot1))
        if model.jnt_limited[j]:
            lo, hi = model.jnt_range[j]
            unit = math.degrees if revolute else float
            joint.CreateLowerLimitAttr(float(unit(lo)))
            joint.CreateUpperLimitAttr(float(unit(hi)))
        prim = joint.GetPrim()
        prim.SetCustomDataByKey(NAME_KEY, name)
        dof = int(model.jnt_dofadr[j])
        for attr, value in (
            ("mjc:armature", model.dof_armature[dof]),
            ("mjc:damping", model.dof_damping[dof]),
            ("mjc:frictionloss", model.dof_frictionloss[dof]),
            ("mjc:stiffness", model.jnt_stiffness[j]),
            ("mjc:springref", model.qpos_spring[model.jnt_qposadr[j]]),
        ):
            prim.CreateAttribute(attr, Sdf.ValueTypeNames.Double).Set(float(value))


def _rotation_x_to(axis: np.ndarray) -> np.ndarray:
    """A unit quaternion (w, x, y, z) that turns +X onto ``axis``."""
    a = np.asarray(axis, dtype=float) / np.linalg.norm(axis)
    x = np.array([1.0, 0.0, 0.0])
    c = float(x @ a)
    if c > 1 - 1e-12:
        return np.array([1.0, 0.0, 0.0, 0.0])
    if c < -1 + 1e-12:
        return np.array([0.0, 0.0, 0.0, 1.0])
    v = np.cross(x, a)
    q = np.array([1.0 + c, *v])
    return q / np.linalg.norm(q)


def _cameras(stage: Usd.Stage, scene: Scene, body_paths: dict[int, str]) -> None:
    model = scene.model
    for name, cam in scene.world.cameras.items():
        parent = "/World" if cam.mount == "world" else body_paths[model.body(cam.mount).id]
        path = f"{parent}/{prim_name(f'camera_{name}', '')}"
        rot = quat_to_mat(np.asarray(cam.pose.quat)) @ USD_FROM_CV
        xf = UsdGeom.Camera.Define(stage, path)
        xf.AddTranslateOp(UsdGeom.XformOp.PrecisionDouble).Set(
            Gf.Vec3d(*(float(x) for x in cam.pose.pos))
        )
        xf.AddOrientOp(UsdGeom.XformOp.PrecisionDouble).Set(_gf_quatd(mat_to_quat(rot)))
        _intrinsics(xf, cam)
        xf.GetPrim().SetCustomDataByKey(NAME_KEY, name)
        xf.GetPrim().SetCustomDataByKey("r2s2r:mount", cam.mount)


def _intrinsics(camera: UsdGeom.Camera, cam: CameraSpec) -> None:
    f = (cam.fx + cam.fy) / 2
    camera.CreateProjectionAttr(UsdGeom.Tokens.perspective)
    camera.CreateFocalLengthAttr(float(PIXEL_MM * f))
    camera.CreateHorizontalApertureAttr(float(PIXEL_MM * cam.width))
    camera.CreateVerticalApertureAttr(float(PIXEL_MM * cam.height))
    camera.CreateClippingRangeAttr(Gf.Vec2f(0.005, 100.0))
    prim = camera.GetPrim()
    model = "opencvFisheye" if cam.model == "fisheye" else "opencvPinhole"
    prim.AddAppliedSchema(
        "OmniLensDistortionOpenCvFisheyeAPI"
        if model == "opencvFisheye"
        else "OmniLensDistortionOpenCvPinholeAPI"
    )
    prefix = f"omni:lensdistortion:{model}"
    prim.CreateAttribute("omni:lensdistortion:model", Sdf.ValueTypeNames.Token).Set(model)
    prim.CreateAttribute(f"{prefix}:imageSize", Sdf.ValueTypeNames.Int2).Set(
        Gf.Vec2i(cam.width, cam.height)
    )
    for key in ("fx", "fy", "cx", "cy"):
        prim.CreateAttribute(f"{prefix}:{key}", Sdf.ValueTypeNames.Float).Set(
            float(getattr(cam, key))
        )
    names = ("k1", "k2", "k3", "k4") if model == "opencvFisheye" else ("k1", "k2", "p1", "p2", "k3")
    coeffs = list(cam.dist) + [0.0] * (len(names) - len(cam.dist))
    for key, value in zip(names, coeffs, strict=True):
        prim.CreateAttribute(f"{prefix}:{key}", Sdf.ValueTypeNames.Float).Set(float(value))
    if model == "opencvFisheye":
        prim.CreateAttribute(f"{prefix}:maxFov", Sdf.ValueTypeNames.Float).Set(_FISHEYE_MAX_FOV)
