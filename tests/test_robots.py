"""Tests for the Rizon 4S arm and Wuji hand MjSpec builders."""

from __future__ import annotations

import sys
from pathlib import Path

import mujoco
import numpy as np

try:
    from r2s2r.sim import robots
except ModuleNotFoundError:
    # The package is not installed; fall back to the source tree.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "source"))
    from r2s2r.sim import robots

# Published Rizon 4S facts, re-typed here so the test does not trust the module's tables.
# Each row: joint origin xyz (m), origin rpy (rad), joint axis in the child frame.
PI = np.pi
FACT_ORIGINS = [
    ((0.0, 0.0, 0.155), (0.0, 0.0, -PI), (0.0, 0.0, 1.0)),
    ((0.0, 0.03, 0.21), (0.0, 0.0, 0.0), (0.0, 1.0, 0.0)),
    ((0.0, 0.035, 0.205), (0.0, 0.0, 0.0), (0.0, 0.0, 1.0)),
    ((-0.02, -0.03, 0.19), (0.0, 0.0, -PI), (0.0, 1.0, 0.0)),
    ((-0.02, 0.025, 0.195), (0.0, 0.0, -PI), (0.0, 0.0, 1.0)),
    ((0.0, 0.03, 0.19), (0.0, 0.0, 0.0), (0.0, 1.0, 0.0)),
    ((-0.015, 0.073, 0.11), (0.0, -PI / 2.0, 0.0), (0.0, 0.0, 1.0)),
]
FACT_FLANGE = ((0.0, 0.0, 0.124), (0.0, 0.0, -PI))
FACT_RANGES = [
    (-2.8798, 2.8798),
    (-2.3562, 2.3562),
    (-3.0543, 3.0543),
    (-1.9548, 2.7751),
    (-3.0543, 3.0543),
    (-1.4835, 4.6251),
    (-3.0543, 3.0543),
]
FACT_TORQUES = [123.0, 123.0, 64.0, 64.0, 39.0, 39.0, 39.0]
FACT_VELOCITIES = [2.0944, 2.0944, 2.4435, 2.4435, 4.8869, 4.8869, 4.8869]
FACT_MASSES = [3.60, 2.69, 2.35, 2.35, 2.31, 2.22, 0.77]
SIDES = ("left_", "right_")


def _rx(a: float) -> np.ndarray:
    """Rotation about x."""
    c, s = np.cos(a), np.sin(a)
    return np.array([[1.0, 0.0, 0.0], [0.0, c, -s], [0.0, s, c]])


def _ry(a: float) -> np.ndarray:
    """Rotation about y."""
    c, s = np.cos(a), np.sin(a)
    return np.array([[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]])


def _rz(a: float) -> np.ndarray:
    """Rotation about z."""
    c, s = np.cos(a), np.sin(a)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def _homogeneous(rot: np.ndarray, pos: tuple[float, float, float]) -> np.ndarray:
    """Build a 4x4 transform."""
    t = np.eye(4)
    t[:3, :3] = rot
    t[:3, 3] = pos
    return t


def reference_fk(q: np.ndarray) -> np.ndarray:
    """Independent flange pose in the base frame from the re-typed URDF facts."""
    t = np.eye(4)
    for (xyz, (r, p, y), axis), qi in zip(FACT_ORIGINS, q, strict=True):
        t = t @ _homogeneous(_rz(y) @ _ry(p) @ _rx(r), xyz)
        joint_rot = {(0.0, 0.0, 1.0): _rz, (0.0, 1.0, 0.0): _ry}[axis](qi)
        t = t @ _homogeneous(joint_rot, (0.0, 0.0, 0.0))
    xyz, (r, p, y) = FACT_FLANGE
    return t @ _homogeneous(_rz(y) @ _ry(p) @ _rx(r), xyz)


def build_bimanual(
    gravity: bool = True,
) -> tuple[mujoco.MjModel, dict[str, robots.ArmNames], dict[str, robots.HandNames]]:
    """Build two arms with hands on their flanges and compile the model."""
    spec = mujoco.MjSpec()
    spec.option.timestep = 0.002
    spec.option.integrator = mujoco.mjtIntegrator.mjINT_IMPLICITFAST
    if not gravity:
        spec.option.gravity = [0.0, 0.0, 0.0]
    arms: dict[str, robots.ArmNames] = {}
    hands: dict[str, robots.HandNames] = {}
    bases = {
        "left_": ((0.1, 0.35, 0.8), (0.9238795, 0.0, 0.0, 0.3826834)),
        "right_": ((0.1, -0.35, 0.8), (0.9238795, 0.0, 0.0, -0.3826834)),
    }
    for prefix in SIDES:
        pos, quat = bases[prefix]
        arm = robots.add_rizon4s(spec.worldbody, prefix, pos=pos, quat=quat)
        hand = robots.add_wuji_hand(
            spec.body(arm.flange), f"{prefix}hand_", side=prefix.rstrip("_")
        )
        robots.add_hand_actuators(spec, hand, kp=0.5, kv=0.02, force_range=0.5)
        arms[prefix], hands[prefix] = arm, hand
    return spec.compile(), arms, hands


def _pose_in_base(
    model: mujoco.MjModel, data: mujoco.MjData, arm: robots.ArmNames
) -> tuple[np.ndarray, np.ndarray]:
    """Return the flange site position and rotation expressed in the arm base frame."""
    base = data.body(arm.base)
    site = data.site(arm.flange_site)
    rb = base.xmat.reshape(3, 3)
    return rb.T @ (site.xpos - base.xpos), rb.T @ site.xmat.reshape(3, 3)


def test_flange_pose_matches_independent_fk() -> None:
    model, arms, _ = build_bimanual()
    data = mujoco.MjData(model)
    rng = np.random.default_rng(1234)
    lo, hi = np.array(FACT_RANGES).T
    configs = [np.zeros(7), np.full(7, 0.5), np.array([1.0, -0.7, 0.3, 1.2, -2.0, 2.5, 0.9])]
    configs += [rng.uniform(lo, hi) for _ in range(20)]
    for q in configs:
        for prefix in SIDES:
            for i, jname in enumerate(arms[prefix].joints):
                data.qpos[model.joint(jname).qposadr[0]] = q[i]
        mujoco.mj_forward(model, data)
        ref = reference_fk(q)
        for prefix in SIDES:
            pos, rot = _pose_in_base(model, data, arms[prefix])
            np.testing.assert_allclose(pos, ref[:3, 3], atol=1e-9)
            np.testing.assert_allclose(rot, ref[:3, :3], atol=1e-9)
        np.testing.assert_allclose(robots.rizon4s_fk(q), ref, atol=1e-12)


def test_tcp_site_offset_along_flange_z() -> None:
    model, arms, _ = build_bimanual()
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    arm = arms["right_"]
    flange = data.site(arm.flange_site)
    expected = flange.xpos + 0.12 * flange.xmat.reshape(3, 3)[:, 2]
    np.testing.assert_allclose(data.site(arm.tcp_site).xpos, expected, atol=1e-12)


def test_masses_ranges_and_joint_counts() -> None:
    model, arms, hands = build_bimanual()
    for prefix in SIDES:
        for i, mass in enumerate(FACT_MASSES):
            assert model.body(f"{prefix}link{i + 1}").mass[0] == mass
            assert model.body_gravcomp[model.body(f"{prefix}link{i + 1}").id] == 1.0
        for i, jname in enumerate(arms[prefix].joints):
            joint = model.joint(jname)
            assert joint.limited[0]
            np.testing.assert_allclose(joint.range, FACT_RANGES[i], atol=1e-12)
            np.testing.assert_allclose(
                model.jnt_actfrcrange[joint.id], [-FACT_TORQUES[i], FACT_TORQUES[i]]
            )
            assert model.jnt_actgravcomp[joint.id]
        names = [model.joint(j).name for j in range(model.njnt)]
        assert sum(n.startswith(prefix) for n in names) == 27
        hand = hands[prefix]
        assert len(arms[prefix].joints) == 7 and len(hand.joints) == 20
        assert hand.joints[:4] == tuple(f"{prefix}hand_finger1_joint{k}" for k in range(1, 5))
        expected = tuple(f"{prefix}hand_{name}" for name in robots.WUJI_JOINT_NAMES)
        assert hand.joints == expected
        ids = [model.joint(j).id for j in hand.joints]
        assert ids == sorted(ids)
        assert len(hand.tip_sites) == 5
    np.testing.assert_allclose(robots.RIZON4S_VEL_LIMITS, FACT_VELOCITIES)
    np.testing.assert_allclose(robots.RIZON4S_TORQUE_LIMITS, FACT_TORQUES)
    np.testing.assert_allclose(robots.RIZON4S_JOINT_RANGES, FACT_RANGES)
    assert model.nu == 40


def test_left_hand_mirrors_right() -> None:
    model, arms, hands = build_bimanual()
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    tips = {}
    for prefix in SIDES:
        palm = data.body(f"{prefix}hand_palm_link")
        rot = palm.xmat.reshape(3, 3)
        tips[prefix] = [rot.T @ (data.site(s).xpos - palm.xpos) for s in hands[prefix].tip_sites]
    # Reflected across the palm frame's y = 0 plane (the vendor's palm frame: fingers +z, palm
    # normal +x); fingers 2-5 keep the vendor's unreflected 0.2 mm sideways offset.
    mirror = np.diag([1.0, -1.0, 1.0])
    for i, (left, right) in enumerate(zip(tips["left_"], tips["right_"], strict=True)):
        np.testing.assert_allclose(left, mirror @ right, atol=1e-9 if i == 0 else 5e-4)


def test_hand_actuators_track_mid_range_targets() -> None:
    model, arms, hands = build_bimanual(gravity=False)
    data = mujoco.MjData(model)
    for prefix in SIDES:
        for jname in hands[prefix].joints:
            act = model.actuator(f"{jname}_act")
            assert act.trnid[0] == model.joint(jname).id
            assert model.actuator_group[act.id] == 3
            np.testing.assert_allclose(act.ctrlrange, model.joint(jname).range)
    targets = model.actuator_ctrlrange.mean(axis=1)
    # The arms' centre, the hands' mid-range flexion with the fingers fanned out: flexed half
    # way side by side, the index and middle tips touch.
    for prefix in SIDES:
        fan = np.array([0.25, 0.08, -0.08, -0.25]) * robots.towards_thumb(prefix.rstrip("_"))
        for finger, turn in zip(range(2, 6), fan, strict=True):
            targets[model.actuator(f"{prefix}hand_finger{finger}_joint2_act").id] = turn
    data.ctrl[:] = targets
    for _ in range(500):
        mujoco.mj_step(model, data)
    for a in range(model.nu):
        qadr = model.jnt_qposadr[model.actuator_trnid[a, 0]]
        assert abs(data.qpos[qadr] - targets[a]) < 0.01, model.actuator(a).name


def test_bimanual_steps_without_nan() -> None:
    model, arms, _ = build_bimanual()
    assert model.opt.integrator == mujoco.mjtIntegrator.mjINT_IMPLICITFAST
    assert model.opt.timestep == 0.002
    data = mujoco.MjData(model)
    for prefix in SIDES:
        for jname, q in zip(arms[prefix].joints, [0.0, -0.5, 0.0, 1.2, 0.0, 0.8, 0.0], strict=True):
            data.qpos[model.joint(jname).qposadr[0]] = q
    q0 = data.qpos.copy()
    for _ in range(500):
        mujoco.mj_step(model, data)
    assert np.all(np.isfinite(data.qpos)) and np.all(np.isfinite(data.qvel))
    # Gravity compensation holds the arms, so they should barely drift.
    assert np.max(np.abs(data.qpos - q0)) < 0.05
