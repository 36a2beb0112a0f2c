"""The Flexiv Rizon 4S arm (7 DoF) built with MjSpec from its published kinematics."""

from __future__ import annotations

import mujoco
import numpy as np

from r2s2r.sim.robots.common import (
    ArmNames,
    Quat,
    Vec3,
    angle_scale,
    axis_angle_matrix,
    cylinder_inertia,
    rpy_to_matrix,
    rpy_to_quat,
    set_inertial,
)

RIZON4S_NAME = "rizon4s"
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

_ARM_RGBA = (0.85, 0.85, 0.87, 1.0)


def rizon4s_fk(q: np.ndarray) -> np.ndarray:
    """Return the 4x4 flange pose in the arm base frame for joint angles ``q`` (7,)."""
    q = np.asarray(q, dtype=float).reshape(7)
    pose = np.eye(4)
    for i, (pos, rpy) in enumerate(RIZON4S_JOINT_ORIGINS):
        step = np.eye(4)
        step[:3, :3] = rpy_to_matrix(rpy)
        step[:3, 3] = pos
        if i < 7:
            step[:3, :3] = step[:3, :3] @ axis_angle_matrix(RIZON4S_JOINT_AXES[i], q[i])
        pose = pose @ step
    return pose


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
    frictionloss: float = 0.0,
) -> ArmNames:
    """Add a Flexiv Rizon 4S 7-DoF arm under ``parent`` and return its element names."""
    scale = angle_scale(parent)
    body = _add_base(parent, prefix, pos, quat)
    joints: list[str] = []
    for i in range(7):
        body = _add_link(body, prefix, i, scale, armature, damping, frictionloss)
        joints.append(f"{prefix}j{i + 1}")
    _add_flange(body, prefix, tcp_offset)
    return ArmNames(
        robot=RIZON4S_NAME,
        base=f"{prefix}base",
        joints=tuple(joints),
        flange=f"{prefix}flange",
        flange_site=f"{prefix}flange_site",
        tcp_site=f"{prefix}tcp",
        velocity_limits=tuple(float(v) for v in RIZON4S_VEL_LIMITS),
    )


def _add_base(parent: mujoco.MjsBody, prefix: str, pos: Vec3, quat: Quat) -> mujoco.MjsBody:
    """Add the arm's base body with its collision and visual cylinders."""
    base = parent.add_body(name=f"{prefix}base", pos=list(pos), quat=list(quat))
    set_inertial(base, 3.7, (0.0, 0.0, 0.07), cylinder_inertia(3.7, 0.07, 0.155))
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
    return base


def _add_link(
    parent: mujoco.MjsBody,
    prefix: str,
    i: int,
    scale: float,
    armature: float,
    damping: float,
    frictionloss: float,
) -> mujoco.MjsBody:
    """Add link ``i + 1`` under ``parent`` with its joint ``j{i + 1}`` and its capsule."""
    jpos, rpy = RIZON4S_JOINT_ORIGINS[i]
    name = f"{prefix}link{i + 1}"
    body = parent.add_body(name=name, pos=list(jpos), quat=list(rpy_to_quat(rpy)))
    body.gravcomp = 1.0
    body.add_joint(
        name=f"{prefix}j{i + 1}",
        type=mujoco.mjtJoint.mjJNT_HINGE,
        axis=list(RIZON4S_JOINT_AXES[i]),
        limited=mujoco.mjtLimited.mjLIMITED_TRUE,
        range=list(RIZON4S_JOINT_RANGES[i] * scale),
        actfrclimited=mujoco.mjtLimited.mjLIMITED_TRUE,
        actfrcrange=[-RIZON4S_TORQUE_LIMITS[i], RIZON4S_TORQUE_LIMITS[i]],
        actgravcomp=True,
        armature=armature,
        damping=[damping, 0.0, 0.0],
        frictionloss=frictionloss,
    )
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
    set_inertial(body, mass, list(0.5 * seg), cylinder_inertia(mass, radius, length))
    body.iquat = list(_segment_quat(seg))
    return body


def _add_flange(parent: mujoco.MjsBody, prefix: str, tcp_offset: float) -> None:
    """Add the flange under the last link, with its site and the TCP site ``tcp_offset`` out."""
    fpos, frpy = RIZON4S_JOINT_ORIGINS[7]
    flange = parent.add_body(name=f"{prefix}flange", pos=list(fpos), quat=list(rpy_to_quat(frpy)))
    flange.gravcomp = 1.0
    set_inertial(flange, 0.05, (0.0, 0.0, -0.005), cylinder_inertia(0.05, 0.04, 0.01))
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
