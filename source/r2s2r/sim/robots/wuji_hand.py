"""The Wuji Hand 2 (20 DoF, 5 fingers x 4 joints, thumb first) built with MjSpec.

Its kinematics are the vendor's description (``wuji-hand-description``, ``mjcf/right.xml`` and
``mjcf/left.xml``, release 2026.04.27): the joint names and order, every link's frame in its
parent, the hinge axes and the joint ranges; the masses are its links'. Capsules and a box
stand in for its meshes. ``docs/hand.md`` has the joint table.

The palm frame is the vendor's: fingers along +z, the palm facing +x, a right hand's thumb on
+y. Fingers 2-5 (index to little) flex at joint 1, turn sideways at joint 2 and flex at joints
3 and 4; the thumb's joints 1 and 2 place it (opposition and abduction), 3 and 4 flex it. A
left hand is the right one reflected across the palm's y = 0 plane, as the vendor's left file
is, with one exception the vendor's file has too: its fingers' sideways joints keep the right
hand's sense (positive turns a right index towards the thumb, a left one away from it).
"""

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
FINGERS, JOINTS_PER_FINGER = 5, 4

# The vendor's joint names without the side (``right_`` / ``left_``), thumb first.
WUJI_JOINT_NAMES: tuple[str, ...] = tuple(
    f"finger{f}_joint{k}" for f in range(1, FINGERS + 1) for k in range(1, JOINTS_PER_FINGER + 1)
)
# Joint ranges (rad), in the order of WUJI_JOINT_NAMES; both hands share them.
WUJI_HAND_JOINT_RANGES: np.ndarray = np.array(
    [
        [0.0475, 1.6033], [-0.1387, 0.9324], [-0.4642, 1.5623], [-0.4699, 1.5568],
        [-0.1585, 1.5604], [-0.37, 0.37], [-0.4777, 1.5485], [-0.4683, 1.5753],
        [-0.1644, 1.5516], [-0.37, 0.37], [-0.4739, 1.5512], [-0.4684, 1.5745],
        [-0.1554, 1.5585], [-0.37, 0.37], [-0.4765, 1.5487], [-0.4777, 1.5634],
        [-0.1626, 1.5585], [-0.37, 0.37], [-0.4768, 1.549], [-0.4683, 1.5735],
    ]
)  # fmt: skip
WUJI_HAND_JOINT_RANGES.setflags(write=False)
WUJI_THUMB_RANGES: np.ndarray = WUJI_HAND_JOINT_RANGES[:4]
WUJI_FINGER_RANGES: np.ndarray = WUJI_HAND_JOINT_RANGES[4:8]
# Joint 1 of fingers 2-5 flexes the finger at the knuckle; joint 2 turns it sideways.
FLEXION_JOINT, ABDUCTION_JOINT = 0, 1

# Where the palm sits on the arm's flange: turned so that the palm faces the flange's +y and a
# right thumb points to its -x (the cell's TCP convention), the middle finger's knuckle
# 0.112 m out along the flange's z axis.
HAND_MOUNT_POS: tuple[float, float, float] = (0.0, 0.0, 0.0225)
HAND_MOUNT_QUAT: tuple[float, float, float, float] = (np.sqrt(0.5), 0.0, 0.0, np.sqrt(0.5))

# The right hand's link frames in their parents (position, quaternion w x y z), from the
# vendor's right.xml. The thumb's four links; its tip (the distal mesh's far end) in link 4.
_THUMB_LINKS: tuple[tuple[Vec3, Quat], ...] = (
    ((0.0084399, 0.020587, 0.028893), (0.682219, -0.617669, 0.0805047, -0.382859)),
    ((-0.0047549, -0.0058191, 0.014132), (0.726252, 0.290851, -0.0855912, -0.616958)),
    ((-0.000266705, 0.000991502, 0.0346656), (0.815739, 0.0150036, 0.0212382, 0.577836)),
    ((0.0, 0.0002, 0.0295), (1.0, 0.0, 0.0, 0.0)),
)
_THUMB_TIP: Vec3 = (-0.00105, -0.0002, 0.0331)
# Link 1 (the knuckle) of fingers 2-5 in the palm; links 2-4 of a finger in their parents
# (the same for the four); the tip in link 4.
_FINGER_BASES: tuple[tuple[Vec3, Quat], ...] = (
    ((-0.0058701, 0.029434, 0.091917), (0.991689, -0.0588295, -0.0292755, -0.110614)),
    ((-0.01046, 0.0074615, 0.089544), (0.999048, -1.26848e-05, -0.0436192, 0.000290547)),
    ((-0.0076649, -0.013712, 0.084429), (0.997789, 0.0461019, -0.0405884, 0.0254002)),
    ((-0.00226865, -0.0340011, 0.0742813), (0.990869, 0.0993173, -0.0383255, 0.0827362)),
)
_FINGER_LINKS: tuple[tuple[Vec3, Quat], ...] = (
    ((0.0022, 0.0, 0.004), (0.707107, 0.0, 0.0, 0.707107)),
    ((0.0, 0.00475, 0.0436177), (0.707012, 0.0, 0.0, -0.707202)),
    ((0.0, -0.0002, 0.0295), (1.0, 0.0, 0.0, 0.0)),
)
_FINGER_TIP: Vec3 = (-0.00105, 0.0002, 0.029)
# Link masses (kg): the palm, the thumb's links 1-4, a finger's links 1-4.
WUJI_PALM_MASS = 0.16914
WUJI_THUMB_MASSES: tuple[float, ...] = (0.0075, 0.0248, 0.0165, 0.0206)
WUJI_FINGER_MASSES: tuple[float, ...] = (0.0032, 0.033, 0.0165, 0.01718)
# Every joint turns about its link's y axis.
_AXIS = (0.0, 1.0, 0.0)

# The stand-in shapes: phalanx capsules about as thick as the vendor's links (15 mm), and a
# palm box spanning its mesh from the wrist to below the knuckles (centre, half sizes).
WUJI_PHALANX_RADIUS = 0.0075
_PALM_BOX: tuple[Vec3, Vec3] = ((-0.0019, -0.0024, 0.04), (0.016, 0.0405, 0.04))
_HAND_RGBA = (0.25, 0.25, 0.28, 1.0)
# Contact bits (contype, conaffinity) of the palm and of each link of a finger, by link: the
# palm and the proximal links (link 2, which starts beside or inside the palm box) never touch
# each other, as the vendor's model keeps them apart; each touches everything else, which has
# MuJoCo's default bits (1, 1). A finger's link 1 is the knuckle's short yoke, which the
# vendor's model does not collide either; the thumb's, which sits inside the palm, is drawn
# only.
_PALM_CONTACT = (2, 1)
_CONTACT: tuple[tuple[int, int], ...] = ((0, 0), (4, 5), (1, 1))


def towards_thumb(side: str) -> float:
    """The sign of a sideways joint's turn (joint 2 of fingers 2-5) that moves the finger
    towards the thumb on hand ``side``: the vendor's left hand keeps the right's sense."""
    if side not in ("right", "left"):
        raise ValueError(f"side must be 'right' or 'left', got {side!r}")
    return 1.0 if side == "right" else -1.0


def _mirror_pos(p: Sequence[float], mirror: bool) -> list[float]:
    """Reflect a position across the palm's y = 0 plane when ``mirror`` is set."""
    return [p[0], -p[1], p[2]] if mirror else list(p)


def _mirror_quat(q: Sequence[float], mirror: bool) -> list[float]:
    """The frame reflected across the y = 0 plane (kept right-handed) when ``mirror`` is set:
    a hinge about the same local axis then moves as the reflection of the original."""
    return [q[0], -q[1], q[2], -q[3]] if mirror else list(q)


def _capsule(
    body: mujoco.MjsBody, name: str, end: Sequence[float], contact: tuple[int, int]
) -> None:
    """A phalanx capsule from the body's origin to ``end`` (its local frame), with the contact
    bits ``contact`` (contype, conaffinity; none: drawn only)."""
    geom = body.add_geom(
        name=name,
        type=mujoco.mjtGeom.mjGEOM_CAPSULE,
        fromto=[0.0, 0.0, 0.0, *end],
        size=[WUJI_PHALANX_RADIUS, 0.0, 0.0],
        rgba=list(_HAND_RGBA),
        friction=[1.0, 0.02, 0.001],
        condim=4,
    )
    geom.contype, geom.conaffinity = contact
    if contact == (0, 0):
        geom.group = 2


def _inertial(body: mujoco.MjsBody, mass: float, end: Sequence[float]) -> None:
    """The link's mass spread along the segment from its origin to ``end``."""
    length = max(float(np.linalg.norm(end)), 0.005)
    set_inertial(
        body,
        mass,
        [0.5 * float(e) for e in end],
        cylinder_inertia(mass, WUJI_PHALANX_RADIUS, length),
    )


def _tip_end(tip: Sequence[float]) -> list[float]:
    """Where the distal capsule's axis ends: a radius short of the tip."""
    t = np.asarray(tip, dtype=float)
    return list(t - WUJI_PHALANX_RADIUS * t / np.linalg.norm(t))


def add_wuji_hand(
    parent: mujoco.MjsBody,
    prefix: str,
    pos: Vec3 = (0.0, 0.0, 0.0),
    quat: Quat = (1.0, 0.0, 0.0, 0.0),
    side: str = "right",
    gravcomp: float = 1.0,
) -> HandNames:
    """Add a 20-DoF Wuji Hand 2 under ``parent`` with its palm frame at ``pos``/``quat``.

    Joints are named ``{prefix}finger{f}_joint{k}`` (the vendor's names without their side),
    links ``{prefix}finger{f}_link{k}``; fingertip sites ``{prefix}finger{f}_tip``.
    ``HAND_MOUNT_POS``/``HAND_MOUNT_QUAT`` put it on the arm's flange.
    """
    if side not in ("right", "left"):
        raise ValueError(f"side must be 'right' or 'left', got {side!r}")
    mirror = side == "left"
    scale = angle_scale(parent)
    palm = _add_palm(parent, prefix, pos, quat, mirror, gravcomp)
    bodies: list[str] = [palm.name]
    joints: list[str] = []
    tips: list[str] = []
    for finger in range(1, FINGERS + 1):
        links, finger_joints, tip = _add_finger(palm, prefix, finger, mirror, scale, gravcomp)
        bodies += links
        joints += finger_joints
        tips.append(tip)
    return HandNames(
        robot=WUJI_HAND_NAME,
        joints=tuple(joints),
        tip_sites=tuple(tips),
        palm_site=f"{prefix}palm",
        bodies=tuple(bodies),
    )


def _add_palm(
    parent: mujoco.MjsBody, prefix: str, pos: Vec3, quat: Quat, mirror: bool, gravcomp: float
) -> mujoco.MjsBody:
    """Add the palm body with its box and its ``{prefix}palm`` site on the front face."""
    palm = parent.add_body(name=f"{prefix}palm_link", pos=list(pos), quat=list(quat))
    palm.gravcomp = gravcomp
    centre, half = _PALM_BOX
    m, (hx, hy, hz) = WUJI_PALM_MASS, half
    box_inertia = [m * (hy**2 + hz**2) / 3.0, m * (hx**2 + hz**2) / 3.0, m * (hx**2 + hy**2) / 3.0]
    set_inertial(palm, m, _mirror_pos(centre, mirror), box_inertia)
    palm.add_geom(
        name=f"{prefix}palm_geom",
        type=mujoco.mjtGeom.mjGEOM_BOX,
        size=list(half),
        pos=_mirror_pos(centre, mirror),
        rgba=list(_HAND_RGBA),
        friction=[1.0, 0.02, 0.001],
        condim=4,
        contype=_PALM_CONTACT[0],
        conaffinity=_PALM_CONTACT[1],
    )
    front = (centre[0] + half[0], centre[1], centre[2])
    palm.add_site(name=f"{prefix}palm", pos=_mirror_pos(front, mirror), size=[0.006, 0.0, 0.0])
    return palm


def _reflects(k: int, thumb: bool, mirror: bool) -> bool:
    """Whether link ``k``'s origin (k = 4: the tip) is reflected: the vendor's left file keeps
    the right's 0.2 mm sideways offset of fingers 2-5's distal link and tip unreflected."""
    return mirror and (thumb or k < 3)


def _add_finger(
    palm: mujoco.MjsBody, prefix: str, finger: int, mirror: bool, scale: float, gravcomp: float
) -> tuple[list[str], list[str], str]:
    """Add finger ``finger`` (1: the thumb) to ``palm``; returns its links, joints and tip site."""
    thumb = finger == 1
    if thumb:
        links, tip, masses = _THUMB_LINKS, _THUMB_TIP, WUJI_THUMB_MASSES
    else:
        links = (_FINGER_BASES[finger - 2], *_FINGER_LINKS)
        tip, masses = _FINGER_TIP, WUJI_FINGER_MASSES
    # Each link's capsule runs to the next link's origin; the last one's to the tip.
    ends = [links[k + 1][0] for k in range(3)] + [_tip_end(tip)]
    names: list[str] = []
    joints: list[str] = []
    body = palm
    for k in range(JOINTS_PER_FINGER):
        link_pos, link_quat = links[k]
        name = f"{prefix}finger{finger}_link{k + 1}"
        body = body.add_body(
            name=name,
            pos=_mirror_pos(link_pos, _reflects(k, thumb, mirror)),
            quat=_mirror_quat(link_quat, mirror),
        )
        body.gravcomp = gravcomp
        end = _mirror_pos(ends[k], _reflects(k + 1, thumb, mirror))
        _inertial(body, masses[k], end)
        if k > 0 or thumb:
            _capsule(body, f"{name}_geom", end, _CONTACT[min(k, 2)])
        axis = list(_AXIS)
        if mirror and not thumb and k == ABDUCTION_JOINT:
            axis = [-a for a in axis]
        joint = body.add_joint(
            name=f"{prefix}finger{finger}_joint{k + 1}",
            type=mujoco.mjtJoint.mjJNT_HINGE,
            axis=axis,
            limited=mujoco.mjtLimited.mjLIMITED_TRUE,
            range=list(WUJI_HAND_JOINT_RANGES[JOINTS_PER_FINGER * (finger - 1) + k] * scale),
            armature=0.0003,
            damping=[0.01, 0.0, 0.0],
        )
        names.append(name)
        joints.append(joint.name)
    tip_site = f"{prefix}finger{finger}_tip"
    # The fingertip site sits half a radius inside the tip.
    shrink = 1.0 - 0.5 * WUJI_PHALANX_RADIUS / float(np.linalg.norm(tip))
    tip_at = [shrink * t for t in tip]
    body.add_site(
        name=tip_site, pos=_mirror_pos(tip_at, _reflects(4, thumb, mirror)), size=[0.004, 0.0, 0.0]
    )
    return names, joints, tip_site


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
