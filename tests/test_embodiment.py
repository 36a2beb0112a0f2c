"""The embodiment read from the built cell, the action mode a scene is built with, and the
observation/action contract the env builds its spaces and observations from."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

from r2s2r.sim import robots
from r2s2r.sim.contract import Contract, ContractError
from r2s2r.sim.embodiment import EMBODIMENT_IDS, Embodiment, EmbodimentError
from r2s2r.sim.env import PickSortEnv
from r2s2r.sim.scene import GROUP_CARTESIAN, GROUP_JOINT, build_scene, nominal_embodiment
from r2s2r.spec import TaskSpec, WorldSpec
from r2s2r.spec.world import CAMERA_NAMES


@pytest.fixture(scope="module")
def embodiment(task: TaskSpec, world: WorldSpec) -> Embodiment:
    return build_scene(task, world).embodiment


def test_the_authored_cell_carries_the_published_robot(embodiment: Embodiment) -> None:
    e = embodiment
    assert (
        (e.name, e.id)
        == ("rizon4s_wuji2_bimanual", EMBODIMENT_IDS.get(e.name))
        == (
            "rizon4s_wuji2_bimanual",
            0,
        )
    )
    assert e.sides == ("left", "right") and e.cameras == CAMERA_NAMES
    assert e.arm_joints == tuple(f"j{i}" for i in range(1, 8))
    assert e.hand_joints == robots.WUJI_JOINT_NAMES
    assert e.hand_joints[4:6] == ("finger2_joint1", "finger2_joint2")
    assert e.arm_joint_names("left")[0] == "left_j1"
    assert e.hand_joint_names("right")[-1] == "right_hand_finger5_joint4"
    assert e.tcp_sites == ("left_tcp", "right_tcp")
    # Limits: the published ones, exactly (the kernels clip with them).
    np.testing.assert_array_equal(e.arm_limits, robots.RIZON4S_JOINT_RANGES)
    np.testing.assert_array_equal(e.arm_velocity_limits, robots.RIZON4S_VEL_LIMITS)
    np.testing.assert_array_equal(e.hand_limits, robots.WUJI_HAND_JOINT_RANGES)
    assert (e.arm_dof, e.hand_dof, e.state_dim) == (7, 20, 68)
    assert e.action_per_arm("tcp") == e.action_per_arm("joint") == 27
    assert e.action_dim("tcp") == 54
    with pytest.raises(ValueError, match="action_mode must be one of"):
        e.action_dim("cartesian")  # type: ignore[arg-type]
    with pytest.raises(EmbodimentError, match="has no arm 'middle'"):
        e.arm_joint_names("middle")
    assert nominal_embodiment() == e


def test_the_embodiment_round_trips_through_json_and_needs_a_cell_model(
    embodiment: Embodiment,
) -> None:
    assert Embodiment.from_json(embodiment.to_json()) == embodiment
    with pytest.raises(EmbodimentError, match="expected the fields"):
        Embodiment.from_json({"name": "x"})
    with pytest.raises(EmbodimentError, match="hand_range has 2 entries, not 20"):
        Embodiment.from_json({**embodiment.to_json(), "hand_range": [[0, 1], [0, 1]]})
    bare = mujoco.MjModel.from_xml_string("<mujoco><worldbody/></mujoco>")
    with pytest.raises(EmbodimentError, match="names no embodiment"):
        Embodiment.of(bare)


def test_the_action_mode_is_part_of_the_scene(task: TaskSpec, world: WorldSpec) -> None:
    tcp = build_scene(task, world)
    joint = build_scene(task, world, action_mode="joint")
    assert (tcp.action_mode, joint.action_mode) == ("tcp", "joint")
    assert tcp.model.opt.disableactuator == 1 << GROUP_JOINT
    assert joint.model.opt.disableactuator == 1 << GROUP_CARTESIAN
    with pytest.raises(ValueError, match="action_mode must be one of"):
        build_scene(task, world, action_mode="torque")  # type: ignore[arg-type]
    # Each env builds its own scene: a joint-mode env leaves a tcp-mode one alone.
    env_tcp = PickSortEnv(images=False)
    env_joint = PickSortEnv(images=False, action_mode="joint")
    assert env_tcp.model.opt.disableactuator == 1 << GROUP_JOINT
    assert env_joint.model.opt.disableactuator == 1 << GROUP_CARTESIAN
    assert env_joint.cell.action_mode == "joint"


@pytest.mark.parametrize("mode", ["tcp", "joint"])
def test_env_spaces_derive_from_the_embodiment(mode: str) -> None:
    env = PickSortEnv(images=False, action_mode=mode, env_state=True)  # type: ignore[arg-type]
    e = env.embodiment
    assert env.contract == Contract.of(e, mode)  # type: ignore[arg-type]
    space = env.action_space
    assert space.shape == (e.action_dim(mode),)  # type: ignore[arg-type]
    per = space.low.reshape(e.num_arms, -1), space.high.reshape(e.num_arms, -1)
    arm = e.arm_action_dim(mode)  # type: ignore[arg-type]
    for lo, hi in zip(*per, strict=True):
        np.testing.assert_array_equal(lo[arm:], e.hand_limits[:, 0])
        np.testing.assert_array_equal(hi[arm:], e.hand_limits[:, 1])
        if mode == "joint":
            np.testing.assert_array_equal(lo[:arm], e.arm_limits[:, 0])
            np.testing.assert_array_equal(hi[:arm], e.arm_limits[:, 1])
    obs_space = env.observation_space
    assert obs_space["arm_joints"].shape == (e.num_arms, e.arm_dof)
    assert obs_space["hand_joints"].shape == (e.num_arms, e.hand_dof)
    obs, _ = env.reset(seed=0)
    assert obs_space.contains(obs)
    assert obs["embodiment_id"] == e.id
    # The environment state is the presented object's pose.
    pos, quat, _ = env.cell.object_states()
    np.testing.assert_array_equal(obs["environment_state"], np.concatenate([pos[0, 0], quat[0, 0]]))
    assert env.contract.state(obs).shape == (e.state_dim,)


def test_the_contract_builds_and_splits_observations_and_actions(
    embodiment: Embodiment,
) -> None:
    contract = Contract.of(embodiment, "tcp")
    rng = np.random.default_rng(0)
    tcp, arm, hand = rng.normal(size=(2, 7)), rng.normal(size=(2, 7)), rng.normal(size=(2, 20))
    obs = contract.observation(tcp, arm, hand, "sort it")
    state = contract.state(obs)
    names = contract.state_names()
    assert len(names) == len(state) == 68 and names[0] == "left_tcp_x"
    assert names[14] == "left_arm_j1" and names[28] == "left_hand_finger1_joint1"
    parts = contract.split_state(state)
    for key, value in (("tcp_pose", tcp), ("arm_joints", arm), ("hand_joints", hand)):
        np.testing.assert_array_equal(parts[key], value)
    action = contract.join_action(tcp, hand)
    assert contract.action_names()[:8] == [
        *(f"left_tcp_{p}" for p in ("x", "y", "z", "qw", "qx", "qy", "qz")),
        "left_hand_finger1_joint1",
    ]
    np.testing.assert_array_equal(action[27:34], tcp[1])
    back = contract.split_action(action)
    np.testing.assert_array_equal(back[0], tcp)
    np.testing.assert_array_equal(back[1], hand)
    # A batch of observations: a leading dimension everywhere, ids per world.
    batch = contract.observation(tcp[None], arm[None], hand[None], ("sort it",))
    assert batch["embodiment_id"].shape == (1,)
    np.testing.assert_array_equal(contract.state(batch)[0], state)
    with pytest.raises(
        ContractError, match=r"hand_joints: expected shape \(2, 20\), got \(2, 16\)"
    ):
        contract.observation(tcp, arm, hand[:, :16], "sort it")
    with pytest.raises(ContractError, match="images of cameras"):
        contract.observation(tcp, arm, hand, "sort it", images={"head": np.zeros((4, 4, 3))})
