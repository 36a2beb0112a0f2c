"""Retargeting 21 human keypoints to the 20 robot hand joints."""

from __future__ import annotations

import numpy as np
import pytest

from r2s2r.rig.teleop.retarget import TIPS, HandKinematics, RetargetCfg, Retargeter


def _trajectory(kin: HandKinematics, seed: int, poses: int = 5, steps: int = 40) -> np.ndarray:
    rng = np.random.default_rng(seed)
    keys = [rng.uniform(kin.lo, kin.hi) for _ in range(poses)]
    return np.concatenate([np.linspace(a, b, steps) for a, b in zip(keys, keys[1:], strict=False)])


def _tip_errors(
    retargeter: Retargeter,
    kin: HandKinematics,
    traj: np.ndarray,
    human_scale: float = 1.0,
    noise_m: float = 0.0,
    seed: int = 0,
) -> np.ndarray:
    rng = np.random.default_rng(seed)
    errors = []
    for q in traj:
        robot_kp = kin.forward(q)
        human_kp = (robot_kp - robot_kp[0]) * human_scale + rng.normal(0, noise_m, (21, 3))
        solution = retargeter.solve(human_kp)
        tips = kin.forward(solution)[list(TIPS)]
        errors.append(np.linalg.norm(tips - robot_kp[list(TIPS)], axis=1).max())
    return np.asarray(errors)


def test_known_hand_poses_are_recovered() -> None:
    kin = HandKinematics()
    retargeter = Retargeter()
    errors = _tip_errors(retargeter, kin, _trajectory(kin, seed=1))
    assert np.median(errors) < 0.002 and np.percentile(errors, 95) < 0.005


def test_a_larger_human_hand_is_scaled_to_the_robot() -> None:
    kin = HandKinematics()
    retargeter = Retargeter(RetargetCfg(scale=1 / 1.15))
    errors = _tip_errors(retargeter, kin, _trajectory(kin, seed=2), human_scale=1.15, noise_m=0.001)
    assert np.median(errors) < 0.004


def test_pinches_stay_closed() -> None:
    kin = HandKinematics()
    # Search a pinch: the thumb tip within 2 cm of the index tip.
    rng = np.random.default_rng(5)
    for _ in range(20000):
        q = rng.uniform(kin.lo, kin.hi)
        kp = kin.forward(q)
        if np.linalg.norm(kp[4] - kp[8]) < 0.015:
            break
    else:
        pytest.fail("no pinch configuration found")
    human = (kp - kp[0]) * 1.1
    retargeter = Retargeter(RetargetCfg(scale=1 / 1.1, iterations=20))
    for _ in range(5):  # A held pinch, frame after frame.
        solution = retargeter.solve(human)
    tips = kin.forward(solution)
    assert np.linalg.norm(tips[4] - tips[8]) < 0.02


def test_bad_keypoints_are_rejected() -> None:
    retargeter = Retargeter()
    with pytest.raises(ValueError, match="21 finite"):
        retargeter.solve(np.zeros((20, 3)))
    bad = np.zeros((21, 3))
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="21 finite"):
        retargeter.solve(bad)
