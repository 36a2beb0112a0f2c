"""The ``Physics`` protocol: both backends (``mujoco`` and ``mujoco_warp``) give the same
contacts, mocap poses and state answers on a small inline scene.

The MuJoCo Warp half runs on Warp's CPU device when there is no GPU; its first run compiles
Warp kernels (later runs load them from Warp's kernel cache).
"""

from __future__ import annotations

from collections import Counter

import mujoco
import numpy as np
import pytest

from r2s2r.sim.physics import Contacts, Physics, make_physics
from r2s2r.spec.registry import RegistryError

# A box resting on the floor, a ball above it, and a mocap marker (seen, never touched).
XML = """
<mujoco>
  <option timestep="0.002"/>
  <worldbody>
    <geom name="floor" type="plane" size="1 1 0.1"/>
    <body name="box" pos="0 0 0.0495">
      <freejoint/>
      <geom name="box" type="box" size="0.05 0.05 0.05" mass="0.1"/>
    </body>
    <body name="ball" pos="0.3 0 0.2">
      <freejoint/>
      <geom name="ball" type="sphere" size="0.04" mass="0.05"/>
    </body>
    <body name="marker" mocap="true" pos="0 0.3 0.1">
      <geom name="marker" type="box" size="0.02 0.02 0.02" contype="0" conaffinity="0"/>
      <site name="tip" pos="0 0 0.05"/>
    </body>
  </worldbody>
</mujoco>
"""
# MuJoCo Warp runs in float32: positions and distances agree to about 1e-6 m here.
TOL = 1e-4


@pytest.fixture(scope="module")
def model() -> mujoco.MjModel:
    return mujoco.MjModel.from_xml_string(XML)


def start(physics: Physics) -> None:
    """Every world at the model's initial state."""
    m, n = physics.model, physics.num_worlds
    physics.reset(np.tile(m.qpos0, (n, 1)), np.zeros((n, m.nv)), np.zeros((n, m.nu)), np.arange(n))


def pairs(contacts: Contacts) -> Counter[tuple[int, int]]:
    """How many contacts each (unordered) geom pair has."""
    g1, g2, _ = contacts
    return Counter((min(a, b), max(a, b)) for a, b in zip(g1.tolist(), g2.tolist(), strict=True))


def ball_on_floor(model: mujoco.MjModel) -> tuple[np.ndarray, np.ndarray]:
    """The initial state with the ball dropped to 1 mm into the floor."""
    qpos = model.qpos0.copy()
    qpos[model.jnt_qposadr[model.joint(1).id] + 2] = 0.039
    return qpos, np.zeros(model.nv)


def test_cpu_backend_answers(model: mujoco.MjModel) -> None:
    physics = make_physics("mujoco", model)
    start(physics)
    floor, box, ball = (model.geom(n).id for n in ("floor", "box", "ball"))
    # The box rests 0.5 mm into the floor (four corner contacts); the ball is in the air.
    contacts = physics.contacts(0)
    assert pairs(contacts) == Counter({(floor, box): 4})
    np.testing.assert_allclose(contacts.dist, -5e-4, atol=1e-9)
    # set_state recomputes the contacts of the state it sets; the rest is kept.
    physics.step(np.zeros((1, 0)), 5)
    time = physics.mjdata(0).time
    qpos, qvel = ball_on_floor(model)
    physics.set_state(0, qpos, qvel)
    assert pairs(physics.contacts(0))[(floor, ball)] == 1
    np.testing.assert_array_equal(physics.state()[0][0], qpos)
    assert physics.mjdata(0).time == time
    # Mocap poses: written through the physics, seen by kinematics and by mjdata.
    pos, quat = np.array([0.1, 0.2, 0.3]), np.array([np.cos(0.5), 0.0, 0.0, np.sin(0.5)])
    physics.set_mocap(0, 0, pos, quat)
    got_pos, got_quat = physics.mocap(0)
    np.testing.assert_array_equal(got_pos[0], pos)
    np.testing.assert_array_equal(got_quat[0], quat)
    tip, _ = physics.site_poses(np.array([model.site("tip").id]))
    np.testing.assert_allclose(tip[0, 0], pos + [0.0, 0.0, 0.05], atol=1e-12)
    np.testing.assert_array_equal(physics.mjdata(0).mocap_pos[0], pos)
    with pytest.raises(IndexError, match="world 1 out of range"):
        physics.mocap(1)


def test_unknown_backend_names_the_nearest(model: mujoco.MjModel) -> None:
    with pytest.raises(RegistryError, match="did you mean 'mujoco_warp'"):
        make_physics("mujoco-warp", model)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="one world"):
        make_physics("mujoco", model, 2)


def test_both_backends_agree_on_contacts_mocap_and_state(model: mujoco.MjModel) -> None:
    pytest.importorskip("mujoco_warp")
    cpu = make_physics("mujoco", model)
    warp = make_physics("mujoco_warp", model, 2, device="cpu")
    for physics in (cpu, warp):
        start(physics)
    floor, box, ball = (model.geom(n).id for n in ("floor", "box", "ball"))

    def agree(world: int) -> None:
        """World ``world`` of the Warp backend answers as the CPU backend does."""
        want, got = cpu.contacts(0), warp.contacts(world)
        assert pairs(got) == pairs(want)
        np.testing.assert_allclose(np.sort(got.dist), np.sort(want.dist), atol=TOL)
        assert got.geom1.dtype.kind == want.geom1.dtype.kind == "i"
        np.testing.assert_allclose(warp.state()[0][world], cpu.state()[0][0], atol=TOL)
        np.testing.assert_allclose(warp.state()[1][world], cpu.state()[1][0], atol=1e-3)
        for a, b in zip(warp.mocap(world), cpu.mocap(0), strict=True):
            np.testing.assert_allclose(a, b, atol=1e-6)
        ours, theirs = warp.mjdata(world), cpu.mjdata(0)
        np.testing.assert_allclose(ours.mocap_pos, theirs.mocap_pos, atol=1e-6)
        np.testing.assert_allclose(ours.xpos, theirs.xpos, atol=TOL)

    agree(0)
    assert pairs(warp.contacts(0)) == Counter({(floor, box): 4})
    # Stepped together, the worlds keep agreeing with the CPU backend.
    for physics in (cpu, warp):
        physics.step(np.zeros((physics.num_worlds, 0)), 10)
    agree(0)
    agree(1)
    # Only world 1 gets the ball on the floor and the marker moved; world 0 keeps its own.
    qpos, qvel = ball_on_floor(model)
    pos, quat = np.array([0.1, 0.2, 0.3]), np.array([np.cos(0.5), 0.0, 0.0, np.sin(0.5)])
    untouched = warp.contacts(0)
    warp.set_state(1, qpos, qvel)
    warp.set_mocap(1, 0, pos, quat)
    assert pairs(warp.contacts(0)) == pairs(untouched)
    assert pairs(warp.contacts(1))[(floor, ball)] == 1
    np.testing.assert_allclose(warp.mocap(0)[0][0], model.body("marker").pos, atol=1e-6)
    cpu.set_state(0, qpos, qvel)
    cpu.set_mocap(0, 0, pos, quat)
    agree(1)
    tip = np.array([model.site("tip").id])
    np.testing.assert_allclose(warp.site_poses(tip)[0][1], cpu.site_poses(tip)[0][0], atol=TOL)
    # And from the same state, the same step.
    for physics in (cpu, warp):
        physics.step(np.zeros((physics.num_worlds, 0)), 20)
    agree(1)
