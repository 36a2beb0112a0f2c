"""The policy's action representation (``ActionCodec``) and quantile normalization."""

from __future__ import annotations

import numpy as np
import pytest

from r2s2r.geometry.rotations import quat_mul, rotvec_to_quat
from r2s2r.policy.actions import ActionCodec, mat_to_rot6d, rot6d_to_mat
from r2s2r.policy.base import PolicyError
from r2s2r.policy.normalize import MIN_RANGE, NormStats, QuantileNorm
from r2s2r.sim.contract import Contract
from r2s2r.sim.scene import nominal_embodiment


@pytest.fixture(scope="module")
def tcp() -> Contract:
    return Contract.of(nominal_embodiment(), "tcp")


def random_state(contract: Contract, rng: np.random.Generator, batch: int) -> np.ndarray:
    """Proprio vectors (batch, S) with unit TCP quaternions of either sign."""
    e = contract.embodiment
    tcp = np.concatenate(
        [rng.uniform(-0.5, 0.5, (batch, e.num_arms, 3)), rng.normal(size=(batch, e.num_arms, 4))],
        axis=-1,
    )
    tcp[..., 3:] /= np.linalg.norm(tcp[..., 3:], axis=-1, keepdims=True)
    rest = rng.uniform(-1, 1, (batch, contract.state_dim - e.num_arms * 7))
    return np.concatenate([tcp.reshape(batch, -1), rest], axis=-1)


def random_actions(
    contract: Contract, state: np.ndarray, rng: np.random.Generator, horizon: int
) -> np.ndarray:
    """Valid actions (batch, T, A): targets near the current TCP, their quaternions on the
    current quaternion's hemisphere (the decoder's sign convention)."""
    batch, e = len(state), contract.embodiment
    now = contract.split_state(state)
    if contract.action_mode == "joint":
        arm = now["arm_joints"][:, None] + rng.uniform(
            -0.3, 0.3, (batch, horizon, e.num_arms, e.arm_dof)
        )
    else:
        pos = now["tcp_pose"][:, None, :, :3] + rng.uniform(
            -0.1, 0.1, (batch, horizon, e.num_arms, 3)
        )
        turn = rotvec_to_quat(rng.uniform(-1.0, 1.0, (batch, horizon, e.num_arms, 3)))
        quat = quat_mul(np.broadcast_to(now["tcp_pose"][:, None, :, 3:], turn.shape), turn)
        arm = np.concatenate([pos, quat], axis=-1)
    hand = rng.uniform(0, 1, (batch, horizon, e.num_arms, e.hand_dof))
    return contract.join_action(arm, hand)


@pytest.mark.parametrize("mode", ["tcp", "joint"])
@pytest.mark.parametrize("repr_", ["absolute", "relative"])
def test_codec_round_trip(mode: str, repr_: str) -> None:
    contract = Contract.of(nominal_embodiment(), mode)  # type: ignore[arg-type]
    codec = ActionCodec(contract, repr_)  # type: ignore[arg-type]
    e = contract.embodiment
    per_arm = (9 if mode == "tcp" else e.arm_dof) + e.hand_dof
    assert codec.dim == e.num_arms * per_arm
    if mode == "tcp":
        assert codec.dim == 58
    rng = np.random.default_rng(0)
    state = random_state(contract, rng, 6)
    actions = random_actions(contract, state, rng, 5)
    internal = codec.encode(actions, state)
    assert internal.shape == (6, 5, codec.dim) and internal.dtype == np.float32
    # float32 internal values: the round trip is exact to float32 precision of the inputs.
    back = codec.decode(internal.astype(np.float64), state)
    assert back.dtype == np.float64 and back.shape == actions.shape
    np.testing.assert_allclose(back, actions, atol=2e-6)
    # Hand joints stay absolute in both representations.
    _, hand = contract.split_action(actions)
    inner_hand = internal.reshape(6, 5, e.num_arms, per_arm)[..., per_arm - e.hand_dof :]
    np.testing.assert_array_equal(inner_hand, hand.astype(np.float32))


def test_codec_round_trip_float64_within_1e6(tcp: Contract) -> None:
    codec = ActionCodec(tcp, "relative")
    rng = np.random.default_rng(1)
    state = random_state(tcp, rng, 3)
    actions = random_actions(tcp, state, rng, 4)
    # Encode again from the decoded actions: a fixed point of the round trip.
    once = codec.decode(codec.encode(actions, state), state)
    twice = codec.decode(codec.encode(once, state), state)
    np.testing.assert_allclose(once, actions, atol=1e-6)
    np.testing.assert_allclose(twice, once, atol=1e-6)


def test_relative_encoding_of_the_current_pose_is_identity(tcp: Contract) -> None:
    codec = ActionCodec(tcp, "relative")
    rng = np.random.default_rng(2)
    state = random_state(tcp, rng, 2)
    now = tcp.split_state(state)
    hand = np.zeros((2, tcp.embodiment.num_arms, tcp.embodiment.hand_dof))
    hold = tcp.join_action(now["tcp_pose"], hand)[:, None]  # (2, 1, A): stay where you are.
    internal = codec.encode(hold, state).reshape(2, tcp.embodiment.num_arms, -1)
    np.testing.assert_allclose(internal[..., :3], 0, atol=1e-6)
    np.testing.assert_allclose(
        internal[..., 3:9], np.broadcast_to([1, 0, 0, 0, 1, 0], (2, 2, 6)), atol=1e-6
    )
    # The decoded quaternion takes the current quaternion's sign, whatever sign came in.
    flipped = hold.copy()
    arm, h = tcp.split_action(flipped)
    arm[..., 3:] *= -1
    back = codec.decode(codec.encode(tcp.join_action(arm, h), state), state)
    np.testing.assert_allclose(back, hold, atol=1e-6)


def test_rot6d_gram_schmidt_recovers_a_rotation_from_a_perturbed_one() -> None:
    rng = np.random.default_rng(3)
    from r2s2r.geometry.rotations import quat_to_mat

    q = rng.normal(size=(10, 4))
    m = quat_to_mat(q / np.linalg.norm(q, axis=-1, keepdims=True))
    np.testing.assert_allclose(rot6d_to_mat(mat_to_rot6d(m)), m, atol=1e-12)
    noisy = rot6d_to_mat(mat_to_rot6d(m) * 1.7 + rng.normal(0, 0.01, (10, 6)))
    np.testing.assert_allclose(
        noisy @ np.swapaxes(noisy, -1, -2), np.broadcast_to(np.eye(3), (10, 3, 3)), atol=1e-12
    )
    np.testing.assert_allclose(np.linalg.det(noisy), 1.0, atol=1e-12)


def test_codec_rejects_bad_input(tcp: Contract) -> None:
    with pytest.raises(
        PolicyError, match="action_repr: expected 'absolute' or 'relative', got 'delta'"
    ):
        ActionCodec(tcp, "delta")  # type: ignore[arg-type]
    codec = ActionCodec(tcp, "absolute")
    with pytest.raises(PolicyError, match=r"actions: expected shape \(\.\.\., 54\), got \(3, 50\)"):
        codec.encode(np.zeros((3, 50)), np.zeros(68))
    with pytest.raises(PolicyError, match=r"internal actions: expected shape \(\.\.\., 58\)"):
        codec.decode(np.zeros((3, 54)), np.zeros(68))


def test_quantile_norm_round_trip_with_a_constant_dimension() -> None:
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(3.0, 2.0, (500, 3)), np.full((500, 1), 0.25)], axis=1)
    x[:, 2] = 0.25 + rng.normal(0, MIN_RANGE / 100, 500)  # Near-constant: noise only.
    norm = QuantileNorm.fit(x)
    np.testing.assert_array_equal(norm.constant, [False, False, True, True])
    y = norm.normalize(x)
    assert y.dtype == np.float32 and np.isfinite(y).all()
    # The varying dimensions fill [-1, 1] between the quantiles; constant ones are 0.
    inside = (x[:, 0] >= norm.q01[0]) & (x[:, 0] <= norm.q99[0])
    assert np.abs(y[inside, 0]).max() <= 1.0 + 1e-6 and np.abs(y[:, 0]).max() > 1.0
    assert not y[:, 2:].any()
    np.testing.assert_allclose(norm.unnormalize(y)[:, :2], x[:, :2], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(norm.unnormalize(y)[:, 2:], x[:, 2:], atol=MIN_RANGE / 2)
    # Whatever a model says on a constant dimension, it comes back as the constant (an idle
    # arm's target must not move by the model's error in metres), and a state off it reads
    # as the constant (not as an input the model never saw).
    np.testing.assert_allclose(norm.unnormalize(y + 0.5)[:, 2:], x[:, 2:], atol=MIN_RANGE / 2)
    assert not norm.normalize(x + 0.1)[:, 2:].any()
    # The formula is pi0.5's on varying dimensions.
    expected = (x[:, 0] - norm.q01[0]) / (norm.q99[0] - norm.q01[0] + 1e-6) * 2 - 1
    np.testing.assert_allclose(y[:, 0], expected, rtol=1e-6, atol=1e-6)


def test_norm_stats_arrays_round_trip() -> None:
    rng = np.random.default_rng(1)
    stats = NormStats(
        QuantileNorm.fit(rng.normal(size=(50, 4))), QuantileNorm.fit(rng.normal(size=(50, 3)))
    )
    arrays = stats.to_arrays()
    assert sorted(arrays) == ["action.q01", "action.q99", "state.q01", "state.q99"]
    back = NormStats.from_arrays(arrays)
    np.testing.assert_array_equal(back.action.q99, stats.action.q99)
    np.testing.assert_array_equal(back.state.q01, stats.state.q01)
    with pytest.raises(PolicyError, match=r"missing \['action.q99'\]"):
        NormStats.from_arrays({k: v for k, v in arrays.items() if k != "action.q99"})
    with pytest.raises(PolicyError, match="dimension 1 has q99"):
        QuantileNorm(np.zeros(2), np.array([1.0, -1.0]))
    with pytest.raises(PolicyError, match=r"normalize: expected shape \(\.\.\., 4\)"):
        stats.state.normalize(np.zeros((2, 3)))
