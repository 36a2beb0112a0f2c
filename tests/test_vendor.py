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


def _vendor_arm_xml(path: Path) -> None:
    """An arm file in the style of a vendor model: its own joint names, actuators, a key."""
    spec = mujoco.MjSpec()
    spec.compiler.degree = True  # Vendor files often use degrees.
    arm = robots.add_rizon4s(spec.worldbody, "", (0, 0, 0), (1, 0, 0, 0))
    for i, name in enumerate(arm.joints):
        spec.joint(name).name = f"joint{i + 1}"
        act = spec.add_actuator(
            name=f"motor{i + 1}", target=f"joint{i + 1}", trntype=mujoco.mjtTrn.mjTRN_JOINT
        )
        act.set_to_motor()
    for site in (arm.flange_site, arm.tcp_site):
        spec.delete(spec.site(site))
    spec.body(arm.flange).name = "link7_tip"
    spec.body("link7_tip").add_site(name="attachment_site", pos=[0, 0, 0.01])
    spec.add_key(name="home", qpos=[0.0] * 7)
    path.write_text(spec.to_xml())


def _vendor_hand_xml(path: Path) -> None:
    spec = mujoco.MjSpec()
    spec.compiler.degree = False
    hand = robots.add_wuji_hand(spec.worldbody, "wuji_")
    for i, name in enumerate(hand.joints):
        spec.joint(name).name = f"finger_joint_{i}"
    path.write_text(spec.to_xml())


def test_vendor_arm_and_hand_replace_the_authored_models(
    tmp_path: Path, task: TaskSpec, world: WorldSpec
) -> None:
    arm_xml, hand_xml = tmp_path / "arm.xml", tmp_path / "hand.xml"
    _vendor_arm_xml(arm_xml)
    _vendor_hand_xml(hand_xml)
    vendor_world = world.replace(
        assets=world.assets.model_copy(
            update={"arm_mjcf": str(arm_xml), "hand_mjcf": str(hand_xml)}
        )
    )
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
        model.joint(f"{side}_hand_f1_j1")
    # The env runs on it and the Cartesian controller still holds the arm.
    env = PickSortEnv(world=vendor_world, images=False)
    obs, _ = env.reset(seed=0)
    start = obs["tcp_pose"].copy()
    action = np.concatenate([np.concatenate([p, np.zeros(20)]) for p in start])
    for _ in range(25):
        obs, *_ = env.step(action)
    assert np.abs(obs["tcp_pose"][:, :3] - start[:, :3]).max() < 0.005


def test_bad_vendor_files_are_reported(tmp_path: Path, task: TaskSpec, world: WorldSpec) -> None:
    missing = world.replace(assets=world.assets.model_copy(update={"arm_mjcf": "/no/arm.xml"}))
    with pytest.raises(FileNotFoundError, match="assets.arm_mjcf: /no/arm.xml does not exist"):
        build_scene(task, missing)
    two_joints = tmp_path / "short.xml"
    two_joints.write_text(
        "<mujoco><worldbody><body><joint type='hinge'/><geom size='0.1'/>"
        "<body><joint type='hinge'/><geom size='0.1'/></body></body></worldbody></mujoco>"
    )
    short = world.replace(assets=world.assets.model_copy(update={"arm_mjcf": str(two_joints)}))
    with pytest.raises(ValueError, match="has 2 hinge joints; a Rizon 4S model has 7"):
        build_scene(task, short)
