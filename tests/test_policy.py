"""The policy seam: metadata, and a scripted policy that follows a generated plan. Run in a
closed loop on the env, following the plan reproduces executing it directly."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from r2s2r.behavior.behaviors import PlannedBehavior
from r2s2r.behavior.execute import Attempt, Executor
from r2s2r.behavior.instance import TaskInstance
from r2s2r.behavior.plan import Planner, PlannerCfg
from r2s2r.policy.base import Policy, PolicyError, PolicyMetadata
from r2s2r.policy.plan import PlanPolicy
from r2s2r.sim.env import PickSortEnv
from r2s2r.spec import TaskSpec, WorldSpec

INSTANCE = TaskInstance("green_can", 0.02, 0.3, 0.09)
SEED = 4


@pytest.fixture(scope="module")
def executed(task: TaskSpec, world: WorldSpec) -> tuple[np.ndarray, Attempt]:
    """A planned episode's commands and what executing them directly did."""
    executor = Executor(world, task)
    commands = Planner(world, task, executor.env.cell).plan(INSTANCE).actions
    attempt = executor.run(INSTANCE, commands, seed=SEED)
    executor.close()
    return commands, attempt


def closed_loop(
    env: PickSortEnv, policy: Policy, seed: int, options: dict[str, Any]
) -> tuple[dict[str, Any], list[np.ndarray], int]:
    """Run ``policy`` on ``env`` until the episode ends, each chunk executed whole: the last
    info, the proprio state before every action, and the number of steps."""
    obs, info = env.reset(seed=seed, options=options)
    policy.reset()
    states, steps = [], 0
    while True:
        chunk = policy.infer(obs)
        meta = policy.metadata
        assert chunk.shape == (meta.action_horizon, meta.action_dim)
        for action in chunk:
            states.append(env.contract.state(obs))
            obs, _, terminated, truncated, info = env.step(action)
            steps += 1
            if terminated or truncated:
                return info, states, steps


@pytest.mark.parametrize("horizon", [1, 16])
def test_following_a_plan_in_a_closed_loop_reproduces_executing_it(
    task: TaskSpec, world: WorldSpec, executed: tuple[np.ndarray, Attempt], horizon: int
) -> None:
    commands, attempt = executed
    assert attempt.success and attempt.status == "sorted"
    policy = PlanPolicy(commands, horizon=horizon, control_hz=task.control_hz)
    assert isinstance(policy, Policy)
    # The executor's env: no cameras, appearance drawn from the seed.
    env = PickSortEnv(world=world, task=task, images=False, randomize_appearance=True)
    info, states, steps = closed_loop(env, policy, SEED, INSTANCE.reset_options())
    env.close()
    assert info["success"] == attempt.success
    assert info["object_status"][0] == attempt.status
    assert steps == len(attempt.actions)
    np.testing.assert_array_equal(np.asarray(states), attempt.states)


def test_a_plan_policy_holds_the_last_command_and_rewinds_on_reset() -> None:
    commands = np.arange(5 * 54, dtype=float).reshape(5, 54)
    policy = PlanPolicy(commands, horizon=3)
    assert policy.metadata == PolicyMetadata(
        "rizon4s_wuji2_bimanual", "tcp", 54, 3, 50.0, state_dim=68
    )
    np.testing.assert_array_equal(policy.infer({}), commands[:3])
    np.testing.assert_array_equal(policy.infer({}), commands[[3, 4, 4]])
    np.testing.assert_array_equal(policy.infer({}), commands[[4, 4, 4]])
    policy.reset()
    np.testing.assert_array_equal(policy.infer({}), commands[:3])
    with pytest.raises(PolicyError, match=r"expected a plan \(T, 54\)"):
        PlanPolicy(np.zeros((4, 7)))


def test_metadata_is_checked() -> None:
    with pytest.raises(PolicyError, match="embodiment: unknown embodiment 'ur5'"):
        PolicyMetadata("ur5", "tcp", 54, 16, 50.0)
    with pytest.raises(PolicyError, match="action_mode"):
        PolicyMetadata("rizon4s_wuji2_bimanual", "torque", 54, 16, 50.0)
    with pytest.raises(PolicyError, match="action_horizon: expected at least 1"):
        PolicyMetadata("rizon4s_wuji2_bimanual", "tcp", 54, 0, 50.0)
    with pytest.raises(PolicyError, match=r"quaternions: \[3, 66\], expected columns in \[0, 64\]"):
        PolicyMetadata(
            "rizon4s_wuji2_bimanual", "tcp", 54, 8, 50.0, state_dim=68, quaternions=(3, 66)
        )


def test_a_policy_from_a_behavior_follows_its_plan_or_says_why_not(
    task: TaskSpec, world: WorldSpec, executed: tuple[np.ndarray, Attempt]
) -> None:
    executor = Executor(world, task)
    cell = executor.env.cell
    behavior = PlannedBehavior(Planner(world, task, cell))
    policy = PlanPolicy.from_behavior(behavior, INSTANCE, np.random.default_rng(0))
    np.testing.assert_array_equal(policy.commands, executed[0])
    # Meeting the object a metre downstream of the arm's base is beyond its reach.
    stuck = PlannedBehavior(Planner(world, task, cell, PlannerCfg(meet_offsets_m=(1.0,))))
    with pytest.raises(PolicyError, match="no plan for green_can: planner_failure"):
        PlanPolicy.from_behavior(stuck, INSTANCE, np.random.default_rng(0))
    executor.close()
