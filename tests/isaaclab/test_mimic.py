"""The Mimic env's six methods (Isaac Lab Mimic's ``ManagerBasedRLMimicEnv`` interface) on a
recorded demo replayed in the Isaac Lab env, and the checks Mimic's scripts make of the env."""

from __future__ import annotations

import gc
import inspect
import sys
import warnings
import weakref

import gymnasium as gym
import numpy as np
import pytest
import r2s2r_isaaclab
import torch
from isaaclab.envs import ManagerBasedEnv, ManagerBasedRLEnv, ManagerBasedRLMimicEnv
from isaaclab.sim import SimulationContext
from r2s2r_isaaclab.mimic import PickSortMimicEnv

from r2s2r.data.config import ACTION_KEY, ENV_STATE_KEY
from r2s2r.data.reader import Dataset
from r2s2r.geometry.rotations import quat_to_mat

SIX = (
    "get_robot_eef_pose",
    "target_eef_pose_to_action",
    "action_to_target_eef_pose",
    "actions_to_gripper_actions",
    "get_object_poses",
    "get_subtask_term_signals",
)
MIMIC_TASK = "Isaac-R2S2R-PickSort-Ungrounded-Mimic-v0"
# Steps replayed past the one at which the core's cell lifts the object.
AFTER_LIFT = 20
# What the Mimic env takes from ManagerBasedRLMimicEnv and its bases as they are: what holds
# for it (read from the config), Mimic's optional methods it does not implement, and private
# helpers that only the methods it overrides call.
INHERITED = {
    "physics_dt", "step_dt", "max_episode_length", "max_episode_length_s", "is_vector_env",
    "get_subtask_start_signals", "get_navigation_state",
    "_init_sim", "_reset_idx", "_configure_gym_env_spaces", "_collect_io_descriptors",
}  # fmt: skip


@pytest.fixture(scope="module")
def mimic_env():
    env = r2s2r_isaaclab.make_env(MIMIC_TASK, num_envs=1)
    assert isinstance(env, PickSortMimicEnv)
    return env


def test_the_six_methods_have_isaac_lab_mimics_signatures():
    for name in SIX:
        ours = inspect.signature(getattr(PickSortMimicEnv, name))
        theirs = inspect.signature(getattr(ManagerBasedRLMimicEnv, name))
        assert list(ours.parameters) == list(theirs.parameters), name


def test_six_methods_on_a_recorded_demo(mimic_env, demo):
    env = mimic_env
    actions = Dataset(demo.root).episode_arrays(0)[ACTION_KEY]
    env.reset(seed=0)
    env.cell.reset(np.array([0]), [np.random.default_rng(0)], demo.objects, demo.spawn)
    # action <-> target pose: the inverse of each other on every recorded action.
    acts = torch.as_tensor(np.array(actions), dtype=torch.float32)
    targets = env.action_to_target_eef_pose(acts)
    grippers = env.actions_to_gripper_actions(acts)
    assert set(targets) == set(grippers) == {"left", "right"}
    assert targets["left"].shape == (len(actions), 4, 4)
    assert grippers["right"].shape == (len(actions), 20)
    for t in (0, 100, 250):
        back = env.target_eef_pose_to_action(
            {k: v[t] for k, v in targets.items()}, {k: v[t] for k, v in grippers.items()}
        )
        a = actions[t]
        # The quaternion may come back with the other sign: compare the rotations.
        for arm in range(2):
            part, got = a[arm * 27 : (arm + 1) * 27], back[arm * 27 : (arm + 1) * 27].numpy()
            np.testing.assert_allclose(got[:3], part[:3], atol=1e-5)
            np.testing.assert_allclose(quat_to_mat(got[3:7]), quat_to_mat(part[3:7]), atol=1e-5)
            np.testing.assert_allclose(got[7:], part[7:], atol=1e-5)
    noisy = env.target_eef_pose_to_action(
        {k: v[0] for k, v in targets.items()},
        {k: v[0] for k, v in grippers.items()},
        action_noise_dict={"left": 0.01, "right": 0.0},
    ).numpy()
    assert 0 < np.abs(noisy[:3] - actions[0, :3]).max() < 0.1
    np.testing.assert_allclose(noisy[27:30], actions[0, 27:30], atol=1e-6)
    # Replay: the eef pose is the TCP the core's contract observes, the object pose is the
    # presented object's, and the grasp signal switches on once the object is held.
    from r2s2r_isaaclab.annotate import GRASP_LIFT

    rest = env.task_spec.object_named(demo.objects[0]).rest_height
    lift = demo.object_pos[:, 2] - env.world_spec.layout.belt.pos[2] > rest + GRASP_LIFT
    lifted_at = int(np.argmax(lift))
    assert lift[lifted_at], "the demo never lifts its object"
    grasp = []
    for t in range(lifted_at + AFTER_LIFT):
        obs, *_ = env.step(torch.as_tensor(actions[t : t + 1]))
        for arm, eef in enumerate(("left", "right")):
            pose = env.get_robot_eef_pose(eef, env_ids=[0])[0].numpy()
            np.testing.assert_allclose(pose[:3, 3], obs["tcp_pose"][0, arm, :3], atol=1e-5)
            np.testing.assert_allclose(
                pose[:3, :3], quat_to_mat(obs["tcp_pose"][0, arm, 3:]), atol=1e-5
            )
        poses = env.get_object_poses()
        np.testing.assert_allclose(
            poses["object"][0, :3, 3].numpy(), env.cell.object_states()[0][0, 0], atol=1e-5
        )
        grasp.append(float(env.get_subtask_term_signals()["grasp"][0]))
    assert set(poses) >= {"object", "bin", *env.cell.bin_names}
    bin_name = env.cell.bin_names[env.cell.assigned_bin[env.cell.chosen[0, 0]]]
    np.testing.assert_allclose(poses["bin"][0].numpy(), poses[bin_name][0].numpy())
    # Not held at the start; held from (about) the step the core's cell lifted it on.
    assert grasp[0] == 0.0 and grasp[-1] == 1.0
    first = grasp.index(1.0)
    assert abs(first - lifted_at) <= 5, (first, lifted_at)
    assert all(g == 1.0 for g in grasp[first:]), "the grasp signal flickers"


def test_isaac_lab_mimics_generator_consumes_an_r2s2r_demo(mimic_env, demo, tmp_path):
    """The demo, converted with its annotations, through Isaac Lab Mimic's own code: its pool
    finds each arm's two subtasks, its generator moves the grasp segment with the object."""
    from isaaclab_mimic.datagen.data_generator import DataGenerator
    from isaaclab_mimic.datagen.datagen_info_pool import DataGenInfoPool
    from r2s2r_isaaclab.annotate import GRASP_LIFT
    from r2s2r_isaaclab.hdf5 import to_isaaclab

    env = mimic_env
    path = to_isaaclab(demo.root, tmp_path / "demo.hdf5", env_name=MIMIC_TASK)
    pool = DataGenInfoPool(env, env.cfg, env.device)
    pool.load_from_dataset_file(str(path))
    assert pool.num_datagen_infos == 1
    # Grasp, then place; the grasp ends (one signal for both arms) where the object is held:
    # a frame's state is the one before its step, so the first held frame is one after the
    # step that lifted the object, and Mimic's boundary is one past that (a slice's end).
    rest = env.task_spec.object_named(demo.objects[0]).rest_height
    lift = demo.object_pos[:, 2] - env.world_spec.layout.belt.pos[2] > rest + GRASP_LIFT
    lifted_at = int(np.argmax(lift))
    n = len(demo.actions)
    (s0, e0), (s1, e1) = pool.subtask_boundaries["left"][0]
    assert s0 == 0 and e0 == s1 and e1 == n and abs(e0 - (lifted_at + 2)) <= 5, (e0, lifted_at)
    assert pool.subtask_boundaries["right"] == pool.subtask_boundaries["left"]
    info = pool.datagen_infos[0]
    ds = Dataset(demo.root)
    tcp = ds.episode_arrays(0)["observation.state"][:, ds.contract.state_layout()["tcp_pose"]]
    np.testing.assert_allclose(info.eef_pose["left"][:, :3, 3].numpy(), tcp[:, :3], atol=1e-5)
    # The annotations are the recorded object's pose and the Mimic env's reading of the actions.
    recorded = ds.episode_arrays(0)[ENV_STATE_KEY]
    np.testing.assert_allclose(info.object_poses["object"][:, :3, 3].numpy(), recorded[:, :3],
                               atol=1e-5)  # fmt: skip
    targets = env.action_to_target_eef_pose(torch.as_tensor(demo.actions, dtype=torch.float32))
    for eef in ("left", "right"):
        np.testing.assert_allclose(info.target_eef_pose[eef].numpy(), targets[eef].numpy(),
                                   atol=1e-6)  # fmt: skip
    # The generator, on the env with the object elsewhere: the grasp segment it makes ends
    # where the demo's did relative to the object.
    env.reset(seed=3)
    gen = DataGenerator(env, src_demo_datagen_info_pool=pool)
    bounds = gen.randomize_subtask_boundaries()
    traj = gen.generate_eef_subtask_trajectory(
        0, "left", 0, bounds, {}, {"left": None, "right": None}
    )
    poses = np.stack([w.pose.numpy() for seq in traj.waypoint_sequences for w in seq.sequence])
    assert len(poses) == e0 + 1  # The robot's pose, then the segment's targets.
    now = env.get_object_poses(env_ids=[0])["object"][0].numpy()
    src = info.object_poses["object"][0].numpy()
    last_src = info.target_eef_pose["left"][e0 - 1].numpy()
    np.testing.assert_allclose(
        np.linalg.inv(now) @ poses[-1], np.linalg.inv(src) @ last_src, atol=1e-4
    )
    assert not np.allclose(now, src, atol=1e-3), "the object did not move: the test shows nothing"


def test_mimic_scripts_accept_the_env_that_gym_makes():
    """The checks Isaac Lab Mimic's scripts make after ``gym.make(task, cfg=env_cfg).unwrapped``
    (generate_dataset.py; annotate_demos.py with --auto), quoted; the env is an interface
    subclass of ManagerBasedRLMimicEnv that builds no simulation context and steps, resets,
    closes and is collected without touching ManagerBasedEnv's machinery."""
    cfg = r2s2r_isaaclab.make_env_cfg(MIMIC_TASK, num_envs=1)
    cfg.sim.physics.solver_cfg.use_mujoco_cpu = True
    env = gym.make(MIMIC_TASK, cfg=cfg).unwrapped
    # generate_dataset.py and annotate_demos.py:
    if not isinstance(env, ManagerBasedRLMimicEnv):
        raise ValueError("The environment should be derived from ManagerBasedRLMimicEnv")
    # generate_dataset.py (which logs a warning where this fails):
    if "action_noise_dict" not in inspect.signature(env.target_eef_pose_to_action).parameters:
        pytest.fail('the "noise" parameter of target_eef_pose_to_action is deprecated')
    # annotate_demos.py --auto:
    if env.get_subtask_term_signals.__func__ is ManagerBasedRLMimicEnv.get_subtask_term_signals:
        raise NotImplementedError(
            "The environment does not implement the get_subtask_term_signals method required "
            "to run automatic annotations."
        )
    # ... and with --annotate_subtask_start_signals it refuses the env: no start signals.
    start = env.get_subtask_start_signals.__func__
    assert start is ManagerBasedRLMimicEnv.get_subtask_start_signals
    assert SimulationContext.instance() is None

    # What it takes from Isaac Lab's classes as they are; the rest is ours or gymnasium's.
    isaac = (ManagerBasedRLMimicEnv, ManagerBasedRLEnv, ManagerBasedEnv)
    names = {n for c in isaac for n in vars(c)} - {"__module__", "__doc__", "__dict__",
                                                   "__weakref__", "__annotations__"}  # fmt: skip
    owner = {n: next(c for c in PickSortMimicEnv.__mro__ if n in vars(c)) for n in names}
    assert {n for n, c in owner.items() if c in isaac} == INHERITED
    assert env.physics_dt == env.world_spec.timestep
    assert env.step_dt == pytest.approx(env.cell.dt)
    assert env.max_episode_length == env.cell.max_steps
    assert env.num_envs == 1 and env.device == "cpu" and env.unwrapped is env
    # What needs managers or a simulation context it does not have says so.
    for name, args in (("seed", (0,)), ("load_managers", ()), ("setup_manager_visualizers", ()),
                       ("export_IO_descriptors", ())):  # fmt: skip
        with pytest.raises(NotImplementedError, match=rf"^PickSortMimicEnv\.{name}: "):
            getattr(env, name)(*args)
    assert not hasattr(env, "get_IO_descriptors")

    # Steps, resets, closes; collected without a warning or an error from a finalizer.
    unraisable = []
    hook, sys.unraisablehook = sys.unraisablehook, unraisable.append
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            obs, _ = env.reset(seed=0)
            hold = torch.as_tensor(env.contract.join_action(obs["tcp_pose"], obs["hand_joints"]))
            for _ in range(3):
                env.step(hold)
            env.reset(env_ids=[0], seed=1)
            env.step(hold)
            env.close()
            env.close()
            assert env.closed and env.sim.is_stopped()
            collected = weakref.ref(env)
            del env
            gc.collect()
    finally:
        sys.unraisablehook = hook
    assert collected() is None, "the env was not collected: the test shows nothing"
    assert not unraisable, [u.exc_value for u in unraisable]
    assert not caught, [str(w.message) for w in caught]
