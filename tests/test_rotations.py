"""The batched rotation helpers agree with scipy."""

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from r2s2r.geometry import rotations as rot


def _random(n: int, seed: int = 0) -> Rotation:
    return Rotation.random(n, random_state=seed)


def test_quat_mat_roundtrip_matches_scipy() -> None:
    r = _random(200)
    q = r.as_quat(scalar_first=True)
    np.testing.assert_allclose(rot.quat_to_mat(q), r.as_matrix(), atol=1e-12)
    got = rot.mat_to_quat(r.as_matrix())
    want = q * np.sign(q[:, :1])
    np.testing.assert_allclose(got, want, atol=1e-12)


def test_mat_to_quat_near_half_turns() -> None:
    # Rotations by pi about each axis exercise every branch of the conversion.
    r = Rotation.from_rotvec(np.pi * np.eye(3) * (1 - 1e-12))
    q = rot.mat_to_quat(r.as_matrix())
    np.testing.assert_allclose(np.abs(q), np.abs(r.as_quat(scalar_first=True)), atol=1e-9)


def test_rotvec_roundtrip_and_product() -> None:
    a, b = _random(100, 1), _random(100, 2)
    qa, qb = a.as_quat(scalar_first=True), b.as_quat(scalar_first=True)
    np.testing.assert_allclose(rot.quat_to_rotvec(qa), a.as_rotvec(), atol=1e-10)
    np.testing.assert_allclose(
        rot.rotvec_to_quat(a.as_rotvec()), qa * np.sign(qa[:, :1]), atol=1e-10
    )
    prod = rot.quat_mul(qa, qb)
    np.testing.assert_allclose(rot.quat_to_mat(prod), (a * b).as_matrix(), atol=1e-12)
    np.testing.assert_allclose(rot.quat_to_mat(rot.quat_conj(qa)), a.inv().as_matrix(), atol=1e-12)
    small = np.array([[1e-12, 0.0, 0.0], [0.0, 0.0, 0.0]])
    np.testing.assert_allclose(rot.quat_to_rotvec(rot.rotvec_to_quat(small)), small, atol=1e-15)


def test_mat_to_quat_keeps_batch_shapes() -> None:
    r = _random(6, 3)
    mats = r.as_matrix().reshape(3, 2, 3, 3)
    q = rot.mat_to_quat(mats)
    assert q.shape == (3, 2, 4) and (q[..., 0] >= 0).all()
    np.testing.assert_allclose(rot.quat_to_mat(q), mats, atol=1e-12)


def test_slerp_and_axis_rotations_match_scipy() -> None:
    from scipy.spatial.transform import Slerp

    a, b = _random(20, 4), _random(20, 5)
    for k in range(20):
        keys = Rotation.concatenate([a[k], b[k]])
        for t in (0.0, 0.3, 1.0):
            want = Slerp([0.0, 1.0], keys)([t])[0].as_matrix()
            got = rot.quat_to_mat(
                rot.quat_slerp(a[k].as_quat(scalar_first=True), b[k].as_quat(scalar_first=True), t)
            )
            np.testing.assert_allclose(got, want, atol=1e-10)
    for axis in "xyz":
        for angle in (-2.5, 0.0, 0.7, 3.1):
            want = Rotation.from_euler(axis, angle).as_quat(scalar_first=True)
            np.testing.assert_allclose(rot.axis_angle_quat(axis, angle), want, atol=1e-15)


def test_helpers_keep_batch_shapes_broadcast_and_check_their_input() -> None:
    q = _random(6, 6).as_quat(scalar_first=True).reshape(2, 3, 4)
    assert rot.quat_mul(q, q[0, 0]).shape == (2, 3, 4)
    assert rot.quat_to_rotvec(q).shape == (2, 3, 3)
    assert rot.rotvec_to_quat(np.zeros((2, 3, 3))).shape == (2, 3, 4)
    assert rot.quat_to_mat(q[0, 0]).shape == (3, 3)
    # Unnormalised input is normalised first, as scipy does.
    np.testing.assert_allclose(rot.quat_to_mat(3.0 * q), rot.quat_to_mat(q), atol=1e-12)
    np.testing.assert_allclose(rot.quat_conj(2.0 * q[0, 0]), rot.quat_conj(q[0, 0]), atol=1e-15)
    with pytest.raises(ValueError, match=r"\(\.\.\., 4\)"):
        rot.quat_to_mat(np.zeros(3))
