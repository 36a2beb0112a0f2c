"""The pick-and-sort env: belt transport, judging, determinism, controllers and conditions."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import yaml

import r2s2r
from r2s2r.geometry.rotations import quat_conj, quat_mul, quat_to_rotvec, rotvec_to_quat
from r2s2r.paths import presets_dir
from r2s2r.sim.cell import DROPPED, SORTED, WRONG_BIN
from r2s2r.sim.env import PickSortEnv
from r2s2r.spec import SpecError

PRESETS = presets_dir()


def hold(obs: dict) -> np.ndarray:
    """Keep both TCPs where they are, hands open."""
    return np.concatenate([np.concatenate([p, np.zeros(20)]) for p in obs["tcp_pose"]])


def run(env: PickSortEnv, action: np.ndarray, steps: int) -> tuple[dict, dict, bool]:
    obs, info, done = {}, {}, False
    for _ in range(steps):
        obs, _, terminated, truncated, info = env.step(action)
        done = terminated or truncated
        if done:
            break
    return obs, info, done


def test_belt_carries_a_resting_object_at_the_commanded_speed() -> None:
    env = PickSortEnv(images=False)
    obs, info = env.reset(seed=3)
    speed = info["belt_speed"]
    obs, info, _ = run(env, hold(obs), 25)  # Let the contact settle.
    x0, t0 = info["object_pos"][0, 0], info["time"]
    belt_q = []
    for _ in range(100):
        obs, _, _, _, info = env.step(hold(obs))
        belt_q.append(env.physics.state()[0][0, env.cell.idx.belt_qadr])
    measured = (info["object_pos"][0, 0] - x0) / (info["time"] - t0)
    assert measured == pytest.approx(speed, rel=0.05)
    assert abs(info["object_pos"][0, 1] - obs_y(info)) < 1e-3
    # The belt is shifted back by whole texture periods and never runs out of travel.
    period = env.world_spec.layout.belt.texture_period
    assert max(np.abs(belt_q)) <= period / 2 + 0.01


def obs_y(info: dict) -> float:
    return float(info["object_pos"][0, 1])


def test_unpicked_object_drops_off_the_end_and_fails() -> None:
    env = PickSortEnv(images=False, condition="fast_belt")
    obs, info = env.reset(seed=0)
    assert info["belt_speed"] == env.task_spec.belt.fast_speed
    reward, done = 0.0, False
    for _ in range(env.cell.max_steps):
        obs, reward, terminated, truncated, info = env.step(hold(obs))
        if terminated or truncated:
            done = terminated
            break
    assert done, "the object never left the belt"
    assert info["object_status"] == ["dropped"] and env.cell.status[0, 0] == DROPPED
    assert not info["success"] and reward == 0.0
    belt = env.world_spec.layout.belt
    assert info["object_pos"][0, 0] > belt.pos[0] + belt.length / 2 - 0.05


def _place_in_bin(env: PickSortEnv, bin_name: str | None) -> None:
    """Drop the episode's object into a bin, or onto the table between the arms (None)."""
    cell = env.cell
    obj = cell.chosen[0, 0]
    if bin_name is None:
        centre = np.array([0.0, -0.3, env.world_spec.layout.table_height])
    else:
        centre = np.asarray(env.world_spec.layout.bins[bin_name].pos)
    adr = cell.idx.obj_qadr[obj] + np.arange(7)
    vadr = cell.idx.obj_vadr[obj] + np.arange(6)
    pose = np.concatenate([centre + [0.0, 0.0, 0.1], [1.0, 0.0, 0.0, 0.0]])
    env.physics.write_qpos(np.array([0]), adr, pose[None], vadr, np.zeros((1, 6)))


@pytest.mark.parametrize("right_bin", [True, False])
def test_object_in_its_bin_succeeds_and_in_the_wrong_bin_fails(right_bin: bool) -> None:
    env = PickSortEnv(images=False)
    obs, info = env.reset(seed=1)
    assigned = info["assigned_bins"][0]
    other = next(b.name for b in env.task_spec.bins if b.name != assigned)
    _place_in_bin(env, assigned if right_bin else other)
    reward, terminated = 0.0, False
    for _ in range(150):
        obs, reward, terminated, _, info = env.step(hold(obs))
        if terminated:
            break
    assert terminated
    assert info["success"] is right_bin and reward == float(right_bin)
    assert env.cell.status[0, 0] == (SORTED if right_bin else WRONG_BIN)


def test_object_resting_on_the_table_outside_the_bins_is_dropped() -> None:
    env = PickSortEnv(images=False)
    obs, _ = env.reset(seed=2)
    _place_in_bin(env, None)
    obs, info, done = run(env, hold(obs), 150)
    assert done and info["object_status"] == ["dropped"] and not info["success"]


def test_same_seed_and_actions_give_identical_observations() -> None:
    envs = [PickSortEnv(images=True, depth=True) for _ in range(2)]
    rng = np.random.default_rng(7)
    obs0 = [e.reset(seed=11)[0] for e in envs]
    actions = [
        hold(obs0[0]) + rng.normal(0, 0.01, 54) * np.tile(np.r_[np.ones(3), np.zeros(24)], 2)
        for _ in range(8)
    ]
    trajectories = []
    for env in envs:
        obs_list = [env.reset(seed=11)[0]]
        obs_list += [env.step(a)[0] for a in actions]
        trajectories.append(obs_list)
    for a, b in zip(*trajectories, strict=True):
        for cam in a["images"]:
            np.testing.assert_array_equal(a["images"][cam], b["images"][cam])
        np.testing.assert_array_equal(a["head_depth"], b["head_depth"])
        np.testing.assert_array_equal(a["tcp_pose"], b["tcp_pose"])
        np.testing.assert_array_equal(a["hand_joints"], b["hand_joints"])
        assert a["instruction"] == b["instruction"]
    other = envs[0].reset(seed=12)[1]
    first = envs[1].reset(seed=11)[1]
    assert other["belt_speed"] != first["belt_speed"]
    for env in envs:
        env.close()


def test_observations_match_the_spaces() -> None:
    env = PickSortEnv(images=True, depth=True)
    obs, info = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    assert obs["images"]["left_wrist"].shape == (256, 256, 3)
    depth = obs["head_depth"]
    assert depth.dtype == np.float32 and 0.3 < np.median(depth) < 3.0
    assert obs["instruction"].startswith("Pick the ") and obs["embodiment_id"] == 0
    # The head camera sees the belt, so its view is not blank.
    assert obs["images"]["head"].std() > 10
    assert set(info) >= {"object_pos", "object_status", "assigned_bins", "success"}
    with pytest.raises(ValueError, match="zero norm"):
        env.step(np.zeros(54))
    with pytest.raises(ValueError, match="expected 54 numbers per world"):
        env.step(np.zeros(53))
    bad = hold(obs)
    bad[0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        env.step(bad)
    env.close()


def test_cartesian_controller_tracks_a_pose_target_under_its_limits() -> None:
    env = PickSortEnv(images=False)
    obs, _ = env.reset(seed=0)
    start = obs["tcp_pose"].copy()
    target = start.copy()
    target[0, :3] += [0.05, 0.12, -0.08]
    turn = rotvec_to_quat(np.array([0.0, 0.0, np.radians(20)]))
    target[0, 3:] = quat_mul(turn, start[0, 3:])
    action = np.concatenate([np.concatenate([p, np.zeros(20)]) for p in target])
    speeds, prev = [], start[0, :3]
    for _ in range(100):
        obs, *_ = env.step(action)
        speeds.append(np.linalg.norm(obs["tcp_pose"][0, :3] - prev) / env.cell.dt)
        prev = obs["tcp_pose"][0, :3]
    ctl = env.world_spec.controller
    assert np.linalg.norm(obs["tcp_pose"][0, :3] - target[0, :3]) < 0.005
    err = quat_to_rotvec(quat_mul(quat_conj(obs["tcp_pose"][0, 3:]), target[0, 3:]))
    assert np.degrees(np.linalg.norm(err)) < 2.0
    assert max(speeds) <= ctl.max_lin_vel * 1.1
    # The other arm holds still.
    assert np.linalg.norm(obs["tcp_pose"][1, :3] - start[1, :3]) < 0.005


def test_a_slow_velocity_limit_slows_the_arm(world) -> None:  # type: ignore[no-untyped-def]
    slow = world.replace(controller={"max_lin_vel": 0.05})
    env = PickSortEnv(world=slow, images=False)
    obs, _ = env.reset(seed=0)
    target = obs["tcp_pose"].copy()
    target[0, 1] += 0.1
    action = np.concatenate([np.concatenate([p, np.zeros(20)]) for p in target])
    obs, *_ = run(env, action, 50)  # 1 s at 5 cm/s covers half the distance.
    moved = obs["tcp_pose"][0, 1] - target[0, 1] + 0.1
    assert 0.035 < moved < 0.06


def test_joint_position_mode_reaches_joint_targets(world) -> None:  # type: ignore[no-untyped-def]
    env = PickSortEnv(images=False, action_mode="joint")
    obs, _ = env.reset(seed=0)
    target = obs["arm_joints"].copy()
    target[0, 0] += 0.3
    target[1, 3] -= 0.2
    hand = np.full(20, 0.5)
    hand[5::4] = 0.0  # Finger abduction (joint 2 of fingers 2-5) stays centred.
    action = np.concatenate([np.concatenate([q, hand]) for q in target])
    obs, *_ = run(env, action, 75)
    np.testing.assert_allclose(obs["arm_joints"], target, atol=0.02)
    np.testing.assert_allclose(obs["hand_joints"][0, [4, 6, 7]], 0.5, atol=0.05)


def test_conditions_shift_light_belt_and_objects() -> None:
    for condition in ("nominal", "red_light", "fast_belt", "novel_objects", "all_shifts"):
        env = PickSortEnv(images=False, condition=condition)
        _, info = env.reset(seed=5)
        spec = env.task_spec
        light = env.model.light_diffuse[env.model.light("key").id]
        red = condition in ("red_light", "all_shifts")
        assert bool(light[0] > 2 * light[2]) is red
        fast = condition in ("fast_belt", "all_shifts")
        assert (info["belt_speed"] == spec.belt.fast_speed) is fast
        novel = {o.name for o in spec.novel_objects}
        assert (info["object_names"][0] in novel) is (condition in ("novel_objects", "all_shifts"))
    with pytest.raises(ValueError, match="unknown condition 'foggy'"):
        PickSortEnv(condition="foggy")
    with pytest.raises(ValueError, match="did you mean 'red_light'"):
        PickSortEnv(condition="red_lihgt")


def test_appearance_randomization_draws_from_the_ranges() -> None:
    env = PickSortEnv(images=False, randomize_appearance=True)
    geoms = env.appearance.obj_geoms
    env.reset(seed=1)
    a = env.model.geom_rgba[geoms].copy()
    env.reset(seed=2)
    b = env.model.geom_rgba[geoms].copy()
    env.reset(seed=1)
    np.testing.assert_array_equal(env.model.geom_rgba[geoms], a)
    assert not np.array_equal(a, b)
    jitter = env.world_spec.appearance.object_rgb_jitter
    assert np.abs(b[:, :3] - env.appearance.base_obj_rgba[:, :3]).max() <= jitter + 1e-9
    intensity = env.model.light_diffuse[env.appearance.light_id].max()
    lo, hi = env.world_spec.appearance.light_intensity
    assert lo <= intensity <= hi


def test_every_registered_env_can_be_made_reset_and_stepped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The user's config folder holds only what grounding wrote; presets come from the package.
    monkeypatch.setenv("R2S2R_CONFIG_DIR", str(tmp_path / "config"))
    with pytest.raises(SpecError, match="grounded world does not exist"):
        gym.make("R2S2R/PickSort-Grounded-v0", images=False)
    # A grounded world written the way grounding writes one (a changed WorldSpec).
    (tmp_path / "config" / "world").mkdir(parents=True)
    nominal = yaml.safe_load((PRESETS / "world" / "nominal.yaml").read_text())
    nominal["name"] = "grounded"
    nominal["cameras"]["left_wrist"]["fx"] = 252.0
    nominal["layout"]["belt"]["pos"] = [0.024, 0.018, 0.786]
    (tmp_path / "config" / "world" / "grounded.yaml").write_text(yaml.safe_dump(nominal))
    for env_id in r2s2r.ENV_IDS:
        env = gym.make(env_id, images=True)
        obs, _ = env.reset(seed=0)
        assert env.observation_space.contains(obs)
        obs, *_ = env.step(hold(obs))
        assert env.observation_space.contains(obs)
        expected = "grounded" if "Grounded" in env_id else "nominal"
        assert env.unwrapped.world_spec.name == expected
        env.close()


def test_diverged_physics_truncates_the_episode_as_unstable() -> None:
    """A fault injected into the simulation (a non-finite object velocity; MuJoCo warns and
    resets the state) truncates the episode with ``info["unstable"]``, no reward and no
    success, however the reset state would be judged; the next reset clears it."""
    env = PickSortEnv(images=False)
    obs, info = env.reset(seed=0)
    assert info["unstable"] is False
    obs, reward, terminated, truncated, info = env.step(hold(obs))
    assert not (truncated or info["unstable"])
    qpos, qvel = (a[0].copy() for a in env.physics.state())
    qvel[-6:] = np.nan
    env.physics.set_state(0, qpos, qvel)
    obs, reward, terminated, truncated, info = env.step(hold(obs))
    assert info["unstable"] and truncated and not terminated
    assert reward == 0.0 and not info["success"]
    obs, info = env.reset(seed=0)
    assert not info["unstable"]
