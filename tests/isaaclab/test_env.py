"""The Isaac Lab env built and stepped on Newton's MuJoCo Warp solver (CPU), and its parity
with the core's MuJoCo cell on a recorded command sequence."""

from __future__ import annotations

import numpy as np
import pytest
import r2s2r_isaaclab
from r2s2r_isaaclab.newton_physics import NewtonPhysics

from r2s2r.sim.vector_env import PickSortVectorEnv


@pytest.fixture(scope="module")
def env():
    return r2s2r_isaaclab.make_env("Isaac-R2S2R-PickSort-Grounded-AllShifts-v0", num_envs=2)


def test_build_and_step_a_few_envs(env):
    assert isinstance(env, PickSortVectorEnv)
    assert isinstance(env.physics, NewtonPhysics) and not env.physics.solver.use_mujoco_cpu
    assert env.num_envs == 2 and env.physics.newton_model.world_count == 2
    # The condition is in the specs the cell runs: the fast belt, the novel objects.
    assert env.task_spec.belt.fixed_speed == env.task_spec.belt.fast_speed
    obs, info = env.reset(seed=3)
    assert obs in env.observation_space
    novel = {o.name for o in env.task_spec.novel_objects}
    assert {env.cell.objects[i].name for i in info["object_index"][:, 0]} <= novel
    np.testing.assert_allclose(info["belt_speed"], env.task_spec.belt.fast_speed)
    hold = env._hold_action(np.arange(2))
    start_tcp, start_obj = obs["tcp_pose"].copy(), info["object_pos"].copy()
    steps = 10
    for _ in range(steps):
        obs, reward, terminated, truncated, info = env.step(hold)
    assert obs in env.observation_space
    assert not terminated.any() and not truncated.any() and not info["unstable"].any()
    # The arms hold their pose; the objects ride the belt at its speed.
    np.testing.assert_allclose(obs["tcp_pose"][..., :3], start_tcp[..., :3], atol=2e-3)
    travelled = np.linalg.norm(info["object_pos"][:, 0, :2] - start_obj[:, 0, :2], axis=-1)
    expected = env.task_spec.belt.fast_speed * steps / env.task_spec.control_hz
    np.testing.assert_allclose(travelled, expected, rtol=0.2)
    with pytest.raises(ValueError, match="actions must have shape"):
        env.step(hold[:1])


# Parity tolerances (the core cell on MuJoCo C, float64; the env on MuJoCo Warp, float32, with
# the Cartesian controller's delay emulated): TCP position and orientation over the whole
# episode, and where the object ends up.
TCP_TOL_MM, ROT_TOL_DEG, OBJECT_TOL_MM = 5.0, 2.0, 30.0
# Two MuJoCo versions running the same closed-loop episode, once the hand holds the object.
VERSIONS_TCP_TOL_MM = 8.0


def test_parity_with_the_core_cell():
    from r2s2r_isaaclab.parity import run

    result = run(seed=0, task_id="Isaac-R2S2R-PickSort-Ungrounded-v0")
    assert result.core_success and result.core_status == ["sorted"]
    assert result.isaac_status == result.core_status
    assert result.isaac_success
    assert result.tcp_pos_max_mm < TCP_TOL_MM, result
    assert result.tcp_rot_max_deg < ROT_TOL_DEG, result
    assert result.object_carry_max_mm < OBJECT_TOL_MM, result


def test_this_venvs_core_cell_agrees_with_the_core_venvs(core_python):
    """The parity above runs the core cell here, on Newton's MuJoCo 3.12; the core's own venv
    runs MuJoCo 4.0. The same scripted episode in both: same outcome; the TCP the same to a
    tenth of a millimetre on the approach, then within 8 mm (the hand's contacts with the object
    are solved a little differently by the two versions, and the scripted picker, closed loop,
    follows the object; 5.3 mm measured on the vendor hand, seed 0)."""
    from r2s2r_isaaclab.parity import core_reference, reference_in

    theirs, ours = reference_in(core_python, 0, "nominal"), core_reference(0)
    assert theirs.status == ours.status == ["sorted"]
    n = min(len(theirs.tcp), len(ours.tcp))
    err = np.linalg.norm(theirs.tcp[:n, :, :3] - ours.tcp[:n, :, :3], axis=-1) * 1e3
    assert err[: n // 2].max() < 0.1, err[: n // 2].max()  # The approach, before any contact.
    assert err.max() < VERSIONS_TCP_TOL_MM, err.max()
