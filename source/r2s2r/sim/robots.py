"""Programmatic MjSpec builders for the Flexiv Rizon 4S arm and the Wuji 20-DoF hand."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import mujoco
import numpy as np

Vec3 = Sequence[float]
Quat = Sequence[float]

# Joint origins (parent -> child translation in metres, roll-pitch-yaw in radians) for j1..j7
# followed by the fixed flange. Every joint frame coincides with its child body frame.
RIZON4S_JOINT_ORIGINS: list[tuple[tuple[float, float, float], tuple[float, float, float]]] = [
    ((0.0, 0.0, 0.155), (0.0, 0.0, -np.pi)),
    ((0.0, 0.03, 0.21), (0.0, 0.0, 0.0)),
    ((0.0, 0.035, 0.205), (0.0, 0.0, 0.0)),
    ((-0.02, -0.03, 0.19), (0.0, 0.0, -np.pi)),
    ((-0.02, 0.025, 0.195), (0.0, 0.0, -np.pi)),
    ((0.0, 0.03, 0.19), (0.0, 0.0, 0.0)),
    ((-0.015, 0.073, 0.11), (0.0, -np.pi / 2, 0.0)),
    ((0.0, 0.0, 0.124), (0.0, 0.0, -np.pi)),
]
RIZON4S_JOINT_AXES: np.ndarray = np.array(
    [[0, 0, 1], [0, 1, 0], [0, 0, 1], [0, 1, 0], [0, 0, 1], [0, 1, 0], [0, 0, 1]], dtype=float
)
RIZON4S_JOINT_RANGES: np.ndarray = np.array(
    [
        [-2.8798, 2.8798],
        [-2.3562, 2.3562],
        [-3.0543, 3.0543],
        [-1.9548, 2.7751],
        [-3.0543, 3.0543],
        [-1.4835, 4.6251],
        [-3.0543, 3.0543],
    ]
)
RIZON4S_TORQUE_LIMITS: np.ndarray = np.array([123.0, 123.0, 64.0, 64.0, 39.0, 39.0, 39.0])
RIZON4S_VEL_LIMITS: np.ndarray = np.array([2.0944, 2.0944, 2.4435, 2.4435, 4.8869, 4.8869, 4.8869])
RIZON4S_LINK_MASSES: np.ndarray = np.array([3.60, 2.69, 2.35, 2.35, 2.31, 2.22, 0.77])
# Capsule radii of the link collision geometry (upper arm thicker than the wrist).
RIZON4S_LINK_RADII: tuple[float, ...] = (0.065, 0.06, 0.055, 0.055, 0.05, 0.05, 0.04)

# Wuji hand joint limits per finger (j1 abduction, j2 MCP, j3 PIP, j4 DIP), radians.
WUJI_THUMB_RANGES: np.ndarray = np.array([[0.0, 1.6], [0.0, 1.6], [0.0, 1.6], [0.0, 1.4]])
WUJI_FINGER_RANGES: np.ndarray = np.array([[-0.37, 0.37], [0.0, 1.6], [0.0, 1.6], [0.0, 1.4]])
WUJI_HAND_JOINT_RANGES: np.ndarray = np.vstack([WUJI_THUMB_RANGES] + [WUJI_FINGER_RANGES] * 4)
# Phalanx lengths (proximal, middle, distal) and the thumb metacarpal length, metres.
WUJI_PHALANX_LENGTHS: tuple[float, float, float] = (0.045, 0.03, 0.025)
WUJI_THUMB_METACARPAL: float = 0.03
WUJI_PHALANX_RADIUS: float = 0.0095
WUJI_PALM_HALF: tuple[float, float, float] = (0.045, 0.015, 0.05)
WUJI_PALM_MASS: float = 0.35
WUJI_PHALANX_MASSES: tuple[float, float, float, float] = (0.01, 0.02, 0.015, 0.01)

_ARM_RGBA = (0.85, 0.85, 0.87, 1.0)
_HAND_RGBA = (0.25, 0.25, 0.28, 1.0)


@dataclass(frozen=True)
class ArmNames:
    """Names of the elements created by :func:`add_rizon4s`."""

    base: str
    joints: tuple[str, ...]
    flange: str
    flange_site: str
    tcp_site: str


@dataclass(frozen=True)
class HandNames:
    """Names of the elements created by :func:`add_wuji_hand`."""

    joints: tuple[str, ...]
    tip_sites: tuple[str, ...]
    palm_site: str
    bodies: tuple[str, ...]


def rpy_to_matrix(rpy: Sequence[float]) -> np.ndarray:
    """Return the rotation matrix Rz(yaw) @ Ry(pitch) @ Rx(roll) (URDF convention)."""
    r, p, y = rpy
    cr, sr, cp, sp, cy, sy = np.cos(r), np.sin(r), np.cos(p), np.sin(p), np.cos(y), np.sin(y)
    rx = np.array([[1.0, 0.0, 0.0], [0.0, cr, -sr], [0.0, sr, cr]])
    ry = np.array([[cp, 0.0, sp], [0.0, 1.0, 0.0], [-sp, 0.0, cp]])
    rz = np.array([[cy, -sy, 0.0], [sy, cy, 0.0], [0.0, 0.0, 1.0]])
    return rz @ ry @ rx


def rpy_to_quat(rpy: Sequence[float]) -> np.ndarray:
    """Return the unit quaternion (w, x, y, z) of a roll-pitch-yaw rotation."""
    quat = np.zeros(4)
    mujoco.mju_mat2Quat(quat, rpy_to_matrix(rpy).ravel())
    return quat


def _axis_angle_matrix(axis: np.ndarray, angle: float) -> np.ndarray:
    """Return the rotation matrix of ``angle`` radians about the unit vector ``axis``."""
    x, y, z = axis
    k = np.array([[0.0, -z, y], [z, 0.0, -x], [-y, x, 0.0]])
    return np.eye(3) + np.sin(angle) * k + (1.0 - np.cos(angle)) * (k @ k)


def rizon4s_fk(q: np.ndarray) -> np.ndarray:
    """Return the 4x4 flange pose in the arm base frame for joint angles ``q`` (7,)."""
    q = np.asarray(q, dtype=float).reshape(7)
    pose = np.eye(4)
    for i, (pos, rpy) in enumerate(RIZON4S_JOINT_ORIGINS):
        step = np.eye(4)
        step[:3, :3] = rpy_to_matrix(rpy)
        step[:3, 3] = pos
        if i < 7:
            step[:3, :3] = step[:3, :3] @ _axis_angle_matrix(RIZON4S_JOINT_AXES[i], q[i])
        pose = pose @ step
    return pose


def _angle_scale(element: mujoco.MjsBody) -> float:
    """Return the factor converting radians to the angle unit the spec compiler expects."""
    # MjSpec defaults to ``compiler.degree = True``, which also applies to joint ranges set via
    # the Python API, so radian values must be converted unless the user switched it off.
    return 180.0 / np.pi if element.compiler.degree else 1.0


def _cylinder_inertia(mass: float, radius: float, length: float) -> list[float]:
    """Return the diagonal inertia of a solid cylinder whose axis is the local z axis."""
    ixx = mass * (3.0 * radius**2 + length**2) / 12.0
    return [ixx, ixx, 0.5 * mass * radius**2]


def _set_inertial(
    body: mujoco.MjsBody, mass: float, ipos: Sequence[float], inertia: Sequence[float]
) -> None:
    """Give ``body`` an explicit inertial so its mass is exactly ``mass``."""
    body.explicitinertial = True
    body.mass = mass
    body.ipos = list(ipos)
    body.inertia = list(inertia)


def _segment_quat(vec: np.ndarray) -> np.ndarray:
    """Return a quaternion rotating the local z axis onto the direction of ``vec``."""
    quat = np.zeros(4)
    norm = float(np.linalg.norm(vec))
    if norm < 1e-12:
        quat[0] = 1.0
        return quat
    mujoco.mju_quatZ2Vec(quat, np.asarray(vec, dtype=float) / norm)
    return quat


def add_rizon4s(
    parent: mujoco.MjsBody,
    prefix: str,
    pos: Vec3 = (0.0, 0.0, 0.0),
    quat: Quat = (1.0, 0.0, 0.0, 0.0),
    tcp_offset: float = 0.12,
    armature: float = 0.1,
    damping: float = 1.0,
) -> ArmNames:
    """Add a Flexiv Rizon 4S 7-DoF arm under ``parent`` and return its element names."""
    scale = _angle_scale(parent)
    base = parent.add_body(name=f"{prefix}base", pos=list(pos), quat=list(quat))
    _set_inertial(base, 3.7, (0.0, 0.0, 0.07), _cylinder_inertia(3.7, 0.07, 0.155))
    # A static base is welded to the world, where MuJoCo does not filter parent-child contacts,
    # so only the lower part of the base collides (clear of the link1 capsule).
    base.add_geom(
        name=f"{prefix}base_geom",
        type=mujoco.mjtGeom.mjGEOM_CYLINDER,
        size=[0.07, 0.04, 0.0],
        pos=[0.0, 0.0, 0.04],
        rgba=list(_ARM_RGBA),
    )
    base.add_geom(
        name=f"{prefix}base_visual",
        type=mujoco.mjtGeom.mjGEOM_CYLINDER,
        size=[0.07, 0.0775, 0.0],
        pos=[0.0, 0.0, 0.0775],
        rgba=list(_ARM_RGBA),
        contype=0,
        conaffinity=0,
        group=2,
    )
    joints: list[str] = []
    body = base
    for i in range(7):
        jpos, rpy = RIZON4S_JOINT_ORIGINS[i]
        name = f"{prefix}link{i + 1}"
        body = body.add_body(name=name, pos=list(jpos), quat=list(rpy_to_quat(rpy)))
        body.gravcomp = 1.0
        jname = f"{prefix}j{i + 1}"
        body.add_joint(
            name=jname,
            type=mujoco.mjtJoint.mjJNT_HINGE,
            axis=list(RIZON4S_JOINT_AXES[i]),
            limited=mujoco.mjtLimited.mjLIMITED_TRUE,
            range=list(RIZON4S_JOINT_RANGES[i] * scale),
            actfrclimited=mujoco.mjtLimited.mjLIMITED_TRUE,
            actfrcrange=[-RIZON4S_TORQUE_LIMITS[i], RIZON4S_TORQUE_LIMITS[i]],
            actgravcomp=True,
            armature=armature,
            damping=[damping, 0.0, 0.0],
        )
        joints.append(jname)
        # The link capsule runs from this joint to the next joint (or the flange).
        seg = np.array(RIZON4S_JOINT_ORIGINS[i + 1][0])
        radius = RIZON4S_LINK_RADII[i]
        length = float(np.linalg.norm(seg))
        body.add_geom(
            name=f"{name}_geom",
            type=mujoco.mjtGeom.mjGEOM_CAPSULE,
            fromto=[0.0, 0.0, 0.0, *seg],
            size=[radius, 0.0, 0.0],
            rgba=list(_ARM_RGBA if i % 2 == 0 else (0.97, 0.97, 0.97, 1.0)),
        )
        mass = float(RIZON4S_LINK_MASSES[i])
        _set_inertial(body, mass, list(0.5 * seg), _cylinder_inertia(mass, radius, length))
        body.iquat = list(_segment_quat(seg))
    fpos, frpy = RIZON4S_JOINT_ORIGINS[7]
    flange = body.add_body(name=f"{prefix}flange", pos=list(fpos), quat=list(rpy_to_quat(frpy)))
    flange.gravcomp = 1.0
    _set_inertial(flange, 0.05, (0.0, 0.0, -0.005), _cylinder_inertia(0.05, 0.04, 0.01))
    flange.add_geom(
        name=f"{prefix}flange_geom",
        type=mujoco.mjtGeom.mjGEOM_CYLINDER,
        size=[0.04, 0.005, 0.0],
        pos=[0.0, 0.0, -0.005],
        rgba=[0.3, 0.3, 0.3, 1.0],
        contype=0,
        conaffinity=0,
        group=2,
    )
    flange.add_site(name=f"{prefix}flange_site", size=[0.005, 0.0, 0.0])
    flange.add_site(name=f"{prefix}tcp", pos=[0.0, 0.0, tcp_offset], size=[0.008, 0.0, 0.0])
    return ArmNames(
        base=f"{prefix}base",
        joints=tuple(joints),
        flange=f"{prefix}flange",
        flange_site=f"{prefix}flange_site",
        tcp_site=f"{prefix}tcp",
    )


def _mirror_vec(v: Sequence[float], mirror: bool) -> list[float]:
    """Reflect a position across the palm's x = 0 plane when ``mirror`` is set."""
    return [-v[0], v[1], v[2]] if mirror else list(v)


def _mirror_axis(a: Sequence[float], mirror: bool) -> list[float]:
    """Reflect a rotation axis (a pseudovector) across the x = 0 plane when ``mirror`` is set."""
    return [a[0], -a[1], -a[2]] if mirror else list(a)


def _mirror_quat(q: Sequence[float], mirror: bool) -> list[float]:
    """Reflect a rotation across the x = 0 plane when ``mirror`` is set."""
    return [q[0], q[1], -q[2], -q[3]] if mirror else list(q)


def _add_phalanx(
    parent: mujoco.MjsBody, name: str, pos: Sequence[float], length: float, mass: float
) -> mujoco.MjsBody:
    """Add a phalanx body whose capsule starts at the body origin and runs along local z."""
    body = parent.add_body(name=name, pos=list(pos))
    _set_inertial(
        body,
        mass,
        (0.0, 0.0, 0.5 * length),
        _cylinder_inertia(mass, WUJI_PHALANX_RADIUS, length),
    )
    body.add_geom(
        name=f"{name}_geom",
        type=mujoco.mjtGeom.mjGEOM_CAPSULE,
        fromto=[0.0, 0.0, 0.0, 0.0, 0.0, length],
        size=[WUJI_PHALANX_RADIUS, 0.0, 0.0],
        rgba=list(_HAND_RGBA),
        friction=[1.0, 0.02, 0.001],
        condim=4,
    )
    return body


def add_wuji_hand(
    parent: mujoco.MjsBody,
    prefix: str,
    pos: Vec3 = (0.0, 0.0, 0.0),
    quat: Quat = (1.0, 0.0, 0.0, 0.0),
    side: str = "right",
    gravcomp: float = 1.0,
) -> HandNames:
    """Add a 20-DoF Wuji-style hand (thumb first) under ``parent``; fingers point along +z.

    The palm faces +y and fingers flex towards it. A right hand has its thumb on the -x side;
    ``side="left"`` mirrors the hand across the x = 0 plane.
    """
    if side not in ("right", "left"):
        raise ValueError(f"side must be 'right' or 'left', got {side!r}")
    mirror = side == "left"
    scale = _angle_scale(parent)
    hx, hy, hz = WUJI_PALM_HALF
    palm = parent.add_body(name=f"{prefix}palm_link", pos=list(pos), quat=list(quat))
    palm.gravcomp = gravcomp
    m = WUJI_PALM_MASS
    box_inertia = [
        m * (hy**2 + hz**2) / 3.0,
        m * (hx**2 + hz**2) / 3.0,
        m * (hx**2 + hy**2) / 3.0,
    ]
    _set_inertial(palm, m, (0.0, 0.0, hz), box_inertia)
    palm.add_geom(
        name=f"{prefix}palm_geom",
        type=mujoco.mjtGeom.mjGEOM_BOX,
        size=[hx, hy, hz],
        pos=[0.0, 0.0, hz],
        rgba=list(_HAND_RGBA),
        friction=[1.0, 0.02, 0.001],
        condim=4,
    )
    palm.add_site(name=f"{prefix}palm", pos=[0.0, hy, hz], size=[0.006, 0.0, 0.0])
    bodies: list[str] = [f"{prefix}palm_link"]
    joints: list[str] = []
    tips: list[str] = []
    flex_axis = _mirror_axis((-1.0, 0.0, 0.0), mirror)
    # Thumb base pose: tilted by `tilt` from +z towards -x, on the -x side of the palm.
    tilt = 0.9
    thumb_quat = _mirror_quat([np.cos(-tilt / 2.0), 0.0, np.sin(-tilt / 2.0), 0.0], mirror)
    # The thumb rotation axis is -z of the palm, expressed in the tilted thumb frame, so that
    # positive rotation swings the thumb in front of the palm (opposition).
    thumb_rot_axis = _mirror_axis((-np.sin(tilt), 0.0, -np.cos(tilt)), mirror)
    # Knuckles sit just above the palm top so that the proximal capsules clear the palm box.
    finger_x = (-0.033, -0.011, 0.011, 0.033)
    knuckle_z = 2.0 * hz + WUJI_PHALANX_RADIUS + 0.0025
    for finger in range(1, 6):
        tag = f"{prefix}f{finger}"
        ranges = (WUJI_THUMB_RANGES if finger == 1 else WUJI_FINGER_RANGES) * scale
        if finger == 1:
            # The thumb's first link carries a short metacarpal segment before the MCP joint.
            root_pos, root_quat = (-hx, 0.005, 0.03), thumb_quat
            j1_axis, meta = thumb_rot_axis, WUJI_THUMB_METACARPAL
            seg_lengths: tuple[float, float, float] = (0.035, 0.03, 0.025)
        else:
            root_pos, root_quat = (finger_x[finger - 2], 0.0, knuckle_z), [1.0, 0.0, 0.0, 0.0]
            j1_axis, meta = _mirror_axis((0.0, 1.0, 0.0), mirror), 0.0
            seg_lengths = WUJI_PHALANX_LENGTHS
        root = palm.add_body(name=f"{tag}_link1", pos=_mirror_vec(root_pos, mirror), quat=root_quat)
        mass = WUJI_PHALANX_MASSES[0]
        _set_inertial(
            root,
            mass,
            (0.0, 0.0, 0.5 * meta),
            _cylinder_inertia(mass, WUJI_PHALANX_RADIUS, max(meta, 0.01)),
        )
        if meta > 0.0:
            # The metacarpal overlaps the palm box, so it is visual only (the palm collides).
            root.add_geom(
                name=f"{tag}_link1_geom",
                type=mujoco.mjtGeom.mjGEOM_CAPSULE,
                fromto=[0.0, 0.0, 0.0, 0.0, 0.0, meta],
                size=[WUJI_PHALANX_RADIUS * 1.1, 0.0, 0.0],
                rgba=list(_HAND_RGBA),
                contype=0,
                conaffinity=0,
                group=2,
            )
        offsets = (meta, seg_lengths[0], seg_lengths[1])
        body = root
        for k in range(1, 5):
            if k > 1:
                body = _add_phalanx(
                    body,
                    f"{tag}_link{k}",
                    (0.0, 0.0, offsets[k - 2]),
                    seg_lengths[k - 2],
                    WUJI_PHALANX_MASSES[k - 1],
                )
            body.gravcomp = gravcomp
            bodies.append(body.name)
            body.add_joint(
                name=f"{tag}_j{k}",
                type=mujoco.mjtJoint.mjJNT_HINGE,
                axis=j1_axis if k == 1 else flex_axis,
                limited=mujoco.mjtLimited.mjLIMITED_TRUE,
                range=list(ranges[k - 1]),
                armature=0.0003,
                damping=[0.01, 0.0, 0.0],
            )
            joints.append(f"{tag}_j{k}")
        tips.append(f"{tag}_tip")
        body.add_site(
            name=tips[-1],
            pos=[0.0, 0.0, seg_lengths[2] + 0.5 * WUJI_PHALANX_RADIUS],
            size=[0.004, 0.0, 0.0],
        )
    return HandNames(
        joints=tuple(joints), tip_sites=tuple(tips), palm_site=f"{prefix}palm", bodies=tuple(bodies)
    )


def _per_joint(value: float | Sequence[float], n: int, label: str) -> np.ndarray:
    """Broadcast a scalar or length-``n`` sequence to an array of shape (n,)."""
    arr = np.asarray(value, dtype=float)
    if arr.ndim == 0:
        arr = np.full(n, float(arr))
    if arr.shape != (n,):
        raise ValueError(f"{label} must be a scalar or have length {n}, got shape {arr.shape}")
    return arr


def add_hand_actuators(
    spec: mujoco.MjSpec,
    names: HandNames,
    kp: float | Sequence[float] = 0.5,
    kv: float | Sequence[float] = 0.02,
    force_range: float | Sequence[float] = 0.5,
    armature: float | Sequence[float] = 0.0003,
    damping: float | Sequence[float] = 0.01,
) -> list[str]:
    """Add one position actuator per hand joint (group 3) and set joint armature/damping."""
    n = len(names.joints)
    kps = _per_joint(kp, n, "kp")
    kvs = _per_joint(kv, n, "kv")
    frs = _per_joint(force_range, n, "force_range")
    arms = _per_joint(armature, n, "armature")
    damps = _per_joint(damping, n, "damping")
    # Joint ranges follow compiler.degree, but actuator ctrlrange is never converted.
    to_rad = np.pi / 180.0 if spec.compiler.degree else 1.0
    acts: list[str] = []
    for i, jname in enumerate(names.joints):
        joint = spec.joint(jname)
        if joint is None:
            raise KeyError(f"joint {jname!r} not found in spec")
        joint.armature = float(arms[i])
        joint.damping = [float(damps[i]), 0.0, 0.0]
        act = spec.add_actuator(
            name=f"{jname}_act",
            target=jname,
            trntype=mujoco.mjtTrn.mjTRN_JOINT,
            group=3,
        )
        act.set_to_position(kp=float(kps[i]), kv=float(kvs[i]))
        act.ctrllimited = mujoco.mjtLimited.mjLIMITED_TRUE
        act.ctrlrange = list(np.asarray(joint.range, dtype=float) * to_rad)
        act.forcelimited = mujoco.mjtLimited.mjLIMITED_TRUE
        act.forcerange = [-float(frs[i]), float(frs[i])]
        acts.append(act.name)
    return acts
