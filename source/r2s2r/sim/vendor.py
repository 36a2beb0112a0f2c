"""Use a vendor MJCF for the arm or the hand instead of the models r2s2r authors.

The file is loaded with ``MjSpec.from_file`` and attached in place of the authored model.
What r2s2r needs from it, and checks with a clear error:

- arm: exactly 7 hinge joints, base to wrist; the flange is the site ``attachment_site``
  (the MuJoCo Menagerie convention) or, failing that, the last body of the chain; joint
  velocity limits, which MJCF has no field for: the ``ctrlrange`` of a ``<velocity>``
  actuator on every joint, or else ``assets.arm_velocity_limits`` of the world (which wins
  where both are given).
- hand: the vendor's 20 hinge joints, found by name (``right_finger{f}_joint{k}`` in the right
  hand's file, ``left_...`` in the left's, or without the side), in the vendor's order (thumb
  first, joints 1-4 of each finger from the palm out). The vendor ships one file per hand:
  ``{side}`` in the path stands for ``right`` or ``left``. The palm is mounted on the flange
  as the authored hand's is (``HAND_MOUNT_POS``/``HAND_MOUNT_QUAT``): the authored hand's
  palm frame is the vendor's.

Joints are renamed to r2s2r's names (``{prefix}j1..7``; the hand's keep the vendor's names
without their side, ``{prefix}finger{f}_joint{k}``) so the rest of the system does not care
where a model came from; their ranges stay the file's, so the embodiment's limits are the
vendor model's. The file's own actuators, keyframes and sensors are dropped, because the cell
adds its own controllers.
"""

from __future__ import annotations

from pathlib import Path

import mujoco
import numpy as np

from r2s2r.sim.robots import WUJI_JOINT_NAMES, ArmNames, HandNames

_HINGE = mujoco.mjtJoint.mjJNT_HINGE
# The robots a vendor file stands in for, and their joint counts: a vendor model is another
# model of the same robot, so the embodiment keeps its name.
ARM_ROBOT, ARM_JOINTS = "rizon4s", 7
HAND_ROBOT, HAND_JOINTS = "wuji2", 20


def _velocity_limits(spec: mujoco.MjSpec) -> dict[str, float]:
    """Joint name -> velocity limit (rad/s) from the file's ``<velocity>`` actuators."""
    out = {}
    for act in spec.actuators:
        velocity = (
            act.trntype == mujoco.mjtTrn.mjTRN_JOINT
            and act.gaintype == mujoco.mjtGain.mjGAIN_FIXED
            and act.biastype == mujoco.mjtBias.mjBIAS_AFFINE
            and act.gainprm[0] > 0
            and act.biasprm[1] == 0
            and act.biasprm[2] == -act.gainprm[0]
        )
        lo, hi = act.ctrlrange
        if velocity and act.ctrllimited != mujoco.mjtLimited.mjLIMITED_FALSE and lo < 0 < hi:
            out[act.target] = float(min(-lo, hi))
    return out


def _load(path: str, what: str) -> tuple[mujoco.MjSpec, dict[str, float]]:
    """The file's spec without actuators, keys and sensors (radians), and the joint velocity
    limits its velocity actuators gave."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise FileNotFoundError(f"assets.{what}_mjcf: {p} does not exist")
    try:
        spec = mujoco.MjSpec.from_file(str(p))
    except ValueError as err:
        raise ValueError(f"assets.{what}_mjcf: {p} is not a loadable MJCF: {err}") from None
    velocity = _velocity_limits(spec)
    for kind in (spec.actuators, spec.keys, spec.sensors):
        for element in list(kind):
            spec.delete(element)
    spec.nkey = 0
    if spec.compiler.degree:
        # Attached elements keep their own compiler's angle units; make them radians here.
        spec.compiler.degree = False
        for joint in spec.joints:
            joint.range = np.radians(joint.range)
    return spec, velocity


def _hinges(body: mujoco.MjsBody) -> list[mujoco.MjsJoint]:
    return [j for j in body.find_all(mujoco.mjtObj.mjOBJ_JOINT) if j.type == _HINGE]


def attach_vendor_arm(
    parent: mujoco.MjsBody,
    prefix: str,
    path: str,
    pos: tuple[float, ...],
    quat: tuple[float, ...],
    tcp_offset: float = 0.12,
    velocity_limits: tuple[float, ...] | None = None,
) -> ArmNames:
    """Attach the arm in ``path`` at ``pos``/``quat`` and return r2s2r's names for it;
    ``velocity_limits`` (rad/s per joint) replace the file's own."""
    child, file_velocity = _load(path, "arm")
    root = child.worldbody.first_body()
    if root is None:
        raise ValueError(f"assets.arm_mjcf: {path} has no body under its worldbody")
    frame = parent.add_frame(pos=list(pos), quat=list(quat))
    base = frame.attach_body(root, prefix, "")
    joints = _hinges(base)
    if len(joints) != ARM_JOINTS:
        raise ValueError(
            f"assets.arm_mjcf: {path} has {len(joints)} hinge joints; a Rizon 4S "
            f"model has {ARM_JOINTS} (base to wrist)"
        )
    velocity = _arm_velocity(path, [j.name.removeprefix(prefix) for j in joints], file_velocity)
    if velocity_limits is not None:
        if len(velocity_limits) != ARM_JOINTS:
            raise ValueError(
                f"assets.arm_velocity_limits: expected {ARM_JOINTS} values (rad/s, base to "
                f"wrist), got {len(velocity_limits)}"
            )
        velocity = tuple(float(v) for v in velocity_limits)
    elif velocity is None:
        raise ValueError(
            f"assets.arm_mjcf: {path} gives no joint velocity limits (a <velocity> actuator "
            f"with a ctrlrange on every joint); set assets.arm_velocity_limits ({ARM_JOINTS} "
            "values, rad/s)"
        )
    names = tuple(f"{prefix}j{i + 1}" for i in range(ARM_JOINTS))
    for joint, name in zip(joints, names, strict=True):
        joint.name = name
        joint.actgravcomp = True
    bodies = base.find_all(mujoco.mjtObj.mjOBJ_BODY)
    for body in [base, *bodies]:
        body.gravcomp = 1.0
    taken = {b.name for b in bodies} | {s.name for s in base.find_all(mujoco.mjtObj.mjOBJ_SITE)}
    clash = taken & {f"{prefix}flange", f"{prefix}flange_site", f"{prefix}tcp"}
    if clash:
        raise ValueError(
            f"assets.arm_mjcf: {path} names {sorted(n[len(prefix) :] for n in clash)}"
            ", which r2s2r adds itself; rename them in the file"
        )
    sites = [
        s for s in base.find_all(mujoco.mjtObj.mjOBJ_SITE) if s.name.endswith("attachment_site")
    ]
    if sites:
        mount, pos_, quat_ = sites[0].parent, list(sites[0].pos), list(sites[0].quat)
    else:
        mount, pos_, quat_ = (bodies[-1] if bodies else base), [0.0, 0.0, 0.0], [1, 0, 0, 0]
    flange = mount.add_body(name=f"{prefix}flange", pos=pos_, quat=quat_)
    flange.add_site(name=f"{prefix}flange_site", size=[0.005] * 3)
    flange.add_site(name=f"{prefix}tcp", pos=[0.0, 0.0, tcp_offset], size=[0.005] * 3)
    return ArmNames(
        robot=ARM_ROBOT,
        base=base.name,
        joints=names,
        flange=flange.name,
        flange_site=f"{prefix}flange_site",
        tcp_site=f"{prefix}tcp",
        velocity_limits=velocity,
    )


def _arm_velocity(
    path: str, joints: list[str], limits: dict[str, float]
) -> tuple[float, ...] | None:
    """The file's velocity limit of every joint in ``joints``, or None if it gives none."""
    if not limits:
        return None
    missing = [j for j in joints if j not in limits]
    if missing:
        raise ValueError(
            f"assets.arm_mjcf: {path} has <velocity> actuators, but none on joints {missing}; "
            "give one per joint or set assets.arm_velocity_limits"
        )
    return tuple(limits[j] for j in joints)


def hand_file(path: str, side: str) -> str:
    """The hand file of ``side``: ``path`` with ``{side}`` replaced (the vendor ships
    ``mjcf/right.xml`` and ``mjcf/left.xml``), or ``path`` itself."""
    return path.replace("{side}", side)


def attach_vendor_hand(
    parent: mujoco.MjsBody,
    prefix: str,
    path: str,
    side: str,
    pos: tuple[float, ...] = (0.0, 0.0, 0.0),
    quat: tuple[float, ...] = (1.0, 0.0, 0.0, 0.0),
) -> HandNames:
    """Attach the ``side`` hand in ``path`` (``{side}`` in it is replaced) to ``parent`` (the
    flange), its palm frame at ``pos``/``quat``, and return r2s2r's names for it."""
    path = hand_file(path, side)
    child, _ = _load(path, "hand")
    root = child.worldbody.first_body()
    if root is None:
        raise ValueError(f"assets.hand_mjcf: {path} has no body under its worldbody")
    palm = parent.add_frame(pos=list(pos), quat=list(quat)).attach_body(root, prefix, "")
    joints = _hinges(palm)
    if len(joints) != HAND_JOINTS:
        raise ValueError(
            f"assets.hand_mjcf: {path} has {len(joints)} hinge joints; a Wuji "
            f"Hand 2 model has {HAND_JOINTS} (5 fingers x 4, thumb first)"
        )
    by_name = {j.name.removeprefix(prefix): j for j in joints}
    other = "left" if side == "right" else "right"
    if any(n.startswith(f"{other}_") for n in by_name):
        raise ValueError(
            f"assets.hand_mjcf: {path} is a {other} hand (its joints are named "
            f"{other}_...), mounted on the {side} arm; give the path with {{side}} in it "
            "(e.g. wuji-hand-description/mjcf/{side}.xml)"
        )
    names = []
    for vendor_name in WUJI_JOINT_NAMES:
        matches = [j for n, j in by_name.items() if n in (vendor_name, f"{side}_{vendor_name}")]
        if len(matches) != 1:
            raise ValueError(
                f"assets.hand_mjcf: {path} has no joint {side}_{vendor_name} (the vendor's "
                f"names: {side}_finger1_joint1 .. {side}_finger5_joint4); its joints: "
                f"{sorted(by_name)}"
            )
        matches[0].name = f"{prefix}{vendor_name}"
        names.append(matches[0].name)
    order = [j.name for j in joints]
    if order != names:
        raise ValueError(
            f"assets.hand_mjcf: {path} lists its joints in another order than the vendor's "
            f"(thumb first, joints 1-4 of each finger from the palm out): {order}"
        )
    bodies = palm.find_all(mujoco.mjtObj.mjOBJ_BODY)
    for body in [palm, *bodies]:
        body.gravcomp = 1.0
    palm.add_site(name=f"{prefix}palm", size=[0.005] * 3)
    return HandNames(
        robot=HAND_ROBOT,
        joints=tuple(names),
        tip_sites=(),
        palm_site=f"{prefix}palm",
        bodies=tuple(b.name for b in [palm, *bodies]),
    )
