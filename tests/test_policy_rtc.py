"""Real-time chunking's guided inpainting in the policy layer, on the tiny preset with random
weights (every weight random, the zero-initialized time modulations too, so that the action
steps attend to one another): the guidance weights, the vector-Jacobian product against finite
differences, a guided chunk that follows the committed actions and joins the prefix at the
delay, zero weights that change nothing, the same chunk over a real socket, and bad prefixes
named by their field or key.

A random network's clean estimate depends strongly on x_t (|J^T e| / |e| about 1.2 to 1.4),
so guidance pulls its chunks far; a trained policy that is nearly sure of its chunk (0.08 to
0.16 for the tiny preset trained on two twin takes) is pulled much less: guidance can only
move a chunk as far as the model's own uncertainty lets it."""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from websockets.sync.client import connect  # noqa: E402

from r2s2r.data.config import IMAGE_PREFIX, STATE_KEY  # noqa: E402
from r2s2r.policy import wire  # noqa: E402
from r2s2r.policy.actions import ActionCodec  # noqa: E402
from r2s2r.policy.base import TASK_KEY, ChunkPrefix, GuidedPolicy, Policy, PolicyError  # noqa: E402
from r2s2r.policy.client import RemotePolicy  # noqa: E402
from r2s2r.policy.collate import Collate  # noqa: E402
from r2s2r.policy.config import load_policy_cfg  # noqa: E402
from r2s2r.policy.learned import LearnedPolicy  # noqa: E402
from r2s2r.policy.model import Guide, build_model, guidance_weight  # noqa: E402
from r2s2r.policy.normalize import NormStats, QuantileNorm  # noqa: E402
from r2s2r.policy.serve import PolicyServer  # noqa: E402
from r2s2r.sim.contract import Contract  # noqa: E402
from r2s2r.sim.scene import nominal_embodiment  # noqa: E402

torch.set_num_threads(1)
H, A = 40, 54


def random_state(contract: Contract, rng: np.random.Generator) -> np.ndarray:
    """A proprio vector (S,) of plausible values: TCPs in front of the robot, unit quaternions
    near the identity, small arm joints, hands half closed."""
    e = contract.embodiment
    quat = np.array([1.0, 0.0, 0.0, 0.0]) + rng.normal(0, 0.1, (2, 4))
    quat /= np.linalg.norm(quat, axis=-1, keepdims=True)
    parts = {
        "tcp_pose": np.concatenate([rng.normal([0.5, 0.0, 0.3], 0.05, (2, 3)), quat], -1),
        "arm_joints": rng.normal(0, 0.3, (2, e.arm_dof)),
        "hand_joints": rng.uniform(0, 1, (2, e.hand_dof)),
    }
    return contract.state(parts)


def make_policy() -> LearnedPolicy:
    """The tiny preset with random weights, and normalization statistics of random states and
    of chunks that wander about them (internal actions, relative to each state)."""
    cfg = load_policy_cfg("tiny")
    torch.manual_seed(0)
    model = build_model(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.requires_grad and not p.any():
                # The zero-initialized time modulations and gates (and biases) become random
                # too: with closed gates the action steps would not see one another.
                p.normal_(0.0, 0.02 if "bias" in name else 0.1)
    contract = Contract.of(nominal_embodiment(), "tcp")
    codec = ActionCodec(contract, cfg.action_repr)
    rng = np.random.default_rng(0)
    states = np.stack([random_state(contract, rng) for _ in range(200)])
    chunks = []
    for s in states[:50]:
        now = contract.split_state(s)
        arm = np.repeat(now["tcp_pose"][None], H, 0)
        arm[..., :3] += rng.normal(0, 0.03, (H, 2, 3))
        hand = now["hand_joints"][None] + rng.normal(0, 0.1, (H, 2, now["hand_joints"].shape[1]))
        chunks.append(codec.encode(contract.join_action(arm, hand), s))
    stats = NormStats(QuantileNorm.fit(states), QuantileNorm.fit(np.concatenate(chunks)))
    collate = Collate(codec, stats, cfg.max_state_dim, cfg.max_action_dim, cfg.image_size)
    return LearnedPolicy(model, collate, contract, torch.device("cpu"))


@pytest.fixture(scope="module")
def policy() -> LearnedPolicy:
    return make_policy()


def hold_actions(policy: LearnedPolicy, n: int) -> np.ndarray:
    """``n`` actions (n, A) that hold both arms at one pose (level TCPs) with open hands."""
    contract = policy.contract
    arm = np.zeros((contract.embodiment.num_arms, contract.arm_action_dim))
    arm[:, :3], arm[:, 3] = (0.0, 0.0, 1.0), 1.0
    hand = np.zeros((contract.embodiment.num_arms, contract.embodiment.hand_dof))
    return np.tile(contract.join_action(arm, hand), (n, 1))


def request(policy: LearnedPolicy, seed: int) -> dict[str, Any]:
    """A request in the dataset's form: random 64 px views and a still (20, 68) history."""
    rng = np.random.default_rng(seed)
    contract = policy.contract
    out: dict[str, Any] = {
        IMAGE_PREFIX + c: rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)
        for c in contract.cameras
    }
    out[STATE_KEY] = np.repeat(random_state(contract, rng)[None], 20, 0).astype(np.float32)
    out[TASK_KEY] = "put the red cube in the left bin"
    return out


def gap(chunk: np.ndarray, target: np.ndarray, policy: LearnedPolicy) -> float:
    """Mean distance of steps (T, A) from target steps: TCP positions in mm plus hand joints
    in mrad, averaged over both arms (quaternions left out: their sign is free)."""
    arm, hand = policy.contract.split_action(chunk)
    arm_t, hand_t = policy.contract.split_action(target)
    pos = np.linalg.norm(arm[..., :3] - arm_t[..., :3], axis=-1).mean() * 1e3
    return float(pos + np.abs(hand - hand_t).mean() * 1e3)


def test_the_weights_are_rtcs_schedules() -> None:
    actions = np.zeros((36, A))
    for d, s, n in ((4, 10, 36), (0, 5, 36), (3, 3, 20), (7, 20, 36), (5, 35, 36)):
        for schedule in ("exp", "linear"):
            prefix = ChunkPrefix(actions[:n], d, s, schedule=schedule)
            expected = []
            # The paper's W: 1 before d, c_i from d to H - s (or the prefix's end), 0 after.
            end = min(H - s, n)
            for i in range(H):
                if i < d:
                    expected.append(1.0)
                elif i < end:
                    c = (end - i) / (end - d + 1)
                    expected.append(
                        c if schedule == "linear" else c * (math.exp(c) - 1) / (math.e - 1)
                    )
                else:
                    expected.append(0.0)
            np.testing.assert_allclose(prefix.weights(H), expected, rtol=1e-12, atol=0)
    # An example by hand: d = 2, s = 5, H = 8 -> 1, 1, 3/4, 2/4, 1/4 (linear), then 0.
    linear = ChunkPrefix(np.zeros((6, A)), 2, 5, schedule="linear").weights(10)
    np.testing.assert_allclose(linear, [1, 1, 0.75, 0.5, 0.25, 0, 0, 0, 0, 0])
    for t in (1.0, 0.75, 0.5, 0.25, 0.1):
        tau = 1 - t
        for beta in (0.5, 2.0, 10.0):
            # FACTS.md's min(beta, (1 - tau) / tau * (tau^2 + (1 - tau)^2) / (1 - tau)^2).
            raw = (
                math.inf
                if tau == 0
                else (1 - tau) / tau * (tau**2 + (1 - tau) ** 2) / (1 - tau) ** 2
            )
            assert guidance_weight(t, beta) == pytest.approx(min(beta, raw), rel=1e-12)


def test_a_prefix_enters_the_models_action_space_as_training_actions(
    policy: LearnedPolicy,
) -> None:
    collate = policy.collate
    req = request(policy, 11)
    states = req[STATE_KEY].astype(np.float64)
    # A chunk of this state: the dimensions the data never varied (the relative pose of the
    # arm that did not move) hold their constants in it, as in every chunk the policy makes
    # here; other values there have no place in the model's action space.
    chunk = policy.infer(req)
    internal = collate.actions_in(chunk[None], states[-1][None])
    sample = {
        "images": np.zeros((3, 64, 64, 3), np.uint8),
        "state": states,
        "state_is_pad": np.zeros(20, bool),
        "actions": chunk,
        "action_is_pad": np.zeros(H, bool),
        "task": "go",
        "embodiment_id": 0,
    }
    assert torch.equal(internal, collate([sample])["actions"])
    # Back in robot units: the same targets (a quaternion may come back negated).
    back = collate.actions_out(internal, states[-1][None])[0]
    arm, hand = policy.contract.split_action(back)
    arm_in, hand_in = policy.contract.split_action(chunk)
    np.testing.assert_allclose(arm[..., :3], arm_in[..., :3], atol=2e-6)
    np.testing.assert_allclose(hand, hand_in, atol=2e-6)
    dot = np.abs(np.sum(arm[..., 3:7] * arm_in[..., 3:7], axis=-1))
    np.testing.assert_allclose(dot, 1.0, atol=2e-6)


def test_the_guidance_is_the_vjp_of_the_clean_estimate(policy: LearnedPolicy) -> None:
    model = policy.model
    batch = policy.collate.observation(
        _views(policy, 3), request(policy, 3)[STATE_KEY], "sort it", 0
    )
    g = torch.Generator().manual_seed(1)
    noise = torch.randn(1, H, model.cfg.max_action_dim, generator=g)
    target = torch.randn(1, H, model.cfg.max_action_dim, generator=g)
    weights = torch.rand(1, H, generator=g)
    beta = 0.7
    # One Euler step from t = 1, where the guidance weight is beta: the guided step moves
    # x by beta * g more than the plain one (x1 = x + dt (v - beta g), dt = -1).
    with torch.inference_mode():
        plain = model.sample(batch, steps=1, noise=noise)
        guided = model.sample(batch, steps=1, noise=noise, guide=Guide(target, weights, beta))
    vjp = (guided - plain) / beta
    dims = batch["action_dim_mask"][:, None].float()
    assert vjp.abs().max() > 0 and not vjp[..., policy.collate.codec.dim :].any()
    # Against central differences of the clean estimate x - t v along random directions,
    # in float64 (a copy of the model), relative to the product of the norms.
    double = copy.deepcopy(model).double()
    with torch.no_grad():
        ctx = model.encode(batch)
        ctx.tokens = ctx.tokens.double()
        x = (noise * dims).double()
        t = torch.ones(1, dtype=torch.float64)

        def clean(x: torch.Tensor) -> torch.Tensor:
            return x - double.velocity(ctx, x, t)

        err = (target.double() - clean(x)) * weights[..., None].double() * dims
        for k in range(3):
            r = torch.randn(x.shape, generator=g, dtype=torch.float64) * dims
            eps = 1e-4
            fd = ((clean(x + eps * r) - clean(x - eps * r)) / (2 * eps) * err).sum()
            scale = float(vjp.norm() * r.norm())
            assert abs(float((vjp.double() * r).sum() - fd)) < 1e-5 * scale, k


def _views(policy: LearnedPolicy, seed: int) -> dict[str, np.ndarray]:
    req = request(policy, seed)
    return {c: req[IMAGE_PREFIX + c] for c in policy.contract.cameras}


def test_a_guided_chunk_follows_the_committed_actions(policy: LearnedPolicy) -> None:
    assert isinstance(policy, GuidedPolicy)
    obs = request(policy, 1)
    plain = policy.infer(obs)
    # The previous chunk, inferred s = 10 steps earlier (another observation), executes its
    # last 30 steps as the new chunk's first 30; d = 4 of them are committed.
    previous = policy.infer(request(policy, 2))
    d, s = 4, 10
    prefix = ChunkPrefix(previous[s:], d, s)
    guided = policy.infer_guided(obs, prefix)
    assert guided.shape == (H, A) and guided.dtype == np.float64 and np.isfinite(guided).all()
    arm, _ = policy.contract.split_action(guided)
    np.testing.assert_allclose(np.linalg.norm(arm[..., 3:7], axis=-1), 1.0, atol=1e-6)
    committed = prefix.actions[:d]
    near, far = gap(guided[:d], committed, policy), gap(plain[:d], committed, policy)
    # Measured (beta 2, exp): 182.6 against 1065.6 (mm + mrad; the random policy's chunks
    # wander far), a ratio of 0.17.
    assert near < 0.3 * far, (near, far)
    # The join at the delay: the first step the runtime executes from the new chunk is near
    # the step the previous chunk would have executed there (measured 199.6 against 1136.5).
    at_d = prefix.actions[d : d + 1]
    assert gap(guided[d : d + 1], at_d, policy) < 0.3 * gap(plain[d : d + 1], at_d, policy)
    # The guidance fades: past the overlap the chunk stays the policy's own, moved only
    # through the steps' attention to one another (measured 0.8 against 1078.3 moved on the
    # committed steps).
    tail = slice(H - s, H)
    moved = gap(guided[tail], plain[tail], policy)
    assert 0 < moved < 0.05 * gap(guided[:d], plain[:d], policy)
    assert policy.last_timing["infer_ms"] > 0


def test_zero_weights_change_nothing(policy: LearnedPolicy) -> None:
    model = policy.model
    batch = policy.collate.observation(_views(policy, 4), request(policy, 4)[STATE_KEY], "go", 0)
    g = torch.Generator().manual_seed(2)
    noise = torch.randn(1, H, model.cfg.max_action_dim, generator=g)
    target = torch.randn(1, H, model.cfg.max_action_dim, generator=g)
    with torch.inference_mode():
        plain = model.sample(batch, noise=noise)
        guided = model.sample(batch, noise=noise, guide=Guide(target, torch.zeros(1, H), 2.0))
    assert torch.equal(plain, guided)
    # Through the policy: with d = 0 and s = H no step has a weight.
    obs = request(policy, 5)
    free = ChunkPrefix(policy.infer(request(policy, 6)), 0, H)
    assert not free.weights(H).any()
    np.testing.assert_array_equal(policy.infer_guided(obs, free), policy.infer(obs))


def test_bad_prefixes_are_named(policy: LearnedPolicy) -> None:
    ok = np.zeros((30, A))
    cases: list[tuple[dict[str, Any], str]] = [
        ({"actions": np.zeros(A)},
         r"prefix\.actions: expected \(n >= 1, action_dim\) floats, got \(54,\)"),
        ({"actions": np.zeros((0, A))}, r"prefix\.actions: expected \(n >= 1"),
        ({"actions": np.full((30, A), np.nan)},
         r"prefix\.actions: expected finite values, got nan at \(0, 0\)"),
        ({"delay": -1}, r"prefix\.delay: expected at least 0 steps, got -1"),
        ({"delay": 2.0}, r"prefix\.delay: expected an int, got float"),
        ({"delay": 31, "exec_horizon": 31},
         r"prefix\.delay: 31 committed steps but prefix\.actions has only 30"),
        ({"delay": 5, "exec_horizon": 4},
         r"prefix\.exec_horizon: expected at least max\(delay, 1\) = 5, got 4"),
        ({"beta": 0.0}, r"prefix\.beta: expected a positive finite number, got 0\.0"),
        ({"schedule": "cosine"},
         r"prefix\.schedule: expected one of \('exp', 'linear'\), got 'cosine'"),
    ]  # fmt: skip
    for change, error in cases:
        with pytest.raises(PolicyError, match=error):
            ChunkPrefix(**{"actions": ok, "delay": 4, "exec_horizon": 10, **change})
    source = np.ones((30, A))
    prefix = ChunkPrefix(source, 4, 10)
    source[:] = 7.0
    assert (prefix.actions == 1.0).all() and not prefix.actions.flags.writeable
    obs = request(policy, 1)
    with pytest.raises(PolicyError, match=r"prefix\.actions: expected \(n, 54\), got \(30, 53\)"):
        policy.infer_guided(obs, ChunkPrefix(np.zeros((30, 53)), 4, 10))
    with pytest.raises(PolicyError, match=r"prefix\.exec_horizon: expected at most H - delay = 36"):
        policy.infer_guided(obs, ChunkPrefix(ok, 4, 37))
    with pytest.raises(PolicyError, match="prefix: expected a ChunkPrefix, got dict"):
        policy.infer_guided(obs, {"actions": ok})  # type: ignore[arg-type]
    with pytest.raises(
        PolicyError, match="action 0, left arm: quaternion norm 0.000, expected unit"
    ):
        policy.infer_guided(obs, ChunkPrefix(np.zeros((30, A)), 4, 10))


class PlainPolicy:
    """A policy without ``infer_guided``: a constant chunk."""

    def __init__(self, policy: LearnedPolicy) -> None:
        self.metadata = policy.metadata

    def reset(self) -> None:
        pass

    def infer(self, observation: dict[str, Any]) -> np.ndarray:
        return np.zeros((H, A))


@pytest.fixture(scope="module")
def server(policy: LearnedPolicy) -> Iterator[PolicyServer]:
    with PolicyServer(policy, port=0) as running:
        yield running


def test_a_remote_guided_chunk_is_the_in_process_one(
    policy: LearnedPolicy, server: PolicyServer
) -> None:
    obs = request(policy, 7)
    prefix = ChunkPrefix(policy.infer(request(policy, 8))[10:], 3, 10, beta=1.5, schedule="linear")
    local = policy.infer_guided(obs, prefix)
    with RemotePolicy("127.0.0.1", server.port, timeout_s=10.0) as remote:
        assert isinstance(remote, GuidedPolicy) and remote.guided
        np.testing.assert_array_equal(remote.infer_guided(obs, prefix), local.astype(np.float32))
        # Plain requests are as before.
        np.testing.assert_array_equal(remote.infer(obs), policy.infer(obs).astype(np.float32))
        assert not np.allclose(local, policy.infer(obs), atol=1e-3)


def test_bad_prefixes_over_the_wire_are_named_and_the_connection_goes_on(
    policy: LearnedPolicy, server: PolicyServer
) -> None:
    obs = request(policy, 9)
    good = wire.prefix_message(ChunkPrefix(hold_actions(policy, 30), 4, 10))
    bad: list[tuple[dict[str, Any], str]] = [
        ({"rtc.actions": np.zeros((30, A))},
         "prefix.actions: action 0, left arm: quaternion norm 0.000, expected unit"),
        ({"rtc.actions": np.zeros((30, 50))}, "rtc.actions: expected (n, 54), got (30, 50)"),
        ({"rtc.actions": [[0.0] * A]}, "rtc.actions: expected an (n, 54) float array, got list"),
        ({"rtc.delay": -2}, "rtc.delay: expected at least 0 steps, got -2"),
        ({"rtc.exec_horizon": 38},
         "rtc.exec_horizon: expected at most H - delay = 36 (H = 40, delay = 4), got 38"),
        ({"rtc.beta": "big"}, "rtc.beta: expected a number, got str"),
        ({"rtc.schedule": "step"}, "rtc.schedule: expected one of ('exp', 'linear'), got 'step'"),
        ({"rtc.delays": 3}, "rtc.delays: unknown key"),
    ]  # fmt: skip
    with connect(server.url) as ws:
        assert wire.unpackb(ws.recv())["rtc_guided"] is True
        for change, error in bad:
            ws.send(wire.packb({**obs, **good, **change}))
            assert str(ws.recv(timeout=10)).startswith(error)
        missing = {k: v for k, v in good.items() if k != "rtc.exec_horizon"}
        ws.send(wire.packb({**obs, **missing}))
        assert str(ws.recv(timeout=10)).startswith("rtc.exec_horizon: missing")
        ws.send(wire.packb({**obs, **good}))
        assert wire.unpackb(ws.recv(timeout=10))["actions"].shape == (H, A)


def test_a_policy_without_infer_guided_refuses_prefixes(policy: LearnedPolicy) -> None:
    plain = PlainPolicy(policy)
    assert isinstance(plain, Policy) and not isinstance(plain, GuidedPolicy)
    obs = request(policy, 10)
    prefix = ChunkPrefix(np.zeros((30, A)), 4, 10)
    with PolicyServer(plain, port=0) as server:
        with connect(server.url) as ws:
            assert wire.unpackb(ws.recv())["rtc_guided"] is False
            ws.send(wire.packb({**obs, **wire.prefix_message(prefix)}))
            assert ws.recv(timeout=10) == (
                "rtc.actions: the served policy (PlainPolicy) has no infer_guided, so it "
                "cannot follow a prefix; send requests without rtc.* keys"
            )
        with RemotePolicy("127.0.0.1", server.port) as remote:
            assert not remote.guided
            with pytest.raises(PolicyError, match="does not take RTC prefixes"):
                remote.infer_guided(obs, prefix)
            assert remote.infer(obs).shape == (H, A)
