"""The planner's arm kinematics: collision limits in the inverse kinematics, and the carry
planner's routes."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

from r2s2r.behavior.kinematics import ArmKinematics, AvoidCfg, planning_model, self_contacts
from r2s2r.behavior.routes import JointLimits, OmplCarry, free_segment
from r2s2r.sim.closures import POWER_GRASP, PRESHAPE
from r2s2r.sim.env import PickSortEnv
from r2s2r.sim.scene import PALM_DOWN
from r2s2r.spec.worlds import load_task, load_world

# A low left-arm TCP target, hand turned, that the unconstrained solution from home reaches
# with the wrist (links 5 and 6) in the table; the redundancy has a free solution (found by
# sampling targets in the nominal cell).
WRIST_IN_TABLE = np.array([-0.1273, -0.2234, 0.8523, -0.6095, 0.6095, 0.3584, -0.3584])


@pytest.fixture(scope="module")
def cell() -> tuple[ArmKinematics, np.ndarray, mujoco.MjModel]:
    task, world = load_task("pick_sort"), load_world("nominal")
    env = PickSortEnv(world=world, task=task, images=False)
    home = env.cell.home_qpos
    return ArmKinematics(planning_model(task, world), "left", home), home, env.model


def nearest(kin: ArmKinematics, q: np.ndarray, hand: np.ndarray, geoms: np.ndarray) -> float:
    """The smallest distance (m) between ``geoms`` of the arm at ``q`` and the fixed parts."""
    kin._set(q, hand)
    fromto = np.zeros(6)
    return min(
        mujoco.mj_geomDistance(kin.model, kin.data, int(a), int(b), 0.5, fromto)
        for a in geoms
        for b in kin.fixed_geoms
    )


def test_collision_limits_keep_the_hand_off_the_table(cell) -> None:
    kin, home, _ = cell
    q0 = home[kin.qadr]
    pose = kin.fk(q0)
    pose[2] -= 0.3  # Pushes the open hand's fingertips into the table.
    hand = np.zeros(20)
    free_q, reached = kin.ik(pose, q0)
    assert reached and kin.collides(free_q, hand)
    held_q, reached = kin.ik(pose, q0, avoid="all", hand=hand)
    assert not reached
    assert not kin.collides(held_q, hand)
    mine = np.concatenate([kin.link_geoms, kin.hand_geoms])
    assert nearest(kin, held_q, hand, mine) > AvoidCfg().safety_m - 0.003
    # The arm's links alone stay clear of it: with only them limited, the target is met.
    links_q, reached = kin.ik(pose, q0, avoid="links")
    assert reached and not kin.collides(links_q, links_only=True)


def test_collision_limits_use_the_redundancy(cell) -> None:
    kin, home, _ = cell
    q0 = home[kin.qadr]
    free_q, reached = kin.ik(WRIST_IN_TABLE, q0)
    assert reached and kin.collides(free_q, links_only=True), "the fixture no longer collides"
    q, reached = kin.ik(WRIST_IN_TABLE, q0, avoid="links")
    assert reached and not kin.collides(q, links_only=True)
    np.testing.assert_allclose(kin.fk(q)[:3], WRIST_IN_TABLE[:3], atol=1e-3)
    assert np.all(q >= kin.lo) and np.all(q <= kin.hi)


def test_collision_limits_need_the_planning_model(cell) -> None:
    kin, home, sim_model = cell
    plain = ArmKinematics(sim_model, "left", home)
    q0 = home[kin.qadr]
    plain.ik(kin.fk(q0), q0)  # Without limits any cell model does.
    with pytest.raises(ValueError, match="planning_model"):
        plain.ik(kin.fk(q0), q0, avoid="links")
    with pytest.raises(ValueError, match="avoid"):
        kin.ik(kin.fk(q0), q0, avoid="hand")


def test_cpu_carry_route_goes_round_an_obstacle(cell) -> None:
    kin, home, _ = cell
    q0 = home[kin.qadr]
    # Low in the left bin, then low beside it: the straight joint move cuts its wall.
    bin_pos = np.asarray(load_world("nominal").layout.bins["left bin"].pos, float)
    quat = PALM_DOWN.as_quat(scalar_first=True)
    q_in, ok_in = kin.ik(
        np.concatenate([bin_pos + [0, 0, 0.15], quat]), q0, avoid="all", hand=PRESHAPE
    )
    q_out, ok_out = kin.ik(
        np.concatenate([bin_pos + [0.25, 0, 0.07], quat]), q_in, avoid="all", hand=PRESHAPE
    )
    assert ok_in and ok_out and not free_segment(kin, q_in, q_out, PRESHAPE)
    dt = 0.02
    limits = JointLimits.share(kin.embodiment.arm_velocity_limits, 0.5, 3.0, 20.0)
    # The budget only caps a search that fails (RRT-Connect stops at its first route); a
    # generous one keeps a machine loaded by parallel tests from running it out.
    carry = OmplCarry(limits, dt, plan_s=20.0)
    route = carry.carry(kin, q_in, q_out, PRESHAPE)
    assert route is not None
    # RRT-Connect is random; seeded from the problem, the route repeats, whatever was
    # planned in between.
    assert carry.carry(kin, q_out, q_in, PRESHAPE) is not None
    np.testing.assert_array_equal(carry.carry(kin, q_in, q_out, PRESHAPE), route)
    np.testing.assert_allclose(route[-1], q_out, atol=1e-6)
    steps = np.vstack([q_in, route])
    assert np.all(np.abs(np.diff(steps, axis=0)) / dt <= limits.velocity * 1.01)
    assert all(free_segment(kin, a, b, PRESHAPE) for a, b in zip(steps, steps[1:], strict=False))


def test_collision_check_includes_the_arm_itself(cell) -> None:
    kin, home, _ = cell
    q = home[kin.qadr].copy()
    hand = np.zeros(20)
    assert not kin.collides(q, hand)
    q[5] = -0.32  # The wrist bent back from home: the fingers reach links 1 and 2.
    assert kin.collides(q, hand)
    # It is the arm itself: nothing of it touches a fixed part.
    con = kin.data.contact[: kin.data.ncon]
    mine = np.concatenate([kin.link_geoms, kin.hand_geoms])
    fixed = kin.fixed_geoms
    into_fixed = [
        c
        for c in con
        if c.dist < -0.002
        and ((c.geom1 in mine and c.geom2 in fixed) or (c.geom2 in mine and c.geom1 in fixed))
    ]
    assert not into_fixed
    assert not kin.collides(q, links_only=True)  # The links alone are clear.


def test_self_contacts_skip_neighbours_along_the_chain(cell) -> None:
    kin, _, _ = cell
    chain = kin.chain
    link = {i: int(np.flatnonzero(chain == i)[0]) for i in (1, 2, 4, 5, 7)}
    hand = np.flatnonzero(chain == 9)
    pairs = np.array(
        [
            (link[2], link[4]),  # two apart: grazes at ordinary elbow angles, skipped
            (link[2], link[5]),  # three apart: a collision
            (hand[0], link[7]),  # the hand on the last link: skipped
            (hand[0], link[4]),  # the hand on the forearm: a collision
            (hand[0], hand[1]),  # finger on finger: the hand's own business
            (link[1], int(np.flatnonzero(chain == -1)[0])),  # not the arm: not its own
        ]
    )
    np.testing.assert_array_equal(
        self_contacts(chain, pairs[:, 0], pairs[:, 1]), [False, True, False, True, False, False]
    )


def test_kinematics_do_not_depend_on_earlier_calls(cell) -> None:
    """Planning must repeat bit for bit whatever was planned before (a rounding difference
    in one IK solution can flip a marginal grasp): the hand posture of an earlier collision
    check must not leak into the pose or the Jacobian."""
    kin, home, _ = cell
    q = home[kin.qadr] + 0.1
    before = kin.fk(q), kin.jacobian(q), kin.ik(WRIST_IN_TABLE, q)[0]
    kin.collides(q, POWER_GRASP)
    after = kin.fk(q), kin.jacobian(q), kin.ik(WRIST_IN_TABLE, q)[0]
    for a, b in zip(before, after, strict=True):
        np.testing.assert_array_equal(a, b)
