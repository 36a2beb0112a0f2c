"""Use a vendor MJCF for the arm or the hand instead of the models r2s2r authors.

The file is loaded with ``MjSpec.from_file`` and attached in place of the authored model.
What r2s2r needs from it, and checks with a clear error:

- arm: exactly 7 hinge joints, base to wrist; the flange is the site ``attachment_site``
  (the MuJoCo Menagerie convention) or, failing that, the last body of the chain.
- hand: 20 hinge joints, finger 1 (the thumb) first, 4 per finger, base to tip.

Joints are renamed to r2s2r's names (``{prefix}j1..7``, ``{prefix}f{finger}_j{k}``) so the
rest of the system does not care where a model came from; the file's own actuators,
keyframes and sensors are dropped, because the cell adds its own controllers.
"""

from __future__ import annotations

from pathlib import Path

import mujoco
import numpy as np

from r2s2r.sim.robots import ArmNames, HandNames

_HINGE = mujoco.mjtJoint.mjJNT_HINGE


def _load(path: str, what: str) -> mujoco.MjSpec:
    p = Path(path).expanduser()
    if not p.is_file():
        raise FileNotFoundError(f"assets.{what}_mjcf: {p} does not exist")
    try:
        spec = mujoco.MjSpec.from_file(str(p))
    except ValueError as err:
        raise ValueError(f"assets.{what}_mjcf: {p} is not a loadable MJCF: {err}") from None
    for kind in (spec.actuators, spec.keys, spec.sensors):
        for element in list(kind):
            spec.delete(element)
    spec.nkey = 0
    if spec.compiler.degree:
        # Attached elements keep their own compiler's angle units; make them radians here.
        spec.compiler.degree = False
        for joint in spec.joints:
            joint.range = np.radians(joint.range)
    return spec


def _hinges(body: mujoco.MjsBody) -> list[mujoco.MjsJoint]:
    return [j for j in body.find_all(mujoco.mjtObj.mjOBJ_JOINT) if j.type == _HINGE]


def attach_vendor_arm(
    parent: mujoco.MjsBody,
    prefix: str,
    path: str,
    pos: tuple[float, ...],
    quat: tuple[float, ...],
    tcp_offset: float = 0.12,
) -> ArmNames:
    """Attach the arm in ``path`` at ``pos``/``quat`` and return r2s2r's names for it."""
    child = _load(path, "arm")
    root = child.worldbody.first_body()
    if root is None:
        raise ValueError(f"assets.arm_mjcf: {path} has no body under its worldbody")
    frame = parent.add_frame(pos=list(pos), quat=list(quat))
    base = frame.attach_body(root, prefix, "")
    joints = _hinges(base)
    if len(joints) != 7:
        raise ValueError(
            f"assets.arm_mjcf: {path} has {len(joints)} hinge joints; a Rizon 4S "
            "model has 7 (base to wrist)"
        )
    names = tuple(f"{prefix}j{i + 1}" for i in range(7))
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
        base=base.name,
        joints=names,
        flange=flange.name,
        flange_site=f"{prefix}flange_site",
        tcp_site=f"{prefix}tcp",
    )


def attach_vendor_hand(parent: mujoco.MjsBody, prefix: str, path: str) -> HandNames:
    """Attach the hand in ``path`` to ``parent`` (the flange) and return r2s2r's names."""
    child = _load(path, "hand")
    root = child.worldbody.first_body()
    if root is None:
        raise ValueError(f"assets.hand_mjcf: {path} has no body under its worldbody")
    palm = parent.add_frame().attach_body(root, prefix, "")
    joints = _hinges(palm)
    if len(joints) != 20:
        raise ValueError(
            f"assets.hand_mjcf: {path} has {len(joints)} hinge joints; a Wuji "
            "Hand 2 model has 20 (5 fingers x 4, thumb first)"
        )
    names = tuple(f"{prefix}f{f}_j{k}" for f in range(1, 6) for k in range(1, 5))
    for joint, name in zip(joints, names, strict=True):
        joint.name = name
    bodies = palm.find_all(mujoco.mjtObj.mjOBJ_BODY)
    for body in [palm, *bodies]:
        body.gravcomp = 1.0
    palm.add_site(name=f"{prefix}palm", size=[0.005] * 3)
    return HandNames(
        joints=names,
        tip_sites=(),
        palm_site=f"{prefix}palm",
        bodies=tuple(b.name for b in [palm, *bodies]),
    )
