"""Build the pick-and-sort cell with ``mujoco.MjSpec`` from a TaskSpec and a WorldSpec.

Actuator groups: 0 belt, 1 Cartesian (TCP) controller, 2 joint-position controller, 3 hands.
Only one of groups 1 and 2 is enabled, by the action mode the scene is built with
(``MjOption.disableactuator``). The compiled model names its embodiment (see
``r2s2r.sim.embodiment``), which every scene carries.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import mujoco
import numpy as np
from scipy.spatial.transform import Rotation

from r2s2r.sim import robots, vendor
from r2s2r.sim.camera import MJ_FROM_CV
from r2s2r.sim.embodiment import (
    ACTION_MODES,
    NAME_TEXT,
    ActionMode,
    Embodiment,
    arm_prefix,
    embodiment_name,
    hand_prefix,
    velocity_numeric,
)
from r2s2r.spec import TaskSpec, WorldSpec
from r2s2r.spec.task import ObjectSpec
from r2s2r.spec.world import ARM_SIDES, ArmControllerSpec
from r2s2r.spec.worlds import load_task, load_world

GROUP_BELT, GROUP_CARTESIAN, GROUP_JOINT, GROUP_HAND = 0, 1, 2, 3
CART_AXES = ("x", "y", "z", "rx", "ry", "rz")
# Orientation of the TCP reference frame in each arm's base frame: palm down, fingers forward.
# Cartesian rotation commands are rotation vectors relative to it, so they stay far from the
# +-pi wrap for the poses the task needs.
TCP_REF_IN_BASE = Rotation.from_euler("y", 180, degrees=True)
# TCP orientation for a palm-down grasp over the belt: palm normal (hand +y) down, fingers
# (hand +z) along the cell's +y, away from the robots.
PALM_DOWN = Rotation.from_matrix(np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, -1.0, 0.0]]))
PALM_DOWN_QUAT = PALM_DOWN.as_quat(scalar_first=True)  # (w, x, y, z)


def fingers_direction(yaw: float) -> np.ndarray:
    """Where the open fingers of a palm-down hand point (horizontal, cell frame) when the
    hand is turned by ``yaw`` about the vertical from straight across the belt: the TCP
    z axis of ``Rotation.from_euler("z", yaw) * PALM_DOWN``."""
    return np.array([-np.sin(yaw), np.cos(yaw), 0.0])


STORAGE_ORIGIN = np.array([3.0, 3.0, 0.0])
# Nearest distance (m) a camera draws.
NEAR_CLIP_M = 0.005
# The name of each object's body (and its free joint and geom) is this and the object's name.
OBJECT_PREFIX = "obj:"


@dataclass(frozen=True)
class Scene:
    """A compiled cell, the specs it was built from, its robot and its action mode."""

    model: mujoco.MjModel
    task: TaskSpec
    world: WorldSpec
    embodiment: Embodiment
    # Which arm controller the model enables: the Cartesian one (tcp) or joint positions.
    action_mode: ActionMode

    def name2id(self, kind: mujoco.mjtObj, name: str) -> int:
        i = mujoco.mj_name2id(self.model, kind, name)
        if i < 0:
            raise KeyError(f"no {kind.name} named {name!r} in the scene")
        return i


def quat_wxyz(rot: Rotation) -> list[float]:
    return list(rot.as_quat(scalar_first=True))


def yaw_quat(yaw_deg: float) -> list[float]:
    return quat_wxyz(Rotation.from_euler("z", yaw_deg, degrees=True))


def storage_pos(index: int) -> np.ndarray:
    """Where unused object ``index`` waits, resting on the floor far from the cell."""
    return STORAGE_ORIGIN + np.array([0.3 * index, 0.0, 0.0])


def new_spec(world: WorldSpec) -> mujoco.MjSpec:
    """An empty ``MjSpec`` with the cell's units and physics options (radians, the world's
    timestep, implicit-fast integration, elliptic friction cones): the cell and every model
    cut from it (system identification's arm and hand) simulate alike."""
    spec = mujoco.MjSpec()
    spec.compiler.degree = False
    spec.option.timestep = world.timestep
    spec.option.integrator = mujoco.mjtIntegrator.mjINT_IMPLICITFAST
    spec.option.cone = mujoco.mjtCone.mjCONE_ELLIPTIC
    spec.option.impratio = 5.0
    return spec


def build_spec(task: TaskSpec, world: WorldSpec) -> mujoco.MjSpec:
    """The cell as an editable ``MjSpec`` (compile it with ``spec.compile()``)."""
    spec = new_spec(world)
    spec.modelname = f"r2s2r_{task.name}_{world.name}"
    _visual(spec, world)
    _static_cell(spec, task, world)
    _belt(spec, task, world)
    # Both sides are built from the same assets, so they carry the same robot.
    arm, hand = [add_arm_and_hand(spec, world, side) for side in ARM_SIDES][0]
    spec.add_text(name=NAME_TEXT, data=embodiment_name(arm.robot, hand.robot, len(ARM_SIDES)))
    _cameras(spec, world)
    for i, obj in enumerate(task.all_objects):
        _object(spec, obj, i)
    return spec


def disabled_groups(action_mode: ActionMode) -> int:
    """``MjOption.disableactuator`` for ``action_mode``: the other arm controller off."""
    if action_mode not in ACTION_MODES:
        raise ValueError(f"action_mode must be one of {ACTION_MODES}, got {action_mode!r}")
    return 1 << (GROUP_JOINT if action_mode == "tcp" else GROUP_CARTESIAN)


def build_scene(
    task: TaskSpec,
    world: WorldSpec,
    extras: Callable[[mujoco.MjSpec], None] | None = None,
    action_mode: ActionMode = "tcp",
) -> Scene:
    """Compile the cell with the arm controller of ``action_mode`` enabled; ``extras`` may
    add to the spec first (the twin's calibration board)."""
    disabled = disabled_groups(action_mode)
    spec = build_spec(task, world)
    if extras is not None:
        extras(spec)
    model = spec.compile()
    model.opt.disableactuator = disabled
    # MuJoCo's near clipping plane is relative to the model's extent (metres across the whole
    # floor); a wrist camera must see its own palm a few centimetres away.
    model.vis.map.znear = NEAR_CLIP_M / model.stat.extent
    # Viewers' free cameras look at the cell, not at the centre of everything (which the
    # unused objects parked far away would pull aside).
    model.stat.center[:] = [0.0, -0.25, world.layout.table_height]
    embodiment = Embodiment.of(model)
    return Scene(model, task, world, embodiment, action_mode)


@functools.cache
@cache
def nominal_embodiment() -> Embodiment:
    """The embodiment of the nominal cell: the robot models r2s2r authors (built once)."""
    return build_scene(load_task("pick_sort"), load_world("nominal")).embodiment


# What MuJoCo 4 writes that MuJoCo 3.x's schema refuses, by element: a geom's castshadow (3.x
# has it on lights only), an actuator's input (3.x allows it on so3, pid and dcmotor only;
# a general actuator's gain and bias already say it acts on position or velocity).
NOT_IN_MUJOCO_3: dict[str, tuple[str, ...]] = {
    "geom": ("castshadow",),
    **{tag: ("input",) for tag in ("general", "motor", "position", "velocity", "intvelocity")},
}
MJCF_VERSIONS = (3, 4)


def export_mjcf(task: TaskSpec, world: WorldSpec, path: str | Path, mujoco_major: int = 4) -> Path:
    """Write the cell as one self-contained MJCF file (textures are builtin, no meshes) for
    MuJoCo ``mujoco_major`` (4: as this MuJoCo writes it; 3: without what 3.x refuses, for tools
    pinned to it, such as Isaac Lab's environment or MuJoCo's USD converter)."""
    if mujoco_major not in MJCF_VERSIONS:
        raise ValueError(
            f"mujoco_major: {mujoco_major}, expected one of {MJCF_VERSIONS} (a major version)"
        )
    path = Path(path)
    spec = build_spec(task, world)
    spec.compile()
    text = spec.to_xml()
    if mujoco_major == 3:
        text = _without(text, NOT_IN_MUJOCO_3)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _without(xml: str, attributes: dict[str, tuple[str, ...]]) -> str:
    """``xml`` with the given attributes of the given elements dropped."""
    import xml.etree.ElementTree as ET

    root = ET.fromstring(xml)
    for element in root.iter():
        for name in attributes.get(element.tag, ()):
            element.attrib.pop(name, None)
    ET.indent(root, space="  ")
    return ET.tostring(root, encoding="unicode") + "\n"


def _visual(spec: mujoco.MjSpec, world: WorldSpec) -> None:
    vis = spec.visual
    # Shadows and multisampling dominate software-rasterizer cost; they stay off unless asked.
    vis.quality.shadowsize = world.render.shadow_map if world.render.shadows else 0
    vis.quality.offsamples = world.render.offsamples
    vis.quality.numslices = world.render.tessellation
    vis.quality.numstacks = max(4, (2 * world.render.tessellation) // 3)
    # The viewer's free camera starts above the cell's left front corner.
    vis.global_.azimuth = -50.0
    vis.global_.elevation = -30.0
    vis.global_.offwidth = 1280
    vis.global_.offheight = 1280
    light = world.lighting
    vis.headlight.ambient = [light.ambient] * 3
    vis.headlight.diffuse = [0.2, 0.2, 0.2]
    vis.headlight.specular = [0.0, 0.0, 0.0]


def _static_cell(spec: mujoco.MjSpec, task: TaskSpec, world: WorldSpec) -> None:
    wb = spec.worldbody
    grid = spec.add_texture(
        name="floor_tex",
        type=mujoco.mjtTexture.mjTEXTURE_2D,
        builtin=mujoco.mjtBuiltin.mjBUILTIN_CHECKER,
        width=128,
        height=128,
        rgb1=[0.32, 0.33, 0.35],
        rgb2=[0.28, 0.29, 0.31],
    )
    floor_mat = spec.add_material(name="floor_mat", texrepeat=[4, 4], texuniform=True)
    floor_mat.textures[mujoco.mjtTextureRole.mjTEXROLE_RGB] = grid.name
    # A plane's third size is only the spacing of the grid its quads are drawn in (MuJoCo's
    # cells are twice it wide, plus a border cell per side): at 0.5 m the 12 m floor is 196
    # quads, not 3,844 at 0.1 m (each drawn again for the lit pass), which saves about a
    # quarter of the twin's three raw views' CPU time on a software rasterizer (64 -> 46 ms),
    # and its renders differ by at most 2 levels in a few pixels (per-vertex specular; PSNR
    # 65 dB).
    floor = wb.add_geom(
        name="floor", type=mujoco.mjtGeom.mjGEOM_PLANE, size=[6, 6, 0.5], material="floor_mat"
    )
    # It casts no shadow: nothing lies below it, and its quads are then left out of every
    # shadow map (the views are the same to the bit, about 5 % cheaper). MuJoCo 4 has the
    # per-geom switch; the 3.x that Isaac Lab's venv pins does not, and draws it as before.
    if hasattr(floor, "castshadow"):
        floor.castshadow = False
    th = world.layout.table_height
    wb.add_geom(
        name="table",
        type=mujoco.mjtGeom.mjGEOM_BOX,
        size=[1.1, 0.4, th / 2],
        pos=[0.0, -0.57, th / 2],
        rgba=[0.55, 0.5, 0.45, 1.0],
    )
    light = world.lighting
    direction = np.asarray(light.direction, float)
    direction /= np.linalg.norm(direction)
    wb.add_light(
        name="key",
        type=mujoco.mjtLightType.mjLIGHT_DIRECTIONAL,
        pos=[0.0, 0.0, 3.0],
        dir=list(direction),
        diffuse=[c * light.intensity for c in light.rgb],
        specular=[0.1, 0.1, 0.1],
        castshadow=world.render.shadows,
    )
    for b in task.bins:
        if b.name not in world.layout.bins:
            raise ValueError(f"world {world.name}: layout.bins has no pose for bin {b.name!r}")
        pose = world.layout.bins[b.name]
        body = wb.add_body(name=f"bin:{b.name}", pos=list(pose.pos), quat=yaw_quat(pose.yaw_deg))
        hx, hy = b.half_size
        wall, h = 0.01, b.wall_height
        body.add_site(name=f"bin:{b.name}", pos=[0, 0, h / 2], size=[0.01, 0.01, 0.01])
        body.add_geom(
            type=mujoco.mjtGeom.mjGEOM_BOX,
            size=[hx + wall, hy + wall, wall / 2],
            pos=[0, 0, wall / 2],
            rgba=list(b.rgba),
        )
        for sx, sy in ((1, 0), (-1, 0), (0, 1), (0, -1)):
            size = [wall / 2, hy + wall, h / 2] if sx else [hx + wall, wall / 2, h / 2]
            pos = [sx * (hx + wall / 2), sy * (hy + wall / 2), h / 2]
            body.add_geom(type=mujoco.mjtGeom.mjGEOM_BOX, size=size, pos=pos, rgba=list(b.rgba))


def _belt(spec: mujoco.MjSpec, task: TaskSpec, world: WorldSpec) -> None:
    """A moving belt: a slab on a slide joint, driven by a velocity actuator.

    The slab is half a texture period longer than the stand at each end; the env shifts it
    back by a whole period whenever it has travelled half a period, which changes neither
    what rests on it nor how it looks, so its ends stay within one period of the stand's.
    """
    belt = world.layout.belt
    frame = spec.worldbody.add_body(
        name="belt_frame", pos=list(belt.pos), quat=yaw_quat(belt.yaw_deg)
    )
    # The stand under the belt, not touching anything.
    stand_h = belt.pos[2] - belt.thickness
    frame.add_geom(
        name="belt_stand",
        type=mujoco.mjtGeom.mjGEOM_BOX,
        size=[belt.length / 2, belt.width / 2 - 0.01, stand_h / 2],
        pos=[0, 0, -belt.thickness - stand_h / 2],
        rgba=[0.2, 0.2, 0.22, 1],
        contype=0,
        conaffinity=0,
    )
    tex = spec.add_texture(
        name="belt_tex",
        type=mujoco.mjtTexture.mjTEXTURE_2D,
        builtin=mujoco.mjtBuiltin.mjBUILTIN_CHECKER,
        width=64,
        height=64,
        rgb1=[0.12, 0.12, 0.13],
        rgb2=[0.2, 0.2, 0.21],
    )
    mat = spec.add_material(
        name="belt_mat", texuniform=True, texrepeat=[1.0 / belt.texture_period] * 2
    )
    mat.textures[mujoco.mjtTextureRole.mjTEXROLE_RGB] = tex.name
    slab = frame.add_body(name="belt", pos=[0, 0, -belt.thickness / 2])
    slab.add_joint(
        name="belt",
        type=mujoco.mjtJoint.mjJNT_SLIDE,
        axis=[1, 0, 0],
        limited=mujoco.mjtLimited.mjLIMITED_FALSE,
    )
    # The slab slides back and forth by half a texture period around its rest position (the
    # cell wraps it), so it is a period shorter than the belt; fixed end plates cover the strip
    # its ends sweep, and the belt's visible ends stay put at +-length / 2 as a real belt's
    # rollers do.
    slab.add_geom(
        name="belt",
        type=mujoco.mjtGeom.mjGEOM_BOX,
        size=[belt.length / 2 - belt.texture_period / 2, belt.width / 2, belt.thickness / 2],
        material="belt_mat",
        friction=[1.2, 0.01, 0.001],
        mass=4.0,
    )
    for end, sign in (("upstream", -1.0), ("downstream", 1.0)):
        frame.add_geom(
            name=f"belt_end_{end}",
            type=mujoco.mjtGeom.mjGEOM_BOX,
            size=[belt.texture_period / 2, belt.width / 2, belt.thickness / 2 + 0.0005],
            pos=[sign * (belt.length - belt.texture_period) / 2, 0, -belt.thickness / 2],
            rgba=[0.35, 0.36, 0.38, 1],
            contype=0,
            conaffinity=0,
        )
    frame.add_site(name="belt_upstream", pos=[-belt.length / 2, 0, 0])
    act = spec.add_actuator(
        name="belt", target="belt", trntype=mujoco.mjtTrn.mjTRN_JOINT, group=GROUP_BELT
    )
    act.set_to_velocity(kv=400.0)
    top_speed = 2.0 * max(task.belt.fast_speed, task.belt.speed_range[1])
    act.ctrlrange = [-top_speed, top_speed]
    act.ctrllimited = mujoco.mjtLimited.mjLIMITED_TRUE


def add_arm_and_hand(
    spec: mujoco.MjSpec, world: WorldSpec, side: str
) -> tuple[robots.ArmNames, robots.HandNames]:
    """Add arm ``side`` with its hand, its controllers and its published velocity limits
    (a custom numeric, ``velocity_numeric(side)``); returns their names."""
    arm = _add_arm(spec, world, side)
    hand = _add_hand(spec, world, side, arm)
    _add_cartesian_actuators(spec, world, side, arm)
    _add_joint_actuators(spec, world.controller, arm)
    return arm, hand


def _add_arm(spec: mujoco.MjSpec, world: WorldSpec, side: str) -> robots.ArmNames:
    """Add arm ``side`` (the vendor's file or the authored Rizon) with its joint dynamics,
    its elbow spring to the home posture and its velocity-limit numeric."""
    base = world.layout.robots[side]  # type: ignore[index]
    ctl = world.controller
    assets = world.assets
    if assets.arm_mjcf:
        arm = vendor.attach_vendor_arm(
            spec.worldbody,
            arm_prefix(side),
            assets.arm_mjcf,
            base.pos,
            base.quat,
            velocity_limits=assets.arm_velocity_limits,
        )
        for name in arm.joints:
            spec.joint(name).armature = ctl.joint_armature
            spec.joint(name).damping = [ctl.joint_damping, 0.0, 0.0]
            # A friction the controller spec states (grounding's fit) replaces the file's;
            # none (0) keeps whatever friction the vendor's model has.
            if ctl.joint_friction > 0:
                spec.joint(name).frictionloss = ctl.joint_friction
    else:
        arm = robots.add_rizon4s(
            spec.worldbody,
            arm_prefix(side),
            base.pos,
            base.quat,
            armature=ctl.joint_armature,
            damping=ctl.joint_damping,
            frictionloss=ctl.joint_friction,
        )
    for name, q0 in zip(arm.joints, ctl.home, strict=True):
        j = spec.joint(name)
        j.stiffness = [ctl.null_stiffness, 0.0, 0.0]
        j.springref = q0
    spec.add_numeric(name=velocity_numeric(side), data=list(arm.velocity_limits))
    return arm


def _add_hand(
    spec: mujoco.MjSpec, world: WorldSpec, side: str, arm: robots.ArmNames
) -> robots.HandNames:
    """Mount hand ``side`` (the vendor's file or the authored Wuji) on ``arm``'s flange and
    add its position actuators from ``world.hand``."""
    flange = spec.body(arm.flange)
    mount = robots.HAND_MOUNT_POS, robots.HAND_MOUNT_QUAT
    if world.assets.hand_mjcf:
        hand = vendor.attach_vendor_hand(
            flange, hand_prefix(side), world.assets.hand_mjcf, side, *mount
        )
    else:
        hand = robots.add_wuji_hand(flange, hand_prefix(side), *mount, side=side)
    h = world.hand
    joints = h.per_joint()
    if joints is not None and joints != len(hand.joints):
        raise ValueError(
            f"world.hand gives {joints} values per hand joint; the {side} hand has "
            f"{len(hand.joints)} joints (give 1 value or {len(hand.joints)})"
        )
    robots.add_hand_actuators(
        spec,
        hand,
        kp=_vec(h.kp),
        kv=_vec(h.kv),
        force_range=_vec(h.force_limit),
        armature=_vec(h.armature),
        damping=_vec(h.damping),
    )
    return hand


def _add_cartesian_actuators(
    spec: mujoco.MjSpec, world: WorldSpec, side: str, arm: robots.ArmNames
) -> None:
    """Add the Cartesian controller of arm ``side`` and its reference site."""
    # Six position actuators on the TCP site, measured against a world-fixed reference site
    # at the arm base (orientation TCP_REF_IN_BASE).
    base = world.layout.robots[side]  # type: ignore[index]
    ctl = world.controller
    ref_rot = Rotation.from_quat(base.quat, scalar_first=True) * TCP_REF_IN_BASE
    spec.worldbody.add_site(
        name=f"{side}_ref", pos=list(base.pos), quat=quat_wxyz(ref_rot), size=[0.005] * 3
    )
    wn_pos = math.sqrt(ctl.kp_pos / ctl.tcp_mass)
    wn_rot = math.sqrt(ctl.kp_rot / ctl.tcp_inertia)
    nsample = max(2, math.ceil(ctl.delay_s / world.timestep) + 2)
    for k, axis in enumerate(CART_AXES):
        gear = [0.0] * 6
        gear[k] = 1.0
        kp = ctl.kp_pos if k < 3 else ctl.kp_rot
        kv = 2 * ctl.damping_ratio * (ctl.tcp_mass * wn_pos if k < 3 else ctl.tcp_inertia * wn_rot)
        act = spec.add_actuator(
            name=f"{side}_tcp_{axis}",
            target=arm.tcp_site,
            trntype=mujoco.mjtTrn.mjTRN_SITE,
            refsite=f"{side}_ref",
            gear=gear,
            group=GROUP_CARTESIAN,
        )
        act.set_to_position(kp=kp, kv=kv)
        if ctl.delay_s > 0:
            act.delay = ctl.delay_s
            act.nsample = nsample
            act.interp = 1


def _add_joint_actuators(spec: mujoco.MjSpec, ctl: ArmControllerSpec, arm: robots.ArmNames) -> None:
    """Add the joint-position controller of ``arm``: one actuator per joint, within its range."""
    for name in arm.joints:
        lo, hi = spec.joint(name).range
        act = spec.add_actuator(
            name=f"{name}_pos", target=name, trntype=mujoco.mjtTrn.mjTRN_JOINT, group=GROUP_JOINT
        )
        act.set_to_position(kp=ctl.joint_kp, kv=ctl.joint_kv)
        act.ctrlrange = [lo, hi]
        act.ctrllimited = mujoco.mjtLimited.mjLIMITED_TRUE


def _vec(values: tuple[float, ...]) -> float | list[float]:
    return values[0] if len(values) == 1 else list(values)


def _cameras(spec: mujoco.MjSpec, world: WorldSpec) -> None:
    for name, cam in world.cameras.items():
        parent = spec.worldbody if cam.mount == "world" else spec.body(cam.mount)
        rot_cv = Rotation.from_quat(cam.pose.quat, scalar_first=True).as_matrix()
        rot_mj = Rotation.from_matrix(rot_cv @ MJ_FROM_CV)
        parent.add_camera(name=name, pos=list(cam.pose.pos), quat=quat_wxyz(rot_mj), fovy=60.0)
        if cam.mount == "world":
            _camera_frame(spec, np.asarray(cam.pose.pos), rot_cv[:, 2])


def _camera_frame(spec: mujoco.MjSpec, pos: np.ndarray, optical_axis: np.ndarray) -> None:
    """A post and an arm holding a world-mounted camera from behind (visual only)."""
    back = -optical_axis[:2] / max(np.linalg.norm(optical_axis[:2]), 1e-9)
    foot = np.array([*(pos[:2] + 0.6 * back), 0.0])
    top = np.array([foot[0], foot[1], pos[2] + 0.05])
    style = {"rgba": [0.3, 0.3, 0.32, 1.0], "contype": 0, "conaffinity": 0, "group": 1}
    wb = spec.worldbody
    wb.add_geom(
        type=mujoco.mjtGeom.mjGEOM_CAPSULE, fromto=[*foot, *top], size=[0.025, 0, 0], **style
    )
    holder = pos - 0.04 * optical_axis + [0.0, 0.0, 0.05]
    wb.add_geom(
        type=mujoco.mjtGeom.mjGEOM_CAPSULE, fromto=[*top, *holder], size=[0.02, 0, 0], **style
    )
    wb.add_geom(
        type=mujoco.mjtGeom.mjGEOM_BOX,
        pos=list(pos - 0.03 * optical_axis),
        size=[0.09, 0.015, 0.015],
        **style,
    )


def _object(spec: mujoco.MjSpec, obj: ObjectSpec, index: int) -> None:
    pos = storage_pos(index) + np.array([0.0, 0.0, obj.rest_height])
    body = spec.worldbody.add_body(name=f"{OBJECT_PREFIX}{obj.name}", pos=list(pos))
    body.add_freejoint(name=f"{OBJECT_PREFIX}{obj.name}")
    shape = getattr(mujoco.mjtGeom, f"mjGEOM_{obj.shape.upper()}")
    size = list(obj.size) + [0.0] * (3 - len(obj.size))
    # Rolling friction keeps round objects from rolling forever on the belt.
    body.add_geom(
        name=f"{OBJECT_PREFIX}{obj.name}",
        type=shape,
        size=size,
        mass=obj.mass,
        rgba=list(obj.rgba),
        condim=6,
        friction=[obj.friction, 0.005, 0.0005],
    )
