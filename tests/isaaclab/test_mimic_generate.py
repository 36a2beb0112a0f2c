"""Isaac Lab Mimic's own generation loop on the Mimic env, seeded from an annotated r2s2r demo:
``setup_env_config``, ``setup_async_generation``, ``env_loop`` and ``run_data_generator``
(``isaaclab_mimic.datagen.generation``, what ``generate_dataset.py`` runs after launching Kit)
driving ``DataGenerator.generate``, which resets the env, reads ``env.scene.get_state`` and
records through Isaac Lab's ``RecorderManager`` into Isaac Lab's HDF5 files; and the scene
state those resets and recorders rely on (``reset_to`` restores a world exactly)."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import random

import gymnasium as gym
import numpy as np
import pytest
import r2s2r_isaaclab
import torch
from isaaclab.envs import ManagerBasedRLMimicEnv
from isaaclab.managers import DatasetExportMode
from isaaclab.utils.datasets import HDF5DatasetFileHandler
from r2s2r_isaaclab import mdp
from r2s2r_isaaclab.annotate import make_pose
from r2s2r_isaaclab.env_cfg import PickSortRecorderManagerCfg, TaskInstanceCfg
from r2s2r_isaaclab.hdf5 import PROPRIO_OBS, from_isaaclab, to_isaaclab
from r2s2r_isaaclab.mimic import PickSortMimicEnv
from scipy.spatial.transform import Rotation

from r2s2r.data.config import ACTION_KEY, ENV_STATE_KEY, STATE_KEY
from r2s2r.data.continuity import continuous

MIMIC_TASK = "Isaac-R2S2R-PickSort-Ungrounded-Mimic-v0"
# How far across the belt the second generated episode's object is moved from the demo's (m).
MOVED = 0.02


def _flat(state: dict, prefix: str = "") -> dict[str, torch.Tensor]:
    out = {}
    for key, value in state.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}/"))
        else:
            out[prefix + key] = value
    return out


def _at(state: dict, t: int) -> dict:
    """Row ``t`` of every tensor of a recorded (T, ...) state, as a one-env state."""
    return {k: _at(v, t) if isinstance(v, dict) else v[t : t + 1] for k, v in state.items()}


def _assert_same(got: dict, want: dict, what: str) -> None:
    got, want = _flat(got), _flat(want)
    assert got.keys() == want.keys(), what
    for key in want:
        assert torch.equal(got[key].cpu(), want[key].cpu()), f"{what}: {key} differs"


def _mimic_env(cfg) -> PickSortMimicEnv:
    env = gym.make(MIMIC_TASK, cfg=cfg).unwrapped
    assert isinstance(env, PickSortMimicEnv)
    return env


@pytest.mark.parametrize("mujoco_cpu", [False, True], ids=["mujoco_warp", "mujoco_c"])
def test_reset_to_a_captured_state_reproduces_the_following_steps(mujoco_cpu):
    cfg = r2s2r_isaaclab.make_env_cfg(MIMIC_TASK, num_envs=1)
    cfg.sim.physics.solver_cfg.use_mujoco_cpu = mujoco_cpu
    env = _mimic_env(cfg)
    rng = np.random.default_rng(0)
    env.reset(seed=0)
    per_arm = env.embodiment.action_per_arm("tcp")

    def nudged() -> np.ndarray:
        """Command the TCPs a few centimetres from where they are, the hands where they are."""
        obs = env.last_obs
        a = env.contract.join_action(obs["tcp_pose"], obs["hand_joints"])
        for arm in range(2):
            a[:, arm * per_arm : arm * per_arm + 3] += rng.normal(0.0, 0.02, 3)
        return a

    for _ in range(4):
        env.step(nudged())
    captured = env.scene.get_state(is_relative=True)
    actions = [nudged() for _ in range(6)]
    after = []
    for a in actions:
        env.step(a)
        after.append(env.scene.get_state(is_relative=True))
    # Elsewhere: another episode (another object, belt speed, spawn), a few steps in.
    env.reset(seed=5)
    for _ in range(3):
        env.step(nudged())
    moved = _flat(env.scene.get_state())
    assert any(not torch.equal(v, _flat(captured)[k]) for k, v in moved.items())
    env.reset_to(captured, torch.tensor([0]), is_relative=True)
    _assert_same(env.scene.get_state(is_relative=True), captured, "after reset_to")
    for t, a in enumerate(actions):
        env.step(a)
        _assert_same(env.scene.get_state(is_relative=True), after[t], f"step {t} after reset_to")
    # Bad states say what is wrong, and change nothing.
    now = env.scene.get_state()
    broken = {k: v for k, v in captured.items() if k != "cell"}
    with pytest.raises(KeyError, match=r"state\['cell'\]: missing"):
        env.reset_to(broken, [0])
    broken = {**captured, "cell": {k: v for k, v in captured["cell"].items() if k != "warmstart"}}
    with pytest.raises(KeyError, match=r"state\['cell'\]\['warmstart'\]: missing"):
        env.reset_to(broken, [0])
    with pytest.raises(ValueError, match=r"\['joint_position'\]: expected shape \(2, 54\)"):
        env.reset_to(captured, [0, 0])
    _assert_same(env.scene.get_state(), now, "after the refused states")
    env.close()


def test_mimic_configs_that_cannot_work_are_refused_naming_the_field():
    cfg = r2s2r_isaaclab.make_env_cfg(MIMIC_TASK, num_envs=1)
    cfg.recorders = PickSortRecorderManagerCfg()
    with pytest.raises(ValueError, match=r"cfg.recorders: recording needs cfg.terminations = None"):
        _mimic_env(cfg)
    good = TaskInstanceCfg(object_name="green_can", belt_speed=0.08)
    for field, bad in (("object_name", "blue_whale"), ("belt_speed", 0.0), ("yaw", "north")):
        cfg = r2s2r_isaaclab.make_env_cfg(MIMIC_TASK, num_envs=1)
        cfg.reset_instances = [good, dataclasses.replace(good, **{field: bad})]
        with pytest.raises(ValueError, match=rf"reset_instances\[1\]\.{field}: "):
            _mimic_env(cfg)


def _demo_instance(demo, lateral_shift: float = 0.0) -> TaskInstanceCfg:
    speed, lateral, yaw = demo.spawn
    return TaskInstanceCfg(
        object_name=demo.objects[0],
        lateral=float(lateral[0]) + lateral_shift,
        yaw=float(yaw[0]),
        belt_speed=speed,
    )


def _in_its_bin_at_rest(env: PickSortMimicEnv, name: str, pose: np.ndarray, vel: np.ndarray):
    """The task's success stated from the specs: the object at rest inside its own bin."""
    task, world = env.task_spec, env.world_spec
    spec = task.bin_for(task.object_named(name))
    where = world.layout.bins[spec.name]
    local = Rotation.from_euler("z", -where.yaw_deg, degrees=True).apply(pose[:3] - where.pos)
    inside = (np.abs(local[:2]) < spec.half_size).all() and 0 < local[2] < 1.5 * spec.wall_height
    return bool(inside and np.linalg.norm(vel[:3]) < task.success.settle_speed)


def test_isaac_lab_mimics_generation_loop_on_an_r2s2r_demo(demo, tmp_path):
    import isaaclab_mimic.datagen.generation as generation
    from isaaclab_mimic.datagen.generation import (
        env_loop,
        setup_async_generation,
        setup_env_config,
    )
    from isaaclab_mimic.datagen.utils import get_env_name_from_dataset, setup_output_paths

    source = to_isaaclab(demo.root, tmp_path / "demo.hdf5", env_name=MIMIC_TASK)
    # generate_dataset.py's main() after its Kit launch, step by step.
    output_dir, name = setup_output_paths(str(tmp_path / "generated" / "mimic.hdf5"))
    env_name = get_env_name_from_dataset(str(source))
    assert env_name == MIMIC_TASK
    cfg, success_term = setup_env_config(env_name, output_dir, name, 1, "cpu", 2)
    assert success_term.func is mdp.object_sorted and cfg.terminations is None
    # Two attempts, kept whatever their outcome (what generation_keep_failed selects), on
    # Newton's MuJoCo C path (about 40 times faster per step than Warp's CPU device here).
    cfg.datagen_config.generation_guarantee = False
    cfg.recorders.dataset_export_mode = DatasetExportMode.EXPORT_SUCCEEDED_FAILED_IN_SEPARATE_FILES
    cfg.sim.physics.solver_cfg.use_mujoco_cpu = True
    # The script's own reset takes the first instance; the two attempts the next two: the demo's
    # start with the object moved across the belt, then the demo's own start.
    cfg.reset_instances = [_demo_instance(demo), _demo_instance(demo, MOVED)]
    env = gym.make(env_name, cfg=cfg).unwrapped
    # The script's checks of the env, as it makes them (a warning, there, for the second).
    if not isinstance(env, ManagerBasedRLMimicEnv):
        raise ValueError("The environment should be derived from ManagerBasedRLMimicEnv")
    if "action_noise_dict" not in inspect.signature(env.target_eef_pose_to_action).parameters:
        pytest.fail('the "noise" parameter of target_eef_pose_to_action is deprecated')
    seed = env.cfg.datagen_config.seed
    random.seed(seed)
    np.random.seed(seed)  # noqa: NPY002 - as the script seeds it: Mimic draws from it.
    torch.manual_seed(seed)
    env.reset()
    # The loop's counters are module globals: start them from zero.
    generation.num_success = generation.num_failures = generation.num_attempts = 0
    parts = setup_async_generation(env, 1, str(source), success_term)
    tasks = asyncio.ensure_future(asyncio.gather(*parts["tasks"]))
    try:
        env_loop(env, parts["reset_queue"], parts["action_queue"], parts["info_pool"],
                 parts["event_loop"], tasks)  # fmt: skip
    finally:
        tasks.cancel()
        with pytest.raises(asyncio.CancelledError):
            parts["event_loop"].run_until_complete(tasks)
    env.close()
    pool = parts["info_pool"]
    assert generation.num_attempts == 2
    assert generation.num_success + generation.num_failures == 2
    assert generation.num_success >= 1, "not even the demo's own start was sorted"

    # The files are Isaac Lab's: successes in mimic.hdf5, failures in mimic_failed.hdf5.
    episodes = []
    for file, success in ((name, True), (f"{name}_failed", False)):
        handler = HDF5DatasetFileHandler()
        handler.open(f"{output_dir}/{file}.hdf5")
        assert handler.get_env_name() == MIMIC_TASK and handler.get_format_version() == 1
        names = list(handler.get_episode_names())
        expected = generation.num_success if success else generation.num_failures
        assert len(names) == expected, file
        episodes += [(handler.load_episode(n, "cpu"), success) for n in names]
        handler.close()
    assert len(episodes) == 2

    # Each episode replayed from its recorded initial state in a new env reproduces its recorded
    # states, and the env's own success check agrees with the flag Mimic recorded.
    replay_cfg = r2s2r_isaaclab.make_env_cfg(MIMIC_TASK, num_envs=1)
    replay_cfg.sim.physics.solver_cfg.use_mujoco_cpu = True
    replay_cfg.terminations = None  # As generated: the episode goes on once the object is sorted.
    replay = _mimic_env(replay_cfg)
    src = pool.datagen_infos[0]
    (_, grasp_end), _ = pool.subtask_boundaries["left"][0]
    starts = []
    for episode, success in episodes:
        data = episode.data
        actions = data["actions"]
        n = len(actions)
        assert bool(episode.success) is success
        assert actions.shape == (n, replay.single_action_space.shape[0])
        for key in (*PROPRIO_OBS, "object"):
            assert len(data["obs"][key]) == n, key
        states = data["states"]
        assert all(len(v) == n for v in _flat(states).values())
        initial = data["initial_state"]
        chosen = int(initial["cell"]["objects"][0, 0])
        assert replay.cell.objects[chosen].name == demo.objects[0]
        starts.append(initial["rigid_object"][demo.objects[0]]["root_pose"][0, :2].numpy())
        replay.reset_to(initial, [0])
        for t in range(n):
            replay.step(actions[t : t + 1])
            _assert_same(replay.scene.get_state(), _at(states, t), f"replay step {t}")
        assert bool(replay.cell.success[0]) is success
        # Mimic flags an attempt successful when its success term held at any step (the
        # object may be knocked out of rest afterwards, as the episode goes on): the recorded
        # object is at rest in its bin at some step exactly when the flag says so.
        obj_states = states["rigid_object"][demo.objects[0]]
        poses, vels = obj_states["root_pose"].numpy(), obj_states["root_velocity"].numpy()
        ever = any(
            _in_its_bin_at_rest(replay, demo.objects[0], poses[t], vels[t]) for t in range(n)
        )
        assert ever is success
        # Generated, not replayed: each arm's grasp segment is the demo's, moved with the object
        # (MimicGen's T_obj_now . T_obj_src^-1 . T_eef_src), a period or so after it starts.
        obj = data["obs"]["object"][0].numpy().astype(np.float64)
        now = make_pose(obj[:3], obj[3:])
        targets = replay.action_to_target_eef_pose(actions)
        for eef in ("left", "right"):
            rel = np.linalg.inv(now) @ targets[eef].numpy()
            src_rel = np.linalg.inv(src.object_poses["object"][0].numpy()) @ (
                src.target_eef_pose[eef][:grasp_end].numpy()
            )
            offsets = [k for k in range(30)
                       if np.allclose(rel[k : k + grasp_end], src_rel, atol=2e-4)]  # fmt: skip
            assert offsets, f"{eef}: no stretch of the episode is the demo's grasp segment"
    assert abs(np.linalg.norm(starts[0] - starts[1]) - MOVED) < 1e-3, starts
    replay.close()

    # Isaac Lab's file of the successes converts to an r2s2r dataset and back.
    kept = [e for e, s in episodes if s]
    ds = from_isaaclab(f"{output_dir}/{name}.hdf5", tmp_path / "generated_ds")
    assert ds.num_episodes == len(kept)

    # The dataset keeps each quaternion on one hemisphere through an episode (q and -q are one
    # rotation); Mimic's file keeps whichever sign its pose arithmetic gave.
    def same(arrays: dict[str, np.ndarray], key: str, source: np.ndarray) -> None:
        names = ds.features[key].get("names")
        np.testing.assert_array_equal(arrays[key], continuous(source, names))

    for i, episode in enumerate(kept):
        arrays, obs = ds.episode_arrays(i), episode.data["obs"]
        same(arrays, ACTION_KEY, episode.data["actions"].numpy())
        same(arrays, STATE_KEY, np.concatenate([obs[k].numpy() for k in PROPRIO_OBS], axis=1))
        same(arrays, ENV_STATE_KEY, obs["object"].numpy())
        assert ds.episode(i)["success"]
    back = to_isaaclab(ds, tmp_path / "again.hdf5", env_name=MIMIC_TASK)
    handler = HDF5DatasetFileHandler()
    handler.open(str(back))
    again = handler.load_episode("demo_0", "cpu")
    handler.close()
    # Back in Isaac Lab's layout, every field is the dataset's: the same rotations, each
    # quaternion on the dataset's hemisphere.
    first = ds.episode_arrays(0)
    np.testing.assert_array_equal(again.data["actions"].numpy(), first[ACTION_KEY])
    state = np.concatenate(
        [again.data["obs"][key].numpy().reshape(len(first[STATE_KEY]), -1) for key in PROPRIO_OBS],
        axis=1,
    )
    np.testing.assert_array_equal(state, first[STATE_KEY])
