"""The authored Wuji hand against the vendor's description (wuji-hand-description, release
2026.04.27, mjcf/right.xml and mjcf/left.xml): joint names, order, ranges and kinematics."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

from r2s2r.sim import robots

# The vendor's joint names in its files' order, and a few of its ranges (rad).
VENDOR_JOINTS = {
    side: tuple(f"{side}_finger{f}_joint{k}" for f in range(1, 6) for k in range(1, 5))
    for side in ("right", "left")
}
VENDOR_RANGES = {
    "finger1_joint1": (0.0475, 1.6033),
    "finger1_joint2": (-0.1387, 0.9324),
    "finger1_joint4": (-0.4699, 1.5568),
    "finger2_joint1": (-0.1585, 1.5604),
    "finger2_joint2": (-0.37, 0.37),
    "finger3_joint3": (-0.4739, 1.5512),
    "finger5_joint4": (-0.4683, 1.5735),
}
# Link 4's origin of fingers 1-5 in the palm frame (m), the vendor's model at all joints zero
# and at the middle of every range.
VENDOR_LINK4 = {
    ("right", "zero"): [
        [0.0119, 0.0958, 0.0558],
        [-0.0119, 0.0393, 0.1682],
        [-0.0197, 0.0073, 0.1661],
        [-0.0163, -0.0213, 0.1607],
        [-0.0093, -0.0503, 0.1494],
    ],
    ("right", "mid"): [
        [0.0406, 0.0381, 0.0963],
        [0.0471, 0.0229, 0.1433],
        [0.0414, 0.0073, 0.1423],
        [0.045, -0.0157, 0.1364],
        [0.0505, -0.0351, 0.1262],
    ],
    ("left", "zero"): [
        [0.0119, -0.0958, 0.0558],
        [-0.0118, -0.0397, 0.1682],
        [-0.0197, -0.0077, 0.1661],
        [-0.0163, 0.0209, 0.1608],
        [-0.0094, 0.0499, 0.1495],
    ],
    ("left", "mid"): [
        [0.0406, -0.0381, 0.0963],
        [0.0472, -0.0233, 0.1432],
        [0.0414, -0.0077, 0.1423],
        [0.045, 0.0153, 0.1365],
        [0.0504, 0.0347, 0.1263],
    ],
}


def _hand(side: str) -> tuple[mujoco.MjModel, mujoco.MjData, robots.HandNames]:
    spec = mujoco.MjSpec()
    spec.compiler.degree = False
    names = robots.add_wuji_hand(spec.worldbody, "", side=side, gravcomp=0.0)
    model = spec.compile()
    return model, mujoco.MjData(model), names


@pytest.mark.parametrize("side", ["right", "left"])
def test_joint_names_order_and_ranges_are_the_vendors(side: str) -> None:
    model, _, names = _hand(side)
    assert tuple(f"{side}_{j}" for j in names.joints) == VENDOR_JOINTS[side]
    assert [model.joint(i).name for i in range(model.njnt)] == list(names.joints)
    for joint, (lo, hi) in VENDOR_RANGES.items():
        np.testing.assert_allclose(model.joint(joint).range, [lo, hi], atol=1e-12)
    np.testing.assert_array_equal(model.jnt_range, robots.WUJI_HAND_JOINT_RANGES)
    # Fingers 2-5 bend towards the palm beyond straight by about 0.16 rad at the knuckle and
    # 0.47 rad at the other two; their sideways joint is joint 2.
    fingers = robots.WUJI_HAND_JOINT_RANGES[4:].reshape(4, 4, 2)
    assert (fingers[:, 0, 0] < -0.15).all() and (fingers[:, 2:, 0] < -0.46).all()
    np.testing.assert_array_equal(fingers[:, 1], [[-0.37, 0.37]] * 4)


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("pose", ["zero", "mid"])
def test_link_frames_follow_the_vendors_kinematics(side: str, pose: str) -> None:
    model, data, _ = _hand(side)
    lo, hi = model.jnt_range.T
    data.qpos[:] = 0.0 if pose == "zero" else 0.5 * (lo + hi)
    mujoco.mj_kinematics(model, data)
    link4 = [data.body(f"finger{f}_link4").xpos for f in range(1, 6)]
    np.testing.assert_allclose(link4, VENDOR_LINK4[side, pose], atol=6e-5)


@pytest.mark.parametrize("side", ["right", "left"])
def test_joint_one_flexes_and_joint_two_turns_towards_the_thumb_as_the_sign_says(
    side: str,
) -> None:
    model, data, _ = _hand(side)

    def tip(q: np.ndarray) -> np.ndarray:
        data.qpos[:] = q
        mujoco.mj_kinematics(model, data)
        return data.site("finger2_tip").xpos.copy()

    rest = np.zeros(20)
    tip(rest)
    thumb_side = np.sign(data.body("finger1_link2").xpos[1])
    flexed, turned = rest.copy(), rest.copy()
    flexed[4 + robots.FLEXION_JOINT] = 0.5
    turned[4 + robots.ABDUCTION_JOINT] = 0.3 * robots.towards_thumb(side)
    # Flexion moves the index tip out of the palm's front (+x); the turn, sideways to the thumb.
    assert tip(flexed)[0] - tip(rest)[0] > 0.03
    assert (tip(turned)[1] - tip(rest)[1]) * thumb_side > 0.02
