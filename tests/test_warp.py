"""Tests for the batched MuJoCo Warp backend (``WarpPhysics``) and ``PickSortVectorEnv``.

They run on Warp's CPU device when there is no GPU. The first run compiles Warp kernels
(a few minutes on two cores); later runs load them from Warp's kernel cache.
"""

from __future__ import annotations

import sys
from pathlib import Path

import mujoco
import numpy as np
import pytest

pytest.importorskip("mujoco_warp")

import warp as wp  # noqa: E402

try:
    from r2s2r.sim.cell import DROPPED, PENDING, SORTED, Cell
except ModuleNotFoundError:
    # The package is not installed; fall back to the source tree.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "source"))
    from r2s2r.sim.cell import DROPPED, PENDING, SORTED, Cell

from r2s2r.sim.physics import MujocoPhysics, make_physics  # noqa: E402
from r2s2r.sim.scene import Scene, build_scene  # noqa: E402
from r2s2r.sim.vector_env import PickSortVectorEnv  # noqa: E402
from r2s2r.sim.warp_physics import WarpPhysics  # noqa: E402
from r2s2r.spec import TaskSpec, WorldSpec  # noqa: E402
from r2s2r.spec.conditions import apply_condition  # noqa: E402

wp.config.log_level = wp.LOG_WARNING

# MuJoCo Warp integrates in float32 and MuJoCo C in float64. Over a 0.5 s rollout with
# contacts the two agree to about 1e-6 here; these bounds leave room for other solver
# iteration counts and GPU summation order while still catching any modelling difference
# (a wrong actuator, delay or contact changes the result by centimetres).
ARM_TOL_RAD = 1e-3
POS_TOL_M = 2e-3
# Worlds that should not interact must agree to float32 round-off.
INDEPENDENT_TOL = 1e-5


@pytest.fixture(scope="module")
def scene(task: TaskSpec, world: WorldSpec) -> Scene:
    return build_scene(task, world)


def hold_action(cell: Cell) -> np.ndarray:
    """Actions (N, 54) holding both TCPs at their current world pose, hands open."""
    pos, mat = cell.physics.site_poses(cell.idx.tcp_sites)
    action = np.zeros((cell.n, 2, 27))
    action[..., :3] = pos
    for w in range(cell.n):
        for arm in range(2):
            mujoco.mju_mat2Quat(action[w, arm, 3:7], mat[w, arm].reshape(9))
    return action.reshape(cell.n, 54)


def reset(cell: Cell, seed: int = 0) -> None:
    """Reset every world of ``cell`` from the same seed (identical episodes)."""
    cell.reset(np.arange(cell.n), [np.random.default_rng(seed) for _ in range(cell.n)])


def run_until_judged(cell: Cell, max_steps: int) -> None:
    action = hold_action(cell)
    for _ in range(max_steps):
        cell.step(action)
        if (cell.status != PENDING).all():
            return


def test_rollout_matches_mujoco(scene: Scene) -> None:
    cpu = Cell(scene, MujocoPhysics(scene.model))
    gpu = Cell(scene, WarpPhysics(scene.model, 2))
    errors = {"arm": 0.0, "tcp": 0.0, "object": 0.0}
    for cell in (cpu, gpu):
        reset(cell)
    assert cpu.spawned.all() and gpu.spawned.all()  # An object is on the running belt.
    arm = cpu.idx.arm_qadr.ravel()
    arm_start = cpu.physics.state()[0][0, arm].copy()
    obj_start = cpu.object_states()[0][0, 0].copy()
    base = hold_action(cpu)
    for k in range(25):  # 0.5 s at 50 Hz.
        action = base.copy().reshape(1, 2, 27)
        action[..., :3] += 0.03 * np.sin(2 * np.pi * k * cpu.dt) * np.array([1.0, 0.5, -0.5])
        for cell in (cpu, gpu):
            cell.step(np.repeat(action.reshape(1, 54), cell.n, axis=0))
        q_cpu, _ = cpu.physics.state()
        q_gpu, _ = gpu.physics.state()
        errors["arm"] = max(errors["arm"], np.abs(q_gpu[:, arm] - q_cpu[:, arm]).max())
        tcp_cpu = cpu.physics.site_poses(cpu.idx.tcp_sites)[0]
        tcp_gpu = gpu.physics.site_poses(gpu.idx.tcp_sites)[0]
        errors["tcp"] = max(errors["tcp"], np.abs(tcp_gpu - tcp_cpu).max())
        obj_err = np.abs(gpu.object_states()[0] - cpu.object_states()[0]).max()
        errors["object"] = max(errors["object"], obj_err)
    print(f"max |warp - mujoco| over 0.5 s: {errors}")
    assert errors["arm"] < ARM_TOL_RAD
    assert errors["tcp"] < POS_TOL_M
    assert errors["object"] < POS_TOL_M
    # The host copy used for rendering has the same cameras (wrist ones move with the arms).
    ref = cpu.physics.mjdata(0)
    mujoco.mj_comPos(scene.model, ref)
    mujoco.mj_camlight(scene.model, ref)
    for w in range(gpu.n):
        np.testing.assert_allclose(gpu.physics.mjdata(w).cam_xpos, ref.cam_xpos, atol=POS_TOL_M)
    # The arms really moved and the object really rode the belt.
    assert np.abs(q_cpu[0, arm] - arm_start).max() > 10 * ARM_TOL_RAD
    assert np.linalg.norm(cpu.object_states()[0][0, 0] - obj_start) > 0.02


def _place(cell: Cell, pos: np.ndarray, vel: np.ndarray) -> None:
    """Put each world's spawned object at ``pos`` (N, 3) upright, moving at ``vel`` (N, 3)."""
    obj = cell.chosen[:, 0]
    for w in range(cell.n):
        adr = cell.idx.obj_qadr[obj[w]] + np.arange(7)
        vadr = cell.idx.obj_vadr[obj[w]] + np.arange(6)
        qpos = np.concatenate([pos[w], [1.0, 0.0, 0.0, 0.0]])
        qvel = np.concatenate([vel[w], np.zeros(3)])
        cell.physics.write_qpos(np.array([w]), adr, qpos[None], vadr, qvel[None])


def test_unpicked_object_is_dropped_on_both_backends(task: TaskSpec, world: WorldSpec) -> None:
    fast = build_scene(*apply_condition("fast_belt", task, world))
    belt = fast.world.layout.belt
    for cell in (
        Cell(fast, make_physics("mujoco", fast.model)),
        Cell(fast, make_physics("mujoco_warp", fast.model, 3)),
    ):
        cell.reset(np.arange(cell.n), [np.random.default_rng(s) for s in range(cell.n)])
        # Skip most of the ride: start each object shortly before the belt's downstream end.
        pos = cell.object_states()[0][:, 0].copy()
        pos[:, 0] = belt.pos[0] + belt.length / 2 - 0.06
        vel = np.zeros((cell.n, 3))
        vel[:, 0] = cell.belt_speed
        _place(cell, pos, vel)
        run_until_judged(cell, max_steps=60)
        assert (cell.status == DROPPED).all(), (type(cell.physics).__name__, cell.status)


def test_object_released_over_its_bin_is_sorted_on_both_backends(scene: Scene) -> None:
    layout = scene.world.layout
    for cell in (Cell(scene, MujocoPhysics(scene.model)), Cell(scene, WarpPhysics(scene.model, 3))):
        cell.reset(np.arange(cell.n), [np.random.default_rng(s) for s in range(cell.n)])
        obj = cell.chosen[:, 0]
        bins = [cell.bin_names[cell.assigned_bin[o]] for o in obj]
        pos = np.array([layout.bins[b].pos for b in bins], dtype=float)
        # Release it 3 cm above the rim, so it falls in and must settle before it counts.
        rim = max(b.wall_height for b in scene.task.bins)
        pos[:, 2] += rim + 0.03 + np.array([cell.objects[o].rest_height for o in obj])
        _place(cell, pos, np.zeros((cell.n, 3)))
        run_until_judged(cell, max_steps=50)
        assert (cell.status == SORTED).all(), (type(cell.physics).__name__, cell.status)


def test_resetting_one_world_leaves_the_others_alone(scene: Scene) -> None:
    cells = [Cell(scene, WarpPhysics(scene.model, 3)) for _ in range(2)]
    for cell in cells:
        cell.reset(np.arange(3), [np.random.default_rng(s) for s in range(3)])
    initial = cells[0].physics.state()[0].copy()
    for cell in cells:
        action = hold_action(cell)
        for _ in range(4):
            cell.step(action)
    before = [a.copy() for a in cells[0].physics.state()]
    cells[0].reset(np.array([1]), [np.random.default_rng(7)])
    after = cells[0].physics.state()
    for b, a in zip(before, after, strict=True):
        np.testing.assert_array_equal(a[[0, 2]], b[[0, 2]])
    arm = cells[0].idx.arm_qadr.ravel()
    np.testing.assert_allclose(after[0][1, arm], initial[1, arm], atol=1e-6)
    assert np.abs(after[0][1] - before[0][1]).max() > 1e-3  # World 1 did start over.
    # The other worlds go on exactly as in a twin batch where world 1 was not reset.
    for cell in cells:
        for _ in range(3):
            cell.step(action)
    for ours, twin in zip(cells[0].physics.state(), cells[1].physics.state(), strict=True):
        np.testing.assert_allclose(ours[[0, 2]], twin[[0, 2]], atol=INDEPENDENT_TOL)


def test_per_world_friction_changes_only_its_world(scene: Scene) -> None:
    model = scene.model
    physics = WarpPhysics(model, 3)
    cell = Cell(scene, physics)
    reset(cell)
    # A flat novel object (never spawned in the nominal condition) waits on the floor far away.
    name = min(scene.task.novel_objects, key=lambda o: o.rest_height).name
    obj = [o.name for o in cell.objects].index(name)
    adr, vadr = cell.idx.obj_qadr[obj], cell.idx.obj_vadr[obj]
    friction = np.repeat(model.geom_friction[None], 3, axis=0)
    for geom in (model.geom("floor").id, model.geom(f"obj:{name}").id):
        friction[1, geom, 0] = 0.1
    physics.set_world_params("geom_friction", friction)
    qpos = physics.state()[0][:, adr : adr + 7].copy()
    start = qpos[:, :3].copy()
    vel = np.zeros((3, 6))
    vel[:, 1] = 0.5  # Slide along +y, away from the other waiting objects.
    physics.write_qpos(np.arange(3), adr + np.arange(7), qpos, vadr + np.arange(6), vel)
    for _ in range(25):
        physics.step(cell.ctrl, cell.nsub)
    slide = np.linalg.norm(physics.state()[0][:, adr : adr + 3] - start, axis=1)
    # Friction 1 stops the object within ~1.3 cm, friction 0.1 only after ~13 cm.
    assert slide[1] > 5 * max(slide[0], slide[2]), slide
    assert abs(slide[0] - slide[2]) < INDEPENDENT_TOL, slide
    with pytest.raises(ValueError, match="geom_friction"):
        physics.set_world_params("geom_friction", friction[:, :3])
    with pytest.raises(ValueError, match="geom_margin"):
        physics.set_world_params("geom_margin", np.zeros((3, model.ngeom)))


def test_overflow_raises(scene: Scene) -> None:
    physics = WarpPhysics(scene.model, 1, njmax=16)
    cell = Cell(scene, physics)
    with pytest.raises(RuntimeError, match="njmax"):
        reset(cell)
        physics.step(cell.ctrl, cell.nsub)


def test_vector_env_reset_step_and_determinism() -> None:
    env = PickSortVectorEnv(num_envs=2)
    env.action_space.seed(0)
    actions = [env.action_space.sample() for _ in range(3)]
    runs = []
    for _ in range(2):
        obs, info = env.reset(seed=0)
        trace = [obs]
        for a in actions:
            obs, reward, terminated, truncated, info = env.step(a)
            trace.append(obs)
        runs.append(trace)
    assert env.observation_space.contains(obs)
    assert obs["tcp_pose"].shape == (2, 2, 7)
    assert obs["arm_joints"].shape == (2, 2, 7) and obs["hand_joints"].shape == (2, 2, 20)
    assert len(obs["instruction"]) == 2 and obs["embodiment_id"].shape == (2,)
    assert reward.shape == terminated.shape == truncated.shape == (2,)
    assert info["success"].shape == info["time"].shape == info["belt_speed"].shape == (2,)
    np.testing.assert_allclose(info["time"], 3 * env.cell.dt)
    # Worlds get different seeds, hence different belt speeds.
    assert info["belt_speed"][0] != info["belt_speed"][1]
    for first, second in zip(*runs, strict=True):
        for key in ("tcp_pose", "arm_joints", "hand_joints"):
            np.testing.assert_allclose(first[key], second[key], atol=INDEPENDENT_TOL)
        assert first["instruction"] == second["instruction"]
    # Autoreset (NEXT_STEP): a world truncated at one step starts over at the next.
    env.reset(seed=1)
    env.cell.max_steps = 2
    hold = hold_action(env.cell)
    _, _, _, truncated, _ = env.step(hold)
    assert not truncated.any()
    _, _, _, truncated, _ = env.step(hold)
    assert truncated.all()
    _, reward, terminated, truncated, info = env.step(hold)
    assert not (truncated.any() or terminated.any() or reward.any())
    np.testing.assert_array_equal(info["time"], 0.0)
    env.close()


def test_env_and_vector_env_observe_through_one_contract() -> None:
    """One world of the vector env observes what the env does: the same keys, the env's
    shapes with a leading world dimension, the same spaces and the common info keys."""
    from r2s2r.sim.env import PickSortEnv

    env = PickSortEnv(images=False, env_state=True)
    vec = PickSortVectorEnv(num_envs=1, env_state=True)
    assert vec.contract == env.contract
    assert vec.single_observation_space == env.observation_space
    assert vec.single_action_space == env.action_space
    obs, info = env.reset(seed=0)
    vobs, vinfo = vec.reset(seed=0)
    assert list(vobs) == list(obs)
    for key, value in obs.items():
        if key == "instruction":
            assert isinstance(vobs[key], tuple) and isinstance(vobs[key][0], str)
        else:
            assert np.shape(vobs[key]) == (1, *np.shape(value)), key
    common = set(env.cell.common_info())
    assert common <= set(info) and common <= set(vinfo)
    for key in common:
        assert np.shape(vinfo[key]) == (1, *np.shape(info[key])), key
    vec.close()


def test_pick_sort_env_runs_on_mujoco_warp() -> None:
    """``PickSortEnv(physics="mujoco_warp")`` steps like the CPU env on the same seed."""
    from r2s2r.sim.env import PickSortEnv

    envs = [PickSortEnv(physics=p, images=False) for p in ("mujoco", "mujoco_warp")]
    results = []
    for env in envs:
        obs, info = env.reset(seed=4)
        action = np.concatenate([np.concatenate([p, np.zeros(20)]) for p in obs["tcp_pose"]])
        action[1] += 0.05  # Move the left TCP 5 cm across the belt.
        for _ in range(10):
            obs, _, _, _, info = env.step(action)
        results.append((obs, info))
    (cpu, cpu_info), (gpu, gpu_info) = results
    assert cpu_info["object_names"] == gpu_info["object_names"]
    np.testing.assert_allclose(gpu["tcp_pose"][:, :3], cpu["tcp_pose"][:, :3], atol=POS_TOL_M)
    np.testing.assert_allclose(gpu["arm_joints"], cpu["arm_joints"], atol=ARM_TOL_RAD)
    np.testing.assert_allclose(gpu_info["object_pos"], cpu_info["object_pos"], atol=POS_TOL_M)


def test_make_vec_builds_the_batched_env() -> None:
    import gymnasium as gym

    import r2s2r  # noqa: F401  (registers the ids)

    envs = gym.make_vec(
        "R2S2R/PickSort-v0", num_envs=2, vectorization_mode="vector_entry_point", images=False
    )
    obs, info = envs.reset(seed=3)
    assert obs["tcp_pose"].shape == (2, 2, 7) and info["success"].shape == (2,)
    hold = np.stack(
        [np.concatenate([np.concatenate([p, np.zeros(20)]) for p in w]) for w in obs["tcp_pose"]]
    )
    obs, reward, terminated, truncated, info = envs.step(hold)
    assert reward.shape == (2,) and terminated.shape == (2,)
    envs.close()


def test_diverged_world_ends_unstable_and_others_go_on(scene: Scene) -> None:
    """A fault injected into one world (non-finite object velocity) marks that world
    unstable on both backends: truncated, never a success or a judged outcome, until its
    reset; the batch's other world stays stable."""
    cells = {
        "mujoco": Cell(scene, MujocoPhysics(scene.model)),
        "warp": Cell(scene, WarpPhysics(scene.model, 2)),
    }
    for name, cell in cells.items():
        reset(cell)
        faulty = cell.n - 1
        vadr = cell.idx.obj_vadr[cell.chosen[faulty, 0]]
        nan = np.full((1, 6), np.nan)  # Only the velocity: no position is written.
        cell.physics.write_qpos(
            np.array([faulty]), np.arange(0), np.zeros((1, 0)), vadr + np.arange(6), nan
        )
        cell.step(hold_action(cell))
        assert cell.unstable[faulty] and cell.truncated[faulty], name
        assert not cell.success[faulty] and not cell.terminated[faulty], name
        assert not cell.unstable[: cell.n - 1].any(), name
        cell.reset(np.array([faulty]), [np.random.default_rng(0)])
        assert not cell.unstable.any(), name
        cell.step(hold_action(cell))
        assert not cell.unstable.any(), name
