"""A vendor MJCF for the arm or the hand can replace the models r2s2r authors."""

from __future__ import annotations

from pathlib import Path

import mujoco
import numpy as np
import pytest

from r2s2r.sim import robots
from r2s2r.sim.env import PickSortEnv
from r2s2r.sim.scene import build_scene
from r2s2r.spec import TaskSpec, WorldSpec

# The joint friction (N·m) the vendor-style arm file declares for every joint.
VENDOR_FRICTION = 0.4


def _vendor_arm_xml(
    path: Path,
    velocity: np.ndarray | None = robots.RIZON4S_VEL_LIMITS,
    ranges: np.ndarray | None = None,
) -> None:
    """An arm file in the style of a vendor model: its own joint names, actuators (velocity
    servos whose ctrlrange is the joints' velocity limits, or motors without ``velocity``),
    its own joint ranges (``ranges``, radians, or the Rizon's), a key."""
    spec = mujoco.MjSpec()
    spec.compiler.degree = True  # Vendor files often use degrees.
    arm = robots.add_rizon4s(spec.worldbody, "", (0, 0, 0), (1, 0, 0, 0))
    for i, name in enumerate(arm.joints):
        joint = spec.joint(name)
        joint.name = f"joint{i + 1}"
        joint.frictionloss = VENDOR_FRICTION
        if ranges is not None:
            joint.range = list(np.degrees(ranges[i]))
        act = spec.add_actuator(
            name=f"motor{i + 1}", target=f"joint{i + 1}", trntype=mujoco.mjtTrn.mjTRN_JOINT
        )
        if velocity is None:
            act.set_to_motor()
        else:
            act.set_to_velocity(kv=10.0)
            act.ctrllimited = mujoco.mjtLimited.mjLIMITED_TRUE
            act.ctrlrange = [-velocity[i], velocity[i]]
    for site in (arm.flange_site, arm.tcp_site):
        spec.delete(spec.site(site))
    spec.body(arm.flange).name = "link7_tip"
    spec.body("link7_tip").add_site(name="attachment_site", pos=[0, 0, 0.01])
    spec.add_key(name="home", qpos=[0.0] * 7)
    path.write_text(spec.to_xml())


def _vendor_hand_xml(folder: Path, scale: float = 1.0) -> str:
    """Hand files in the style of the vendor's (``right.xml`` and ``left.xml`` in ``folder``):
    its joint and body names with the side, a position actuator per joint, joint ranges
    ``scale`` times the published ones; returns the path with ``{side}`` in it."""
    for side in ("right", "left"):
        spec = mujoco.MjSpec()
        spec.compiler.degree = False
        hand = robots.add_wuji_hand(spec.worldbody, f"{side}_", side=side)
        for name in hand.joints:
            joint = spec.joint(name)
            joint.range = list(np.asarray(joint.range) * scale)
            act = spec.add_actuator(
                name=f"{name}_actuator", target=name, trntype=mujoco.mjtTrn.mjTRN_JOINT
            )
            act.set_to_position(kp=0.4, kv=0.02)
        (folder / f"{side}.xml").write_text(spec.to_xml())
    return str(folder / "{side}.xml")


def test_vendor_arm_and_hand_replace_the_authored_models(
    tmp_path: Path, task: TaskSpec, world: WorldSpec
) -> None:
    arm_xml = tmp_path / "arm.xml"
    _vendor_arm_xml(arm_xml)
    hand_xml = _vendor_hand_xml(tmp_path)
    vendor_world = world.replace(assets={"arm_mjcf": str(arm_xml), "hand_mjcf": hand_xml})
    model = build_scene(task, vendor_world).model
    own = build_scene(task, world).model
    # Same joints under r2s2r's names, the vendor's actuators dropped, ranges in radians.
    assert model.njnt == own.njnt and model.nu == own.nu
    for side in ("left", "right"):
        for i in range(7):
            jid = model.joint(f"{side}_j{i + 1}").id
            np.testing.assert_allclose(
                model.jnt_range[jid], robots.RIZON4S_JOINT_RANGES[i], atol=1e-9
            )
        # Each hand is its side's file, its joints found by the vendor's names.
        assert model.joint(f"{side}_hand_finger1_joint1").id >= 0
        assert model.body(f"{side}_hand_{side}_palm_link").id >= 0
    # The vendor's own joint friction stays unless the controller states one (grounding's
    # fit), which replaces it as the controller's damping replaces the vendor's.
    for side in ("left", "right"):
        dof = model.joint(f"{side}_j1").dofadr[0]
        assert model.dof_frictionloss[dof] == pytest.approx(VENDOR_FRICTION)
    rough = vendor_world.replace(controller={"joint_friction": 0.25})
    rough_model = build_scene(task, rough).model
    for side in ("left", "right"):
        for i in range(7):
            dof = rough_model.joint(f"{side}_j{i + 1}").dofadr[0]
            assert rough_model.dof_frictionloss[dof] == 0.25
            assert rough_model.dof_damping[dof] == world.controller.joint_damping
    # The env runs on it and the Cartesian controller still holds the arm.
    env = PickSortEnv(world=vendor_world, images=False)
    obs, _ = env.reset(seed=0)
    start = obs["tcp_pose"].copy()
    action = np.concatenate([np.concatenate([p, np.zeros(20)]) for p in start])
    for _ in range(25):
        obs, *_ = env.step(action)
    assert np.abs(obs["tcp_pose"][:, :3] - start[:, :3]).max() < 0.005


def test_bad_vendor_files_are_reported(tmp_path: Path, task: TaskSpec, world: WorldSpec) -> None:
    missing = world.replace(assets={"arm_mjcf": "/no/arm.xml"})
    with pytest.raises(FileNotFoundError, match="assets.arm_mjcf: /no/arm.xml does not exist"):
        build_scene(task, missing)
    two_joints = tmp_path / "short.xml"
    two_joints.write_text(
        "<mujoco><worldbody><body><joint type='hinge'/><geom size='0.1'/>"
        "<body><joint type='hinge'/><geom size='0.1'/></body></body></worldbody></mujoco>"
    )
    short = world.replace(assets={"arm_mjcf": str(two_joints)})
    with pytest.raises(ValueError, match="has 2 hinge joints; a Rizon 4S model has 7"):
        build_scene(task, short)


def test_a_vendor_models_limits_are_its_own(
    tmp_path: Path, task: TaskSpec, world: WorldSpec
) -> None:
    arm_ranges = robots.RIZON4S_JOINT_RANGES * 0.8
    velocity = np.linspace(1.0, 1.6, 7)
    arm_xml = tmp_path / "arm.xml"
    _vendor_arm_xml(arm_xml, velocity=velocity, ranges=arm_ranges)
    assets = {"arm_mjcf": str(arm_xml), "hand_mjcf": _vendor_hand_xml(tmp_path, scale=0.5)}
    vendor_world = world.replace(assets=assets)
    emb = build_scene(task, vendor_world).embodiment
    # The same robot under the same name; its limits are the files'.
    assert (emb.name, emb.id) == ("rizon4s_wuji2_bimanual", 0)
    np.testing.assert_allclose(emb.arm_limits, arm_ranges, atol=1e-9)
    np.testing.assert_allclose(emb.arm_velocity_limits, velocity)
    np.testing.assert_allclose(emb.hand_limits, robots.WUJI_HAND_JOINT_RANGES * 0.5)
    # The env's action space and the cell's joint steps follow them.
    env = PickSortEnv(world=vendor_world, images=False, action_mode="joint")
    np.testing.assert_allclose(env.action_space.high[:7], arm_ranges[:, 1], atol=1e-9)
    np.testing.assert_allclose(env.action_space.high[7:27], robots.WUJI_HAND_JOINT_RANGES[:, 1] / 2)
    np.testing.assert_allclose(env.cell._arm_step, velocity * env.cell.dt)


def test_a_vendor_arm_without_velocity_limits_needs_them_from_the_world(
    tmp_path: Path, task: TaskSpec, world: WorldSpec
) -> None:
    arm_xml = tmp_path / "arm.xml"
    _vendor_arm_xml(arm_xml, velocity=None)
    bare = world.replace(assets={"arm_mjcf": str(arm_xml)})
    with pytest.raises(ValueError, match="gives no joint velocity limits.*arm_velocity_limits"):
        build_scene(task, bare)
    given = bare.replace(assets={"arm_velocity_limits": (1.5,) * 7})
    np.testing.assert_array_equal(build_scene(task, given).embodiment.arm_velocity_limits, 1.5)
    short = bare.replace(assets={"arm_velocity_limits": (1.5,)})
    with pytest.raises(ValueError, match="arm_velocity_limits: expected 7 values"):
        build_scene(task, short)


def test_a_vendor_hand_is_mapped_by_its_joint_names(
    tmp_path: Path, task: TaskSpec, world: WorldSpec
) -> None:
    hand_xml = _vendor_hand_xml(tmp_path)
    vendor_world = world.replace(assets={"hand_mjcf": hand_xml})
    cell = build_scene(task, vendor_world)
    own = build_scene(task, world)
    assert cell.embodiment.hand_joints == own.embodiment.hand_joints == robots.WUJI_JOINT_NAMES
    # Mounted as the authored hand is: the same fingertip places at the same joint angles.
    data, own_data = mujoco.MjData(cell.model), mujoco.MjData(own.model)
    for d, m in ((data, cell.model), (own_data, own.model)):
        for side in ("left", "right"):
            for j, q in zip(robots.WUJI_JOINT_NAMES, np.linspace(0.1, 0.3, 20), strict=True):
                d.qpos[m.joint(f"{side}_hand_{j}").qposadr[0]] = q
        mujoco.mj_kinematics(m, d)
    for side in ("left", "right"):
        for f in range(1, 6):
            vendor_body = data.body(f"{side}_hand_{side}_finger{f}_link4").xpos
            np.testing.assert_allclose(
                vendor_body, own_data.body(f"{side}_hand_finger{f}_link4").xpos, atol=1e-9
            )


def test_a_vendor_hand_of_the_wrong_side_or_names_is_refused(
    tmp_path: Path, task: TaskSpec, world: WorldSpec
) -> None:
    _vendor_hand_xml(tmp_path)
    right_only = world.replace(assets={"hand_mjcf": str(tmp_path / "right.xml")})
    with pytest.raises(ValueError, match="is a right hand.*mounted on the left arm.*{side}"):
        build_scene(task, right_only)
    text = (tmp_path / "right.xml").read_text().replace("right_finger3_joint2", "right_spread3")
    (tmp_path / "renamed").mkdir()
    for side in ("right", "left"):
        source = text if side == "right" else (tmp_path / "left.xml").read_text()
        (tmp_path / "renamed" / f"{side}.xml").write_text(source.replace("right_", f"{side}_"))
    renamed = world.replace(assets={"hand_mjcf": str(tmp_path / "renamed/{side}.xml")})
    with pytest.raises(ValueError, match="right.xml has no joint right_finger3_joint2"):
        build_scene(task, renamed)
