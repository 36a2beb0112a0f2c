"""The policy's data path on tiny datasets written by the real ``DatasetWriter``: windows and
their pad masks, the frame cache, the real/sim mixture, batches, statistics, augmentation and
every bad input the mixture refuses."""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
import typer
from typer.testing import CliRunner

from r2s2r.cli.train_bench import bench
from r2s2r.data import CameraCfg, DatasetCfg, DatasetWriter, VideoCfg
from r2s2r.geometry.rotations import quat_mul, rotvec_to_quat
from r2s2r.policy.actions import ActionCodec
from r2s2r.policy.augment import augment
from r2s2r.policy.base import PolicyError
from r2s2r.policy.collate import Collate
from r2s2r.policy.frames import FrameCache
from r2s2r.policy.loader_bench import bench_loader
from r2s2r.policy.normalize import QuantileNorm, fit_stats
from r2s2r.policy.windows import Mixture, StepBatchSampler, WindowDataset, make_loader
from r2s2r.sim.contract import Contract, ContractError
from r2s2r.spec.world import CAMERA_NAMES

SIZE = 32
CAMERAS = tuple(CameraCfg(name=n, height=SIZE, width=SIZE) for n in CAMERA_NAMES)
CFG = DatasetCfg(cameras=CAMERAS, video=VideoCfg(lossless=True))
CONTRACT = CFG.contract
P, H = 3, 4
# Where a frame's global index is written into its state and action (an arm joint entry).
MARK_S = CONTRACT.state_layout()["arm_joints"].start
MARK_A = 7  # The first hand joint of the first arm.


def frame_image(index: int, camera: int) -> np.ndarray:
    """A view that names its frame and camera in its pixel values; (SIZE, SIZE, 3) uint8."""
    img = np.zeros((SIZE, SIZE, 3), np.uint8)
    img[..., 0] = index % 256
    img[..., 1] = 40 * camera
    img[: SIZE // 2, :, 2] = 200
    return img


def frame_vectors(index: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A state with unit TCP quaternions and an action whose targets lie near it."""
    state = rng.uniform(-0.5, 0.5, CONTRACT.state_dim)
    tcp = state[: 2 * 7].reshape(2, 7)
    tcp[:, 3:] = rotvec_to_quat(rng.uniform(-1, 1, (2, 3)))
    state[: 2 * 7] = tcp.reshape(-1)
    state[MARK_S] = index
    arm = tcp.copy()
    arm[:, :3] += rng.uniform(-0.05, 0.05, (2, 3))
    arm[:, 3:] = quat_mul(tcp[:, 3:], rotvec_to_quat(rng.uniform(-0.2, 0.2, (2, 3))))
    hand = rng.uniform(0, 1, (2, CONTRACT.embodiment.hand_dof))
    action = CONTRACT.join_action(arm, hand)
    action[MARK_A] = index
    return state, action


def write(root: Path, lengths: tuple[int, ...], cfg: DatasetCfg = CFG, start: int = 0) -> None:
    """Episodes of ``lengths`` frames (appended when ``root`` holds a dataset)."""
    rng = np.random.default_rng(len(lengths) + start)
    index = start
    with DatasetWriter(root, cfg if start == 0 else None) as writer:
        for e, n in enumerate(lengths):
            for _ in range(n):
                images = {c.name: frame_image(index, k) for k, c in enumerate(cfg.cameras)}
                state, action = frame_vectors(index, rng)
                writer.add_frame(images, state, action)
                index += 1
            writer.save_episode(f"task {(start + e) % 2}", True)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("data")
    write(root / "real", (5, 7))
    write(root / "sim_a", (6,))
    write(root / "sim_b", (4, 3))
    return root


def windows(root: Path, cache: Path, **kw: object) -> WindowDataset:
    return WindowDataset(root, SIZE, P, H, cache_dir=cache, **kw)  # type: ignore[arg-type]


def test_windows_and_pad_masks_at_episode_boundaries(data: Path, tmp_path: Path) -> None:
    ds = windows(data / "real", tmp_path)
    assert len(ds) == 12 and ds.fps == 50 and ds.contract == CONTRACT
    marks = lambda s: s["state"][:, MARK_S].tolist()  # noqa: E731
    acts = lambda s: s["actions"][:, MARK_A].tolist()  # noqa: E731
    # The first frame of episode 0: the past is its first state repeated, padded.
    s = ds[0]
    assert marks(s) == [0, 0, 0] and s["state_is_pad"].tolist() == [True, True, False]
    assert acts(s) == [0, 1, 2, 3] and not s["action_is_pad"].any()
    # The last frame of episode 0: the future repeats its last action and never reaches
    # episode 1.
    s = ds[4]
    assert acts(s) == [4, 4, 4, 4] and s["action_is_pad"].tolist() == [False, True, True, True]
    assert marks(s) == [2, 3, 4] and not s["state_is_pad"].any()
    assert (s["episode_index"], s["frame_index"], s["task"]) == (0, 4, "task 0")
    # The first frame of episode 1 never looks back into episode 0.
    s = ds[5]
    assert marks(s) == [5, 5, 5] and s["state_is_pad"].tolist() == [True, True, False]
    assert (s["episode_index"], s["frame_index"], s["task"]) == (1, 0, "task 1")
    # The last frame of the dataset.
    s = ds[11]
    assert acts(s) == [11, 11, 11, 11] and s["action_is_pad"].sum() == 3
    assert s["images"].shape == (3, SIZE, SIZE, 3) and s["images"].dtype == np.uint8
    for k in range(3):
        np.testing.assert_array_equal(s["images"][k], frame_image(11, k))
    assert s["state"].dtype == np.float32 and s["actions"].dtype == np.float32
    assert s["embodiment_id"] == CONTRACT.embodiment.id
    # Decode on demand gives the same samples.
    plain = windows(data / "real", tmp_path, use_cache=False)
    for i in (0, 4, 5, 11):
        a, b = ds[i], plain[i]
        np.testing.assert_array_equal(a["images"], b["images"])
        np.testing.assert_array_equal(a["state"], b["state"])
    with pytest.raises(IndexError, match="frame 12 out of range"):
        ds[12]


def test_the_first_episodes_only(data: Path, tmp_path: Path) -> None:
    # real holds episodes of 5 and 7 frames: the first one alone is its first 5 frames.
    full, first = windows(data / "real", tmp_path), windows(data / "real", tmp_path, episodes=1)
    assert len(first) == 5 and len(full) == 12
    for i in range(5):
        np.testing.assert_array_equal(first[i]["actions"], full[i]["actions"])
    with pytest.raises(IndexError, match="frame 5 out of range"):
        first[5]
    with pytest.raises(PolicyError, match="episodes 3: the dataset holds 2 episodes"):
        windows(data / "real", tmp_path, episodes=3)
    # It crosses into loader processes with its subset.
    assert len(pickle.loads(pickle.dumps(first))) == 5


def test_images_are_resized_with_area_interpolation(data: Path, tmp_path: Path) -> None:
    ds = WindowDataset(data / "real", 16, P, H, cache_dir=tmp_path)
    img = ds[3]["images"][0]
    assert img.shape == (16, 16, 3)
    # The top half's blue 200 and the bottom's 0 average over 2x2 blocks without blurring.
    assert (img[:8, :, 2] == 200).all() and (img[8:, :, 2] == 0).all()
    plain = WindowDataset(data / "real", 16, P, H, use_cache=False)
    np.testing.assert_array_equal(ds[3]["images"], plain[3]["images"])


def test_frame_cache_is_built_once_reused_and_invalidated(tmp_path: Path) -> None:
    root, cache_dir = tmp_path / "ds", tmp_path / "cache"
    write(root, (4, 3))
    ds = WindowDataset(root, SIZE, P, H, cache_dir=cache_dir)
    cache = ds.cache
    assert cache is not None
    files = sorted(cache.folder.rglob("*.npy"))
    assert len(files) == 2 * 3
    stamps = [f.stat().st_mtime_ns for f in files]
    # A second run finds everything cached: nothing is decoded, no file is touched.
    again = FrameCache(ds.dataset, SIZE, cache_dir)
    assert again.fingerprint == cache.fingerprint and again.build() == 0
    assert [f.stat().st_mtime_ns for f in files] == stamps
    frames = again.frames(1, "head")
    assert isinstance(frames, np.memmap) and frames.shape == (3, SIZE, SIZE, 3)
    np.testing.assert_array_equal(frames[2], frame_image(6, 0))
    # A crash left a temporary file and a truncated one under a final name: both are
    # ignored and rebuilt, and no temporary file remains.
    victim = cache.path(1, "left_wrist")
    victim.with_name(victim.stem + ".999.partial.npy").write_bytes(b"half a file")
    cut = cache.path(0, "head")
    cut.write_bytes(cut.read_bytes()[:1000])
    assert sorted(again.missing()) == [(0, "head")]
    victim.unlink()
    calls: list[tuple[str, int, int]] = []
    assert FrameCache(ds.dataset, SIZE, cache_dir).build(lambda *a: calls.append(a)) == 2
    assert calls[-1] == ("frame cache", 2, 2)
    rebuilt = FrameCache(ds.dataset, SIZE, cache_dir)
    np.testing.assert_array_equal(rebuilt.frames(1, "left_wrist")[0], frame_image(4, 1))
    np.testing.assert_array_equal(rebuilt.frames(0, "head")[3], frame_image(3, 0))
    # A changed dataset (one more episode) gets a new folder; the old one is left alone.
    write(root, (2,), start=7)
    grown = WindowDataset(root, SIZE, P, H, cache_dir=cache_dir)
    assert grown.cache is not None and grown.cache.fingerprint != cache.fingerprint
    assert len(sorted(grown.cache.folder.rglob("*.npy"))) == 3 * 3
    np.testing.assert_array_equal(grown[8]["images"][2], frame_image(8, 2))
    # Another size is another folder of the same fingerprint.
    assert FrameCache(grown.dataset, 16, cache_dir).folder.parent == grown.cache.folder.parent
    # The default root comes from the environment.
    os.environ["R2S2R_CACHE_DIR"] = str(tmp_path / "env")
    try:
        assert FrameCache(grown.dataset, SIZE).folder.is_relative_to(tmp_path / "env")
    finally:
        del os.environ["R2S2R_CACHE_DIR"]


def test_mixture_share_matches_alpha_and_is_deterministic(data: Path, tmp_path: Path) -> None:
    real, a, b = (windows(data / n, tmp_path) for n in ("real", "sim_a", "sim_b"))
    mix = Mixture(real, [a, b], alpha=0.3, seed=7)
    assert mix.domains == ("real", "sim1", "sim2") and mix.contract == CONTRACT
    keys = 4000
    domains = np.array([mix.draw(k)[0] for k in range(keys)])
    share = (domains == 0).mean()
    sigma = np.sqrt(0.3 * 0.7 / keys)
    assert abs(share - 0.3) < 3 * sigma, share
    # The rest is split equally between the sims.
    for d in (1, 2):
        assert abs((domains == d).mean() - 0.35) < 3 * np.sqrt(0.35 * 0.65 / keys)
    # Deterministic for a seed, different for another; every frame of a domain is reached.
    again = Mixture(real, [a, b], alpha=0.3, seed=7)
    assert [again.draw(k) for k in range(200)] == [mix.draw(k) for k in range(200)]
    other = Mixture(real, [a, b], alpha=0.3, seed=8)
    assert [other.draw(k) for k in range(200)] != [mix.draw(k) for k in range(200)]
    frames = {f for d, f in (mix.draw(k) for k in range(keys)) if d == 2}
    assert frames == set(range(len(b)))
    s = mix[11]
    d, f = mix.draw(11)
    assert s["domain_id"] == d
    np.testing.assert_array_equal(s["state"], [real, a, b][d][f]["state"])
    # alpha 1 draws only real, alpha 0 only sims.
    assert {Mixture(real, [a], 1.0).draw(k)[0] for k in range(100)} == {0}
    assert {Mixture(real, [a], 0.0).draw(k)[0] for k in range(100)} == {1}


def test_mixture_refuses_bad_input(data: Path, tmp_path: Path) -> None:
    real, sim = windows(data / "real", tmp_path), windows(data / "sim_a", tmp_path)
    with pytest.raises(PolicyError, match=r"mixture: empty \(no real and no simulated"):
        Mixture(None, [], 0.5)
    for alpha in (-0.1, 1.5):
        with pytest.raises(PolicyError, match=f"alpha {alpha} is outside \\[0, 1\\]"):
            Mixture(real, [sim], alpha)
    with pytest.raises(PolicyError, match="alpha 0.5 > 0 draws from real data, but none given"):
        Mixture(None, [sim], 0.5)
    with pytest.raises(PolicyError, match="alpha 0.5 < 1 draws from simulated data, but none"):
        Mixture(real, [], 0.5)
    # Another contract (two cameras) and another fps.
    two = DatasetCfg(cameras=CAMERAS[:2], video=VideoCfg(lossless=True))
    write(tmp_path / "two", (3,), two)
    other = windows(tmp_path / "two", tmp_path)
    with pytest.raises(
        ContractError, match=f"dataset {tmp_path / 'two'} has cameras \\(head, left_wrist\\)"
    ):
        Mixture(real, [other], 0.5)
    slow = DatasetCfg(fps=25, cameras=CAMERAS, video=VideoCfg(lossless=True))
    write(tmp_path / "slow", (3,), slow)
    with pytest.raises(
        PolicyError, match=f"dataset {tmp_path / 'slow'} runs at 25 fps, dataset .*real at 50"
    ):
        Mixture(real, [windows(tmp_path / "slow", tmp_path)], 0.5)
    # Against a policy: another action size, a missing camera, another fps.
    mix = Mixture(real, [sim], 0.5)
    mix.check_policy(CONTRACT, 50.0, CAMERA_NAMES)
    e = CONTRACT.embodiment
    # A robot whose hands have 16 joints: 46 action entries instead of 54.
    small = dataclasses.replace(e, hand_joints=e.hand_joints[:16], hand_range=e.hand_range[:16])
    with pytest.raises(
        ContractError,
        match=f"dataset {data / 'real'} does not fit the policy: .*"
        "2 arms x 20 hand joints, the policy has 2 arms x 16 hand joints; "
        "dataset .*real has 68 state and 54 action entries, the policy has 60 state and 46",
    ):
        mix.check_policy(Contract.of(small, "tcp"), 50.0, CAMERA_NAMES)
    with pytest.raises(ContractError, match="acts in 'tcp' mode, the policy in 'joint' mode"):
        mix.check_policy(Contract.of(e, "joint"), 50.0, CAMERA_NAMES)
    with pytest.raises(
        ContractError,
        match=r"dataset .*real has cameras \(head, left_wrist, right_wrist\), "
        r"the policy has \(head, left_wrist, right_wrist, top\)",
    ):
        mix.check_policy(CONTRACT, 50.0, (*CAMERA_NAMES, "top"))
    with pytest.raises(
        PolicyError, match=f"dataset {data / 'real'} runs at 50 fps, the policy expects 30 fps"
    ):
        mix.check_policy(CONTRACT, 30.0, CAMERA_NAMES)


def test_step_batch_sampler_and_loader_order(data: Path, tmp_path: Path) -> None:
    sampler = StepBatchSampler(4, start_step=2, total_steps=4, rank=1, world_size=2)
    assert list(sampler) == [[20, 21, 22, 23], [28, 29, 30, 31]] and len(sampler) == 2
    endless = iter(StepBatchSampler(2))
    assert [next(endless) for _ in range(3)] == [[0, 1], [2, 3], [4, 5]]
    with pytest.raises(PolicyError, match="rank 2"):
        StepBatchSampler(4, rank=2, world_size=2)
    real, sim = windows(data / "real", tmp_path), windows(data / "sim_b", tmp_path)
    mix = Mixture(real, [sim], 0.5, seed=3)
    codec = ActionCodec(CONTRACT, "relative")
    collate = Collate(codec, fit_stats(mix, codec), 80, 64, SIZE)
    straight = list(make_loader(mix, collate, 3, 0, 4, workers=0))
    # Resumed at step 2 with two workers: the same batches as steps 2 and 3 straight, also
    # when decoding on demand from video files the parent process already has open.
    plain = [windows(data / n, tmp_path, use_cache=False) for n in ("real", "sim_b")]
    plain_mix = Mixture(plain[0], [plain[1]], 0.5, seed=3)
    plain_mix[0], plain_mix[1]  # noqa: B018
    resumed = list(make_loader(plain_mix, collate, 3, 2, 4, workers=2))
    assert len(straight) == 4 and len(resumed) == 2
    for x, y in zip(straight[2:], resumed, strict=True):
        for key in ("state", "actions", "images", "domain_id"):
            torch.testing.assert_close(x[key], y[key], rtol=0, atol=0)


def test_collate_shapes_padding_and_the_way_back(data: Path, tmp_path: Path) -> None:
    real = windows(data / "real", tmp_path)
    mix = Mixture(real, [], 1.0)
    codec = ActionCodec(CONTRACT, "relative")
    stats = fit_stats(mix, codec)
    collate = Collate(codec, stats, 80, 64, SIZE)
    samples = [mix[k] for k in range(5)]
    b = collate(samples)
    assert b["images"].shape == (5, 3, 3, SIZE, SIZE) and b["images"].dtype == torch.uint8
    np.testing.assert_array_equal(
        b["images"][0, 1].permute(1, 2, 0).numpy(), samples[0]["images"][1]
    )
    assert b["state"].shape == (5, P, 80) and b["state"].dtype == torch.float32
    assert b["actions"].shape == (5, H, 64) and b["actions"].dtype == torch.float32
    assert (b["state"][..., 68:] == 0).all() and (b["actions"][..., 58:] == 0).all()
    assert (
        b["action_dim_mask"].shape == (5, 64) and b["action_dim_mask"].sum(1).tolist() == [58] * 5
    )
    assert b["state_is_pad"].dtype == torch.bool and b["action_is_pad"].shape == (5, H)
    assert b["embodiment_id"].dtype == torch.int64 and b["domain_id"].tolist() == [0] * 5
    assert b["task"] == [s["task"] for s in samples]
    np.testing.assert_allclose(
        b["state"][..., :68].numpy(), stats.state.normalize(np.stack([s["state"] for s in samples]))
    )
    # Back to robot units: the actions the windows hold, relative to each last state.
    now = np.stack([s["state"][-1] for s in samples]).astype(np.float64)
    out = collate.actions_out(b["actions"], now)
    assert out.shape == (5, H, 54) and out.dtype == np.float64
    np.testing.assert_allclose(out, np.stack([s["actions"] for s in samples]), atol=1e-4)
    # A live observation: images of any size, resized inside; no action keys.
    s = samples[2]
    images = {
        c: np.repeat(np.repeat(s["images"][k], 2, 0), 2, 1) for k, c in enumerate(CAMERA_NAMES)
    }
    obs = collate.observation(images, s["state"], s["task"], s["embodiment_id"], domain_id=1)
    assert "actions" not in obs and obs["images"].shape == (1, 3, 3, SIZE, SIZE)
    torch.testing.assert_close(obs["images"][0], b["images"][2])
    torch.testing.assert_close(obs["state"][0], b["state"][2])
    assert obs["domain_id"].tolist() == [1] and not obs["state_is_pad"].any()
    with pytest.raises(PolicyError, match=r"images: missing cameras \['right_wrist'\]"):
        collate.observation({c: images[c] for c in CAMERA_NAMES[:2]}, s["state"], "t", 0)
    # Collate and the datasets cross into spawned worker processes by pickling.
    again = pickle.loads(pickle.dumps(collate))
    torch.testing.assert_close(again(samples)["actions"], b["actions"], rtol=0, atol=0)
    copy = pickle.loads(pickle.dumps(mix))
    np.testing.assert_array_equal(copy[3]["images"], mix[3]["images"])
    with pytest.raises(PolicyError, match="exceed max_action_dim 32"):
        Collate(codec, stats, 80, 32)


def test_fit_stats_covers_every_state_and_excludes_pad_actions(data: Path, tmp_path: Path) -> None:
    real, sim = windows(data / "real", tmp_path), windows(data / "sim_a", tmp_path)
    mix = Mixture(real, [sim], 0.5)
    codec = ActionCodec(CONTRACT, "absolute")
    stats = fit_stats(mix, codec)
    states = np.concatenate([d.dataset.low_dim()["observation.state"] for d in (real, sim)])
    np.testing.assert_allclose(stats.state.q01, QuantileNorm.fit(states).q01)
    # Absolute hand targets stay as recorded: frame j of an episode lies unpadded in
    # min(j + 1, H) windows, and a pad entry counts nowhere.
    counted = []
    for d in (real, sim):
        for e in d.dataset.episodes:
            lo, hi = int(e["dataset_from_index"]), int(e["dataset_to_index"])
            marks = d.dataset.low_dim()["action"][lo:hi, MARK_A]
            counted.append(np.repeat(marks, np.minimum(np.arange(hi - lo) + 1, H)))
    expected = QuantileNorm.fit(np.concatenate(counted)[:, None])
    # The first hand joint of the first arm comes after its position and 6D rotation.
    assert stats.action.q01[9] == pytest.approx(expected.q01[0], rel=1e-6)
    assert stats.action.q99[9] == pytest.approx(expected.q99[0], rel=1e-6)
    # Subsampling is deterministic for a seed.
    a, b = (
        fit_stats(mix, codec, max_windows=5, seed=1),
        fit_stats(mix, codec, max_windows=5, seed=1),
    )
    np.testing.assert_array_equal(a.action.q99, b.action.q99)


def test_augment_is_deterministic_for_a_seed() -> None:
    rng = np.random.default_rng(0)
    images = torch.from_numpy(rng.integers(0, 256, (2, 3, 3, SIZE, SIZE), dtype=np.uint8))
    one = augment(images, torch.Generator().manual_seed(1))
    assert one.shape == images.shape and one.dtype == torch.uint8
    torch.testing.assert_close(
        one, augment(images, torch.Generator().manual_seed(1)), rtol=0, atol=0
    )
    two = augment(images, torch.Generator().manual_seed(2))
    assert not torch.equal(one, two) and not torch.equal(one, images)
    # Views and samples are augmented independently.
    same = images[:1, :1].expand(2, 3, 3, SIZE, SIZE).contiguous()
    out = augment(same, torch.Generator().manual_seed(3))
    assert not torch.equal(out[0, 0], out[0, 1]) and not torch.equal(out[0, 0], out[1, 0])
    # A flat grey image stays flat grey under shifts and jitter of brightness only.
    grey = torch.full((1, 1, 3, SIZE, SIZE), 100, dtype=torch.uint8)
    flat = augment(grey, torch.Generator().manual_seed(4))
    assert flat.min() == flat.max() and 70 <= int(flat[0, 0, 0, 0, 0]) <= 130
    with pytest.raises(ValueError, match=r"expected \(B, V, 3, s, s\) uint8"):
        augment(images.float(), torch.Generator())


def test_augment_without_shift_keeps_every_pixel_in_place() -> None:
    # A dot in a grey view: shifted views move it, unshifted ones keep it where it is.
    dot = torch.full((8, 1, 3, SIZE, SIZE), 100, dtype=torch.uint8)
    dot[:, :, :, 20:22, 30:32] = 250

    def where(views: torch.Tensor) -> set[tuple[int, int]]:
        flat = views[:, 0].float().mean(1).flatten(1).argmax(1)
        return {(int(i) // SIZE, int(i) % SIZE) for i in flat}

    assert where(augment(dot, torch.Generator().manual_seed(5), shift=0.0)) == {(20, 30)}
    assert len(where(augment(dot, torch.Generator().manual_seed(5)))) > 1


def test_loader_bench_reports_every_rate(data: Path, tmp_path: Path) -> None:
    result = bench_loader(
        data / "real",
        SIZE,
        batch_size=4,
        workers=0,
        batches=2,
        cache_dir=tmp_path,
        state_history=P,
        action_horizon=H,
        lerobot_python=tmp_path / "no-python",
    )
    for key in ("samples_per_s", "cold_samples_per_s", "plain_samples_per_s", "over_plain"):
        assert result[key] > 0, key
    assert result["over_plain"] == pytest.approx(
        result["samples_per_s"] / result["plain_samples_per_s"]
    )
    assert "lerobot_samples_per_s" not in result and result["frames"] == 12
    # The scratch cache is removed afterwards.
    assert list(tmp_path.iterdir()) == []
    app = typer.Typer()
    app.command()(bench)
    out = CliRunner().invoke(
        app,
        [
            "--data",
            str(data / "sim_a"),
            "--image-size",
            "16",
            "--batch-size",
            "2",
            "--workers",
            "0",
            "--batches",
            "1",
            "--json",
        ],
    )
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["image_size"] == 16


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_augment_on_cuda_matches_cpu() -> None:
    rng = np.random.default_rng(5)
    images = torch.from_numpy(rng.integers(0, 256, (2, 3, 3, SIZE, SIZE), dtype=np.uint8))
    cpu = augment(images, torch.Generator().manual_seed(6))
    cuda = augment(images.cuda(), torch.Generator().manual_seed(6))
    assert cuda.device.type == "cuda"
    # The same draws; float rounding may move a value by one level.
    assert (cuda.cpu().int() - cpu.int()).abs().max() <= 1
