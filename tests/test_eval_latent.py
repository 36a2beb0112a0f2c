"""The latent-space analysis on recorded twin demos and a tiny trained policy: embeddings come
from the policy's own observation path, batched without changing them; the neighbour search
and the real share agree with a brute-force computation; an end-to-end run finds a rollout of
real frames among real neighbours and one of simulated frames among simulated ones; bad input
is named."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from r2s2r.cli import app
from r2s2r.data import Dataset, DatasetWriter
from r2s2r.data.config import ACTION_KEY, ENV_STATE_KEY, IMAGE_PREFIX, STATE_KEY, DatasetCfg
from r2s2r.eval.embedding import Metric, embed, nearest, shares
from r2s2r.eval.latent import LATENT_FILE, LatentError, analyze, sample_frames
from r2s2r.eval.latent_plot import pca, umap_available
from r2s2r.policy.base import PolicyError
from r2s2r.policy.learned import LearnedPolicy
from r2s2r.policy.train import TrainCfg, Trainer
from r2s2r.sim.contract import ContractError
from r2s2r.spec import SpecError

Images = Callable[[np.ndarray], np.ndarray]


def _copy(
    src: Path,
    dst: Path,
    episodes: list[int],
    images: Images,
    meta: dict[str, str] | None = None,
    only: set[int] | None = None,
) -> Path:
    """Write episodes of ``src`` into a new dataset ``dst`` through the dataset writer, their
    views passed through ``images`` (all, or the episodes in ``only``)."""
    ds = Dataset(src)
    writer = DatasetWriter(dst, ds.cfg)
    for e in episodes:
        arrays = ds.episode_arrays(e)
        views = {k: ds.episode_images(e, k) for k in ds.camera_keys}
        change = images if only is None or e in only else (lambda x: x)
        for f in range(len(arrays["timestamp"])):
            writer.add_frame(
                {k: np.ascontiguousarray(change(v[f])) for k, v in views.items()},
                arrays[STATE_KEY][f],
                arrays[ACTION_KEY][f],
                env_state=arrays[ENV_STATE_KEY][f] if ds.cfg.env_state else None,
            )
        writer.save_episode(ds.episodes[e]["tasks"][0], True, meta)
    writer.close()
    return dst


def _negative(frame: np.ndarray) -> np.ndarray:
    return 255 - frame


@pytest.fixture(scope="module")
def run(recorded_demos: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny policy trained for two steps on the demos."""
    torch.set_num_threads(1)
    tmp = tmp_path_factory.mktemp("latent_run")
    cfg = TrainCfg.from_dict(
        {
            "preset": "tiny",
            "real": recorded_demos,
            "steps": 2,
            "batch_size": 4,
            "warmup_steps": 1,
            "workers": 0,
            "log_every": 1,
            "save_every": 1000,
            "cache_dir": tmp / "cache",
            "stats_windows": 200,
        }
    )
    Trainer(cfg, tmp / "run").fit()
    return tmp / "run"


@pytest.fixture(scope="module")
def sim(recorded_demos: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demos as a 'simulated' dataset: every view a photographic negative, the episodes
    labelled as a nominal-world, planned-behavior dataset."""
    out = tmp_path_factory.mktemp("latent_sim") / "sim"
    return _copy(
        recorded_demos, out, [0, 1, 2], _negative, {"world": "nominal", "behavior": "planned"}
    )


@pytest.fixture(scope="module")
def eval_dir(recorded_demos: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An evaluation directory whose rollouts are demo 0 as recorded and demo 1 as a
    negative (the simulated look)."""
    root = tmp_path_factory.mktemp("latent_eval")
    _copy(recorded_demos, root / "rollouts", [0, 1], _negative, only={1})
    return root


@pytest.fixture(scope="module")
def policy(run: Path) -> LearnedPolicy:
    return LearnedPolicy.load(run, device="cpu")


def test_embeddings_are_the_policy_encoding_batched_and_deterministic(
    recorded_demos: Path, policy: LearnedPolicy
) -> None:
    torch.set_num_threads(1)
    ds = Dataset(recorded_demos)
    frames = [0, 3, 74, 75, 120, 224]
    batched = embed(policy, ds, frames, batch_size=4)
    again = embed(policy, ds, frames, batch_size=4)
    single = embed(policy, ds, frames, batch_size=1)
    assert batched.shape == (len(frames), policy.model.cfg.width)
    assert batched.dtype == np.float32
    np.testing.assert_array_equal(batched, again)
    np.testing.assert_allclose(batched, single, atol=1e-5)
    # Frame 75 starts episode 1: its history is its own state, padded, as the live policy
    # builds it right after ``reset``; the embedding is the mean of the encoder's tokens.
    start = int(ds.episode(1)["dataset_from_index"])
    assert start == 75
    history = policy.metadata.state_history
    state = ds.low_dim()[STATE_KEY][start]
    images = {c: ds.image(IMAGE_PREFIX + c, start) for c in policy.contract.cameras}
    task = ds.episode(1)["tasks"][0]
    batch = policy.collate.observation(
        images,
        np.repeat(state[None], history, axis=0),
        task,
        policy.contract.embodiment.id,
        0,
        np.arange(history) < history - 1,
    )
    with torch.inference_mode():
        tokens = policy.model.encode(batch).tokens
    assert tokens.shape[0] == 1 and tokens.shape[1] > 1
    np.testing.assert_allclose(batched[3], tokens.mean(dim=1)[0].numpy(), atol=1e-5)
    # Distinct frames have distinct embeddings.
    assert np.abs(batched[2] - batched[3]).max() > 1e-3
    ds.close()


def _brute_force(train: np.ndarray, query: np.ndarray, k: int, metric: str) -> np.ndarray:
    rows = []
    for q in query:
        if metric == "euclidean":
            dist = np.array([np.sqrt(np.sum((t - q) ** 2)) for t in train])
        else:
            dist = np.array([1 - t @ q / (np.linalg.norm(t) * np.linalg.norm(q)) for t in train])
        rows.append(np.argsort(dist, kind="stable")[:k])
    return np.array(rows)


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_neighbour_shares_match_brute_force_and_known_answers(metric: Metric) -> None:
    rng = np.random.default_rng(3)
    d = 12
    axis = np.eye(d)[0] * 3.0
    real = axis + rng.normal(0, 0.3, (40, d))
    sims = -axis + rng.normal(0, 0.3, (60, d))
    train = np.concatenate([real, sims])
    source = np.array([0] * 40 + [1] * 60)
    near_real = axis + rng.normal(0, 0.2, (15, d))
    near_sim = -axis + rng.normal(0, 0.2, (15, d))
    anywhere = rng.normal(0, 2.0, (30, d))
    query = np.concatenate([near_real, near_sim, anywhere])
    k = 7
    found = nearest(train, query, k, metric, chunk=8)
    expected = _brute_force(train, query, k, metric)
    assert found.shape == (len(query), k)
    np.testing.assert_array_equal(found, expected)
    share = shares(found, source, 2)
    np.testing.assert_allclose(share.sum(axis=1), 1.0)
    real_share = share[:, 0]
    assert np.all(real_share[:15] == 1.0)
    assert np.all(real_share[15:30] == 0.0)
    brute_share = np.array([np.mean(source[row] == 0) for row in expected])
    np.testing.assert_allclose(real_share, brute_share)
    # The points in between get a mix, not just the clusters' extremes.
    assert 0.0 < real_share[30:].mean() < 1.0


def test_frame_sampling_strides_caps_and_is_seeded() -> None:
    assert sample_frames(100, 3, 1000, np.random.default_rng(0)).tolist() == list(range(0, 100, 3))
    capped = sample_frames(100, 3, 10, np.random.default_rng(0))
    assert len(capped) == 10 and set(capped) <= set(range(0, 100, 3))
    assert np.all(np.diff(capped) > 0)
    np.testing.assert_array_equal(capped, sample_frames(100, 3, 10, np.random.default_rng(0)))
    assert not np.array_equal(capped, sample_frames(100, 3, 10, np.random.default_rng(1)))


def test_pca_fits_the_training_frames_and_projects_the_rest_alike() -> None:
    rng = np.random.default_rng(0)
    line = rng.normal(0, 5, (200, 1)) * np.array([[1.0, 2.0, -1.0, 0.5]])
    train = line + rng.normal(0, 0.1, (200, 4)) + 7.0
    train_2d, query_2d, ratio = pca(train, train[:5])
    assert train_2d.shape == (200, 2) and query_2d.shape == (5, 2)
    np.testing.assert_allclose(query_2d, train_2d[:5])
    assert ratio[0] > 0.99 and ratio[0] + ratio[1] <= 1.0 + 1e-12
    np.testing.assert_allclose(train_2d.mean(axis=0), 0.0, atol=1e-9)


def test_analysis_end_to_end_finds_real_and_simulated_rollouts(
    run: Path, recorded_demos: Path, sim: Path, eval_dir: Path, tmp_path: Path
) -> None:
    torch.set_num_threads(1)
    reports: list[tuple[str, int, int]] = []
    out = tmp_path / "latent"
    result = analyze(
        run, [recorded_demos], [sim], eval_dir, out, k=5, max_frames=80, seed=0,
        stride=2, rollout_stride=3, device="cpu", progress=lambda *r: reports.append(r),
    )  # fmt: skip
    written = json.loads((out / LATENT_FILE).read_text())
    assert written == json.loads(json.dumps(result.to_json()))
    labels = {s["label"]: s for s in written["sources"]}
    assert set(labels) == {"real", "sim nominal/planned", "rollouts"}
    # 113 of every other frame, capped at 80; the rollouts' 75-step episodes every 3rd step.
    assert labels["real"]["frames"] == labels["sim nominal/planned"]["frames"] == 80
    assert labels["rollouts"]["frames"] == 50
    assert labels["rollouts"]["path"] == str(eval_dir / "rollouts")
    first, second = written["rollouts"]
    assert first["frames"] == list(range(0, 75, 3)) and len(first["real_share"]) == 25
    assert first["times"][1] == pytest.approx(3 / 50)
    # The recorded rollout sits among real frames, the negative one among simulated ones.
    assert first["mean_real_share"] > 0.9
    assert second["mean_real_share"] < 0.1
    assert first["mean_real_share"] == pytest.approx(np.mean(first["real_share"]))
    for row in written["rollouts"]:
        assert sum(row["source_share"].values()) == pytest.approx(1.0)
        assert row["source_share"]["real"] == pytest.approx(row["mean_real_share"])
    summary = written["summary"]
    assert summary["rollouts"] == 2 and summary["steps"] == 50
    assert summary["pool_real_fraction"] == pytest.approx(0.5)
    assert written["settings"]["k"] == 5 and written["settings"]["dim"] == 128
    # One report per encoder batch (batch 32): 3 + 3 + 2 batches.
    assert reports[0] == ("embedding", 0, 8) and reports[-1] == ("embedding", 8, 8)
    assert [r[1] for r in reports] == list(range(9))
    expected = {"projection_pca", "real_share"} | (
        {"projection_umap"} if umap_available() else set()
    )
    assert set(written["files"]) == expected
    for name in written["files"].values():
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert written["projection"]["umap"]["available"] == umap_available()


def test_cli_prints_the_json_it_wrote(
    run: Path, recorded_demos: Path, sim: Path, eval_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "cli"
    args = ["latent", "--policy", str(run), "--real", str(recorded_demos), "--sim", str(sim)]
    args += ["--rollouts", str(eval_dir / "rollouts"), "--out", str(out), "--k", "3"]
    args += ["--stride", "5", "--max-frames", "20", "--rollout-stride", "15"]
    args += ["--device", "cpu", "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    assert printed == json.loads((out / LATENT_FILE).read_text())
    assert printed["settings"]["k"] == 3 and printed["summary"]["steps"] == 10


def _small(src: Path, dst: Path, **changes: object) -> Path:
    """Two frames of the demos in a dataset with other settings (cameras, fps, ...)."""
    ds = Dataset(src)
    cfg = DatasetCfg.from_dict({**ds.cfg.model_dump(), **changes})
    low = ds.low_dim()
    writer = DatasetWriter(dst, cfg)
    for i in range(2):
        writer.add_frame(
            {c.name: ds.image(c.key, i) for c in cfg.cameras},
            low[STATE_KEY][i],
            low[ACTION_KEY][i],
            env_state=low[ENV_STATE_KEY][i],
        )
    writer.save_episode("pick", True)
    writer.close()
    return dst


def test_bad_input_is_named_and_nothing_is_written(
    run: Path, recorded_demos: Path, sim: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    demos = recorded_demos

    def call(real: list[Path], sims: list[Path], rollouts: Path = demos, **kw: object) -> None:
        analyze(run, real, sims, rollouts, out, device="cpu", **kw)

    with pytest.raises(LatentError, match=r"real dataset: .*nowhere: not a folder"):
        call([tmp_path / "nowhere"], [sim])
    with pytest.raises(LatentError, match=r"rollout dataset: .*gone: not a folder"):
        call([demos], [sim], tmp_path / "gone")
    empty = tmp_path / "empty"
    DatasetWriter(empty, Dataset(demos).cfg).close()
    with pytest.raises(LatentError, match=r"sim dataset .*empty: holds no frames"):
        call([demos], [empty])
    head = _small(
        demos, tmp_path / "head_only", cameras=[{"name": "head", "height": 64, "width": 64}]
    )
    with pytest.raises(ContractError, match=r"head_only does not fit the policy: it lacks camera"):
        call([demos], [head])
    slow = _small(demos, tmp_path / "slow", fps=25)
    with pytest.raises(LatentError, match=r"slow runs at 25 fps, the policy at 50 Hz"):
        call([demos], [slow])
    with pytest.raises(LatentError, match="given twice"):
        call([demos], [demos])
    with pytest.raises(LatentError, match=r"k: 50 neighbours, but only 10 training frames"):
        call([demos], [sim], k=50, max_frames=5)
    with pytest.raises(SpecError, match="stride"):
        call([demos], [sim], stride=0)
    with pytest.raises(SpecError, match="metric"):
        call([demos], [sim], metric="manhattan")
    # The run trained on real data only: no simulated dataset to compare with by default.
    with pytest.raises(LatentError, match=r"0 simulated that run .* trained on"):
        analyze(run, None, None, demos, out, device="cpu")
    with pytest.raises(PolicyError, match="no such run"):
        analyze(tmp_path / "norun", [demos], [sim], demos, out, device="cpu")
    assert not out.exists()
