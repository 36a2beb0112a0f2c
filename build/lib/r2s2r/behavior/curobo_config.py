"""The cell as cuRobo's configuration (NVlabs/curobo v0.7), for the cuRobo carry backend
(``r2s2r.behavior.curobo``): a URDF of one arm whose root link is the cell frame (so cuRobo
plans in the frame ``ArmKinematics`` works in, and its end-effector is the cell's TCP),
spheres covering the arm's link capsules and the hand at its carry posture, and cuboids
bounding what ``ArmKinematics.collides`` checks against (table, belt, bins and the other arm
at home). Only numpy and MuJoCo: tested on the CPU.
"""

from __future__ import annotations

import itertools
from typing import Any, TypedDict

import mujoco
import numpy as np

from r2s2r.behavior.kinematics import SELF_SKIP, ArmKinematics
from r2s2r.sim.embodiment import Embodiment
from r2s2r.spec import Spec
from r2s2r.spec.base import NonNeg, NonNegInt, Pos, PosInt, Share

ROOT_LINK = "world"  # The URDF's root link: the cell frame.
END_TOL_RAD = 1e-3  # The most a cuRobo route may miss its ends by.
CUROBO_INSTALL = "pip install git+https://github.com/NVlabs/curobo.git --no-build-isolation"


class SphereCfg(TypedDict):
    center: list[float]  # in the link's frame (m)
    radius: float


class CuboidCfg(TypedDict):
    dims: list[float]  # full side lengths (m)
    pose: list[float]  # x y z qw qx qy qz, cell frame


class CuroboCfg(Spec):
    """cuRobo's model of the arm and the carry's motion limits."""

    # The most a collision sphere reaches beyond the geometry it covers (m).
    overshoot_m: Pos = 0.015
    # cuRobo's collision_sphere_buffer, added to every sphere's radius (m).
    sphere_buffer_m: NonNeg = 0.0
    # Links this close along the chain (link1 .. link7, hand) are not checked for collisions
    # with each other (their spheres overlap at the joints).
    self_collision_skip: NonNegInt = SELF_SKIP
    # Limits as the CPU planner's: a share of the arm's velocity limits, acceleration
    # (rad/s^2) and jerk (rad/s^3). cuRobo plans at full speed, with acceleration and jerk
    # limits raised to match, then slows the plan down by vel_share (its time dilation,
    # which its docs recommend over scaling the limits).
    vel_share: Share = 0.5
    max_acc: Pos = 3.0
    max_jerk: Pos = 20.0
    # Per carry query: attempts and time budget (s).
    max_attempts: PosInt = 5
    timeout_s: Pos = 1.0


DEFAULT_CUROBO = CuroboCfg()


def joint_names(side: str) -> list[str]:
    """The arm's joints, as in the cell and the URDF."""
    return [f"{side}_j{i + 1}" for i in range(7)]


def collision_links(side: str) -> list[str]:
    """cuRobo's collision links along the chain: the seven arm links, then the hand (a link
    fixed at the flange, carrying the hand's spheres at one posture)."""
    return [f"{side}_link{i + 1}" for i in range(7)] + [f"{side}_hand"]


# ---------------------------------------------------------------------------------- URDF
def _f(values: Any) -> str:
    return " ".join(f"{float(v):.17g}" for v in np.ravel(values))


def _rpy(quat: Any) -> np.ndarray:
    """Roll, pitch, yaw (URDF: R = Rz(yaw) Ry(pitch) Rx(roll)) of a (w, x, y, z) quaternion."""
    mat = np.zeros(9)
    mujoco.mju_quat2Mat(mat, np.asarray(quat, float) / np.linalg.norm(quat))
    r = mat.reshape(3, 3)
    pitch = np.arcsin(np.clip(-r[2, 0], -1.0, 1.0))
    if abs(r[2, 0]) < 1 - 1e-12:
        return np.array([np.arctan2(r[2, 1], r[2, 2]), pitch, np.arctan2(r[1, 0], r[0, 0])])
    # Gimbal lock: only roll - yaw (or roll + yaw) is defined; put it all in roll.
    return np.array([np.arctan2(-r[1, 2], r[1, 1]), pitch, 0.0])


def _fixed(name: str, parent: str, child: str, xyz: Any, rpy: Any) -> str:
    return (
        f'  <joint name="{name}" type="fixed"><parent link="{parent}"/><child link="{child}"/>'
        f'<origin xyz="{_f(xyz)}" rpy="{_f(rpy)}"/></joint>\n'
    )


def cell_arm_urdf(model: mujoco.MjModel, side: str) -> str:
    """A URDF of arm ``side`` of the compiled cell ``model``: root link ``world`` (the cell
    frame), ``{side}_base`` at the base pose, ``{side}_link1..7`` on revolute joints
    ``{side}_j1..7`` with the embodiment's position and velocity limits and the joints'
    torque limits, ``{side}_flange``, ``{side}_hand`` (at the flange) and ``{side}_tcp``.
    Link frames are the cell model's body frames; links carry no inertia or geometry (cuRobo
    takes only the kinematics from the URDF)."""
    base = model.body(f"{side}_base")
    tcp = model.site(f"{side}_tcp")
    if base.parentid[0] != 0 or model.body(tcp.bodyid[0]).name != f"{side}_flange":
        raise ValueError(f"{side} arm: expected its base on the world and its TCP on the flange")
    emb = Embodiment.of(model)
    links = [f"link{i + 1}" for i in range(emb.arm_dof)]
    arm = [f"{side}_{name}" for name in ("base", *links, "flange")]
    out = f'<?xml version="1.0"?>\n<robot name="{side}_arm">\n'
    for name in (ROOT_LINK, *arm, f"{side}_hand", f"{side}_tcp"):
        out += f'  <link name="{name}"/>\n'
    out += _fixed(f"{side}_base_mount", ROOT_LINK, arm[0], base.pos, _rpy(base.quat))
    velocity = emb.arm_velocity_limits
    for i, name in enumerate(emb.arm_joint_names(side)):
        joint, body = model.joint(name), model.body(arm[i + 1])
        if joint.bodyid[0] != body.id or np.any(joint.pos):
            raise ValueError(f"{side} arm: joint {name} must sit at the origin of {body.name}")
        lo, hi = emb.arm_limits[i]
        effort = float(np.abs(model.jnt_actfrcrange[joint.id]).max())
        origin = f'<origin xyz="{_f(body.pos)}" rpy="{_f(_rpy(body.quat))}"/>'
        out += (
            f'  <joint name="{name}" type="revolute"><parent link="{arm[i]}"/>'
            f'<child link="{arm[i + 1]}"/>{origin}'
            f'<axis xyz="{_f(joint.axis)}"/><limit lower="{lo:.17g}" '
            f'upper="{hi:.17g}" effort="{effort:.17g}" '
            f'velocity="{velocity[i]:.17g}"/></joint>\n'
        )
    flange = model.body(arm[-1])
    out += _fixed(f"{side}_flange_mount", arm[-2], arm[-1], flange.pos, _rpy(flange.quat))
    out += _fixed(f"{side}_hand_mount", arm[-1], f"{side}_hand", (0, 0, 0), (0, 0, 0))
    out += _fixed(f"{side}_tcp_mount", arm[-1], f"{side}_tcp", tcp.pos, _rpy(tcp.quat))
    return out + "</robot>\n"


# ------------------------------------------------------------------------ collision spheres
def _capsule_spheres(radius: float, half: float, overshoot: float) -> tuple[np.ndarray, ...]:
    """Spheres along a capsule's axis (z), each ``overshoot`` wider than the capsule, close
    enough that together they cover its surface."""
    big = radius + overshoot
    step = 2.0 * np.sqrt(big**2 - radius**2)
    n = int(np.ceil(2.0 * half / step)) + 1 if half > 0 else 1
    z = np.linspace(-half, half, n)
    return np.stack([np.zeros(n), np.zeros(n), z], axis=1), np.full(n, big)


def _box_spheres(half: np.ndarray, overshoot: float) -> tuple[np.ndarray, ...]:
    """The fewest spheres on a regular grid of cells, each circumscribing its cell, that
    reach at most ``overshoot`` beyond the box (a cell's sphere reaches its radius less the
    cell's smallest half side beyond it)."""
    # Cells of half sides at most overshoot / 2 always fit (they reach at most 0.87 of it).
    most = np.maximum(1, np.ceil(2.0 * half / overshoot).astype(int))
    best: tuple[int, float, tuple[int, ...]] | None = None
    for counts in itertools.product(*(range(1, m + 1) for m in most)):
        cell = half / np.array(counts)
        radius = float(np.linalg.norm(cell))
        if radius - cell.min() <= overshoot + 1e-12:
            key = (int(np.prod(counts)), radius, counts)
            best = key if best is None or key[:2] < best[:2] else best
    assert best is not None
    cell = half / np.array(best[2])
    axes = [(2 * np.arange(n) + 1 - n) * c for n, c in zip(best[2], cell, strict=True)]
    centres = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, 3)
    return centres, np.full(len(centres), best[1])


def _geom_spheres(model: mujoco.MjModel, g: int, overshoot: float) -> tuple[np.ndarray, ...]:
    """Spheres (centres (n, 3) in the geom's frame, radii (n,)) covering geom ``g``: exact
    for spheres, capsules and boxes, other shapes through their bounding box."""
    kind, size = mujoco.mjtGeom(int(model.geom_type[g])), model.geom_size[g]
    if kind == mujoco.mjtGeom.mjGEOM_SPHERE:
        return np.zeros((1, 3)), np.array([size[0]])
    if kind == mujoco.mjtGeom.mjGEOM_CAPSULE:
        return _capsule_spheres(float(size[0]), float(size[1]), overshoot)
    if kind == mujoco.mjtGeom.mjGEOM_BOX:
        return _box_spheres(size.copy(), overshoot)
    if kind in (mujoco.mjtGeom.mjGEOM_PLANE, mujoco.mjtGeom.mjGEOM_HFIELD):
        raise ValueError(f"geom {model.geom(g).name or g}: a robot link cannot be a plane")
    centres, radii = _box_spheres(model.geom_aabb[g, 3:].copy(), overshoot)
    return centres + model.geom_aabb[g, :3], radii


def _can_collide(model: mujoco.MjModel, geoms: np.ndarray, others: np.ndarray) -> np.ndarray:
    """Which of ``geoms`` can touch any of ``others`` (MuJoCo's contype/conaffinity test)."""
    ct, ca = model.geom_contype, model.geom_conaffinity
    return np.array(
        [bool(((ct[g] & ca[others]) | (ct[others] & ca[g])).any()) for g in geoms], dtype=bool
    )


def collision_spheres(
    model: mujoco.MjModel, side: str, hand: np.ndarray, overshoot_m: float = 0.015
) -> dict[str, list[SphereCfg]]:
    """cuRobo's ``collision_spheres``: per collision link of arm ``side``, spheres in the
    link's frame covering its collision geoms; the hand's (at posture ``hand`` (20,)) in the
    flange frame, as the ``{side}_hand`` link. No sphere reaches more than ``overshoot_m``
    beyond the capsule or box it covers."""
    if overshoot_m <= 0:
        raise ValueError(f"overshoot_m must be positive, got {overshoot_m}")
    kin = ArmKinematics(model, side, model.qpos0)
    data = mujoco.MjData(model)
    data.qpos[kin.hand_qadr] = hand
    mujoco.mj_kinematics(model, data)
    flange = model.body(f"{side}_flange").id
    links = collision_links(side)
    mine = np.concatenate([kin.link_geoms, kin.hand_geoms])
    out: dict[str, list[SphereCfg]] = {name: [] for name in links}
    for g in mine[_can_collide(model, mine, kin.fixed_geoms)]:
        body_name = model.body(model.geom_bodyid[g]).name
        frame = int(model.geom_bodyid[g]) if body_name in links else flange
        link = body_name if body_name in links else links[-1]
        to_link = data.xmat[frame].reshape(3, 3).T  # Cell frame to the link's.
        pos = to_link @ (data.geom_xpos[g] - data.xpos[frame])
        rot = to_link @ data.geom_xmat[g].reshape(3, 3)
        centres, radii = _geom_spheres(model, int(g), overshoot_m)
        for c, r in zip(centres @ rot.T + pos, radii, strict=True):
            out[link].append({"center": [float(x) for x in c], "radius": float(r)})
    return {name: _drop_contained(spheres) for name, spheres in out.items()}


def _drop_contained(spheres: list[SphereCfg]) -> list[SphereCfg]:
    """Without the spheres inside another (where a chain's capsules meet; of equal ones the
    first stays)."""
    c = np.array([s["center"] for s in spheres]).reshape(-1, 3)
    r = np.array([s["radius"] for s in spheres])
    inside = np.linalg.norm(c[:, None] - c[None], axis=2) + r[:, None] <= r[None] + 1e-9
    inside &= (r[:, None] < r[None]) | np.tri(len(r), k=-1, dtype=bool)
    return [s for s, gone in zip(spheres, inside.any(axis=1), strict=True) if not gone]


# ---------------------------------------------------------------------------------- world
def world_cuboids(
    model: mujoco.MjModel, side: str, qpos: np.ndarray, sweep_m: float = 0.0
) -> dict[str, dict[str, CuboidCfg]]:
    """cuRobo's world (``{"cuboid": {name: {"dims", "pose"}}}``, cell frame) for arm
    ``side``: a box per geom it can collide with among those ``ArmKinematics.collides``
    checks (table, floor, belt, bins, the other arm and hand), as they are in ``qpos`` (nq,).
    Boxes map exactly; other shapes get their bounding box; a plane a 10 cm slab under it.
    Geoms on a sliding body (the belt) are stretched ``sweep_m`` each way along the slide."""
    kin = ArmKinematics(model, side, qpos)
    data = mujoco.MjData(model)
    data.qpos[:] = qpos
    mujoco.mj_kinematics(model, data)
    mine = np.concatenate([kin.link_geoms, kin.hand_geoms])
    fixed = kin.fixed_geoms[_can_collide(model, kin.fixed_geoms, mine)]
    cuboids: dict[str, CuboidCfg] = {}
    for g in fixed:
        body = int(model.geom_bodyid[g])
        name = model.geom(g).name or f"{model.body(body).name}/{g - model.body_geomadr[body]}"
        cuboids[name] = _cuboid(model, data, int(g), sweep_m)
    return {"cuboid": cuboids}


def _cuboid(model: mujoco.MjModel, data: mujoco.MjData, g: int, sweep_m: float) -> CuboidCfg:
    """The box (cell frame) holding geom ``g`` as posed in ``data``, and its sweep."""
    rot = data.geom_xmat[g].reshape(3, 3)
    if model.geom_type[g] == mujoco.mjtGeom.mjGEOM_PLANE:
        sx, sy = (s if s > 0 else 50.0 for s in model.geom_size[g, :2])
        centre, half = np.array([0.0, 0.0, -0.05]), np.array([sx, sy, 0.05])
    else:
        centre, half = model.geom_aabb[g, :3], model.geom_aabb[g, 3:].copy()
    body = model.geom_bodyid[g]
    for j in range(model.body_jntadr[body], model.body_jntadr[body] + model.body_jntnum[body]):
        if model.jnt_type[j] == mujoco.mjtJoint.mjJNT_SLIDE:
            half += np.abs(rot.T @ data.xaxis[j]) * sweep_m  # xaxis: the slide, cell frame.
    quat = np.zeros(4)
    mujoco.mju_mat2Quat(quat, rot.ravel())
    pose = np.concatenate([data.geom_xpos[g] + rot @ centre, quat])
    return {"dims": [float(x) for x in 2 * half], "pose": [float(x) for x in pose]}


# --------------------------------------------------------------------------- robot config
def robot_config(
    model: mujoco.MjModel,
    side: str,
    hand: np.ndarray,
    urdf_path: str,
    retract: np.ndarray,
    cfg: CuroboCfg = DEFAULT_CUROBO,
) -> dict[str, Any]:
    """cuRobo's robot configuration (``RobotConfig.from_dict``'s ``{"kinematics": ...}``)
    of arm ``side`` with its hand shut in posture ``hand`` (20,): the URDF at ``urdf_path``
    (``cell_arm_urdf``), planning from the cell frame to the TCP, and ``retract`` (7,) (the
    arm's home) as the posture cuRobo's IK and warmup regularise towards."""
    links = collision_links(side)
    names = joint_names(side)
    cspace = {
        "joint_names": names,
        "retract_config": [float(x) for x in retract],
        "null_space_weight": [1.0] * 7,
        "cspace_distance_weight": [1.0] * 7,
        # Lists of floats (cuRobo broadcasts a float but not an int), before time dilation.
        "max_acceleration": [float(cfg.max_acc / cfg.vel_share**2)] * 7,
        "max_jerk": [float(cfg.max_jerk / cfg.vel_share**3)] * 7,
    }
    kinematics = {
        "urdf_path": str(urdf_path),
        "base_link": ROOT_LINK,
        "ee_link": f"{side}_tcp",
        "link_names": [f"{side}_tcp"],
        "collision_link_names": links,
        "collision_spheres": collision_spheres(model, side, hand, cfg.overshoot_m),
        "collision_sphere_buffer": float(cfg.sphere_buffer_m),
        # cuRobo needs both dicts (it reads their keys) whenever links have spheres.
        "self_collision_ignore": {
            a: links[i + 1 : i + 1 + cfg.self_collision_skip] for i, a in enumerate(links[:-1])
        },
        "self_collision_buffer": {name: 0.0 for name in links},
        "cspace": cspace,
    }
    return {"kinematics": kinematics}
