"""The Wuji Hand 2 (20 DoF, 5 fingers x 4 joints, thumb first) built with MjSpec."""

from __future__ import annotations

from collections.abc import Sequence

import mujoco
import numpy as np

from r2s2r.sim.robots.common import (
    HandNames,
    Quat,
    Vec3,
    angle_scale,
    cylinder_inertia,
    set_inertial,
)

WUJI_HAND_NAME = "wuji2"
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

_HAND_RGBA = (0.25, 0.25, 0.28, 1.0)


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
    set_inertial(
        body,
        mass,
        (0.0, 0.0, 0.5 * length),
        cylinder_inertia(mass, WUJI_PHALANX_RADIUS, length),
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
    scale = angle_scale(parent)
    hx, hy, hz = WUJI_PALM_HALF
    palm = parent.add_body(name=f"{prefix}palm_link", pos=list(pos), quat=list(quat))
    palm.gravcomp = gravcomp
    m = WUJI_PALM_MASS
    box_inertia = [
        m * (hy**2 + hz**2) / 3.0,
        m * (hx**2 + hz**2) / 3.0,
        m * (hx**2 + hy**2) / 3.0,
    ]
    set_inertial(palm, m, (0.0, 0.0, hz), box_inertia)
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
        set_inertial(
            root,
            mass,
            (0.0, 0.0, 0.5 * meta),
            cylinder_inertia(mass, WUJI_PHALANX_RADIUS, max(meta, 0.01)),
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
        robot=WUJI_HAND_NAME,
        joints=tuple(joints),
        tip_sites=tuple(tips),
        palm_site=f"{prefix}palm",
        bodies=tuple(bodies),
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
