"""The compiled control-rate kernels against straightforward numpy/scipy computations."""

from __future__ import annotations

import numpy as np
from scipy.spatial.transform import Rotation

from r2s2r.sim import kernels


def test_tcp_targets_reach_the_reference_frame_exactly_without_limits() -> None:
    rng = np.random.default_rng(0)
    n = 3
    ref_rot = Rotation.random(2, random_state=1)
    ref_pos = rng.normal(size=(2, 3))
    action = np.zeros((n, 54))
    targets = Rotation.random(n * 2, random_state=2)
    for w in range(n):
        for arm in range(2):
            a = action[w, arm * 27 : (arm + 1) * 27]
            a[:3] = rng.normal(size=3)
            # Unnormalised quaternions are accepted and normalised.
            a[3:7] = 2.5 * targets[w * 2 + arm].as_quat(scalar_first=True)
            a[7:] = rng.uniform(-3, 3, 20)
    ctrl = np.zeros((n, 60))
    cart = np.arange(12).reshape(2, 6)
    hand = 12 + np.arange(40).reshape(2, 20)
    pose, vel = np.zeros((n, 2, 6)), np.zeros((n, 2, 2, 3))
    # Without effective limits the generator lands on the target in one period.
    limits = np.array([[1e9, 1e9], [1e12, 1e12]])
    conj = ref_rot.inv().as_quat(scalar_first=True)
    lo, hi = -np.ones(20), np.ones(20)
    args = (ref_pos, ref_rot.as_matrix(), conj, pose, vel, limits, 0.02, lo, hi, cart, hand)
    assert kernels.tcp_action_to_ctrl(action, *args, ctrl) == -1
    for w in range(n):
        for arm in range(2):
            a = action[w, arm * 27 : (arm + 1) * 27]
            want_p = ref_rot[arm].inv().apply(a[:3] - ref_pos[arm])
            want_r = (ref_rot[arm].inv() * targets[w * 2 + arm]).as_rotvec()
            np.testing.assert_allclose(ctrl[w, cart[arm, :3]], want_p, atol=1e-9)
            np.testing.assert_allclose(ctrl[w, cart[arm, 3:]], want_r, atol=1e-9)
            np.testing.assert_allclose(ctrl[w, hand[arm]], np.clip(a[7:], -1, 1))
    action[1, 27 + 3 : 27 + 7] = 0.0
    assert kernels.tcp_action_to_ctrl(action, *args, ctrl) == 1


def test_motion_respects_velocity_and_acceleration_limits_and_stops_at_the_target() -> None:
    dt, vmax, amax = 0.02, 0.5, 2.0
    limits = np.array([[vmax, 1.0], [amax, 4.0]])
    pose, vel = np.zeros((1, 2, 6)), np.zeros((1, 2, 2, 3))
    # Identity reference frames: the commanded pose is the target itself.
    ref_pos, ref_mat = np.zeros((2, 3)), np.tile(np.eye(3), (2, 1, 1))
    ref_conj = np.tile([1.0, 0.0, 0.0, 0.0], (2, 1))
    action = np.zeros((1, 54))
    action[0, 3] = action[0, 27 + 3] = 1.0  # Identity orientations.
    action[0, :3] = [0.3, 0.0, 0.4]  # 0.5 m away for the left arm; the right one stays.
    target = action[0, :3].copy()
    ctrl = np.zeros((1, 60))
    cart, hand = np.arange(12).reshape(2, 6), 12 + np.arange(40).reshape(2, 20)
    lo, hi = -np.ones(20), np.ones(20)
    positions, speeds = [], []
    for _ in range(200):
        kernels.tcp_action_to_ctrl(
            action, ref_pos, ref_mat, ref_conj, pose, vel, limits, dt, lo, hi, cart, hand, ctrl
        )
        positions.append(pose[0, 0, :3].copy())
        speeds.append(np.linalg.norm(vel[0, 0, 0]))
    accel = np.abs(np.diff(speeds)) / dt
    assert max(speeds) <= vmax + 1e-9 and accel.max() <= amax + 1e-6
    np.testing.assert_allclose(positions[-1], target, atol=1e-6)
    np.testing.assert_allclose(ctrl[0, cart[0, :3]], positions[-1])
    # It stops there; the acceleration clamp can lag the braking curve by one period, which
    # bounds any overshoot by about amax * dt^2 (0.8 mm here).
    assert max(np.linalg.norm(p) for p in positions) <= 0.5 + amax * dt * dt
    np.testing.assert_allclose(pose[0, 1], 0.0)  # The other arm had no reason to move.
