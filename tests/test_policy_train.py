"""Training, checkpoints and the learned policy, on the tiny preset and recorded twin demos:
the learning path learns (a tiny policy overfits a few episodes), a resumed run equals an
uninterrupted one bit for bit, checkpoints hold no pickle, bad input is named; held-out
validation never overlaps training and changes nothing the run learns."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow
import pytest
import torch
from typer.testing import CliRunner

from r2s2r.cli import app
from r2s2r.data import Dataset
from r2s2r.data.config import IMAGE_PREFIX, STATE_KEY
from r2s2r.policy import checkpoint as ckpt
from r2s2r.policy.base import STATE_PAD_KEY, TASK_KEY, Policy, PolicyError
from r2s2r.policy.learned import LearnedPolicy
from r2s2r.policy.train import TrainCfg, Trainer, learning_rate, read_metrics, real_split
from r2s2r.policy.windows import WindowDataset
from r2s2r.spec import SpecError

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def demos(recorded_demos: Path) -> Path:
    return recorded_demos


def _cfg(demos: Path, tmp: Path, **changes: object) -> TrainCfg:
    base: dict[str, object] = {
        "preset": "tiny",
        "real": demos,
        "steps": 4,
        "batch_size": 4,
        "warmup_steps": 2,
        "lr": 1e-3,
        "final_lr": 1e-4,
        "workers": 0,
        "log_every": 1,
        "save_every": 1000,
        "cache_dir": tmp / "cache",
        "stats_windows": 500,
    }
    base.update(changes)
    return TrainCfg.from_dict(base)


def _weights(run: Path) -> dict[str, torch.Tensor]:
    saved = ckpt.load_checkpoint(run)
    return {
        **{f"model.{k}": v for k, v in saved.model.items()},
        **{f"ema.{k}": v for k, v in saved.ema.items()},
    }


def test_resumed_run_equals_the_straight_run_bit_for_bit(demos: Path, tmp_path: Path) -> None:
    # On two threads: PyTorch's default CPU kernels would differ in the last bits from run
    # to run there; the trainer's deterministic ones must not.
    torch.set_num_threads(2)
    straight = tmp_path / "straight"
    Trainer(_cfg(demos, tmp_path), straight).fit()
    split = tmp_path / "split"
    stops = iter([False, False, True])
    first = Trainer(_cfg(demos, tmp_path), split)
    assert first.fit(should_stop=lambda: next(stops)) == 2
    assert ckpt.load_checkpoint(split).step == 2
    resumed = Trainer(_cfg(demos, tmp_path), split, resume=True)
    assert resumed.step == 2
    assert resumed.fit() == 4
    a, b = _weights(straight), _weights(split)
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name
    opt_a = ckpt.load_checkpoint(straight).optimizer
    opt_b = ckpt.load_checkpoint(split).optimizer
    assert opt_a is not None and opt_b is not None
    for index, entry in opt_a["state"].items():
        for key, value in entry.items():
            assert torch.equal(torch.as_tensor(value), torch.as_tensor(opt_b["state"][index][key]))
    # The log of the resumed run is the straight run's, step for step.
    assert [r["loss"] for r in read_metrics(straight)] == [r["loss"] for r in read_metrics(split)]
    assert (split / "loss.png").is_file()


def test_checkpoint_files_hold_no_pickle(demos: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    Trainer(_cfg(demos, tmp_path, steps=1), run).fit()
    folder = ckpt.latest_checkpoint(run)
    assert folder is not None
    for path in folder.iterdir():
        head = path.read_bytes()[:8]
        # Pickle streams start with the PROTO opcode 0x80, torch.save files are zip archives.
        assert head[:1] != b"\x80" and head[:2] != b"PK", path
        if path.suffix == ".json":
            json.loads(path.read_text())
        else:
            assert path.suffix == ".safetensors", path
            header = int.from_bytes(head, "little")
            json.loads(path.read_bytes()[8 : 8 + header])


def test_corrupt_or_missing_checkpoint_is_named(demos: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    Trainer(_cfg(demos, tmp_path, steps=1), run).fit()
    folder = ckpt.latest_checkpoint(run)
    assert folder is not None
    model = folder / ckpt.MODEL_FILE
    model.write_bytes(model.read_bytes()[:1000])
    with pytest.raises(PolicyError, match=str(model)):
        LearnedPolicy.load(run, device="cpu")
    with pytest.raises(PolicyError, match="no such run"):
        LearnedPolicy.load(tmp_path / "nowhere", device="cpu")
    (folder / ckpt.NORM_FILE).unlink()
    with pytest.raises(PolicyError, match=ckpt.NORM_FILE):
        ckpt.load_checkpoint(run)


def test_bad_training_options_are_named(demos: Path, tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="mixture is empty"):
        TrainCfg.from_dict({"steps": 1})
    with pytest.raises(SpecError, match="alpha"):
        TrainCfg.from_dict({"real": str(demos), "alpha": 1.5})
    with pytest.raises(SpecError, match="preset"):
        Trainer(_cfg(demos, tmp_path, preset="huge"), tmp_path / "x")
    run = tmp_path / "run"
    Trainer(_cfg(demos, tmp_path, steps=1), run).fit()
    with pytest.raises(PolicyError, match="--resume"):
        Trainer(_cfg(demos, tmp_path, steps=1), run)
    with pytest.raises(PolicyError, match="batch_size"):
        Trainer(_cfg(demos, tmp_path, steps=2, batch_size=2), run, resume=True)


def test_learning_rate_warms_up_then_decays_to_the_final_rate(demos: Path) -> None:
    cfg = TrainCfg.from_dict(
        {"real": str(demos), "steps": 100, "warmup_steps": 10, "lr": 1e-3, "final_lr": 1e-5}
    )
    lrs = [learning_rate(cfg, s) for s in range(100)]
    assert lrs[0] == pytest.approx(1e-4) and lrs[9] == pytest.approx(1e-3)
    assert all(a >= b for a, b in zip(lrs[9:], lrs[10:], strict=False))
    assert learning_rate(cfg, 100) == pytest.approx(1e-5)


def test_learned_policy_answers_env_observations_and_requests_alike(
    demos: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    Trainer(_cfg(demos, tmp_path, steps=2), run).fit()
    policy = LearnedPolicy.load(run, device="cpu")
    assert isinstance(policy, Policy)
    meta = policy.metadata
    assert (meta.action_horizon, meta.action_dim, meta.state_history) == (40, 54, 20)
    assert meta.cameras == ("head", "left_wrist", "right_wrist")
    with Dataset(demos) as ds:
        frame = ds.frame(0)
        contract = ds.contract
    parts = contract.split_state(frame[STATE_KEY].astype(np.float64))
    obs = {
        **parts,
        "instruction": frame["task"],
        "embodiment_id": 0,
        "images": {c: frame[IMAGE_PREFIX + c] for c in meta.cameras},
    }
    policy.reset()
    first = policy.infer(obs)
    # After a reset the history is padding but for the newest sample; once 20 samples came
    # in, it is the request's full (20, 68) history.
    for _ in range(19):
        chunk = policy.infer(obs)
    assert not np.allclose(first, chunk)
    assert chunk.shape == (40, 54) and chunk.dtype == np.float64 and np.isfinite(chunk).all()
    # Unit quaternions in robot units come out of the policy.
    arm, _ = contract.split_action(chunk)
    np.testing.assert_allclose(np.linalg.norm(arm[..., 3:7], axis=-1), 1.0, atol=1e-6)
    request = {
        **{IMAGE_PREFIX + c: frame[IMAGE_PREFIX + c] for c in meta.cameras},
        STATE_KEY: np.repeat(frame[STATE_KEY][None], 20, axis=0).astype(np.float32),
        TASK_KEY: frame["task"],
    }
    np.testing.assert_allclose(policy.infer(request), chunk, atol=1e-5)
    # A request that marks all but the newest sample as padding (the runtime's, at an
    # episode's first period) answers as the env form does right after a reset.
    pad = np.arange(20) < 19
    np.testing.assert_allclose(policy.infer({**request, STATE_PAD_KEY: pad}), first, atol=1e-5)
    with pytest.raises(PolicyError, match=STATE_PAD_KEY):
        policy.infer({**request, STATE_PAD_KEY: pad[:3]})
    with pytest.raises(PolicyError, match=r"\(20, 68\)"):
        policy.infer({**request, STATE_KEY: request[STATE_KEY][:5]})


def _train_args(demos: Path, out: Path, tmp: Path) -> list[str]:
    """``r2s2r train`` options of a 2-step tiny run into ``out``."""
    args = ["--preset", "tiny", "--real", str(demos), "--steps", "2", "--batch-size", "2"]
    return [
        *args,
        "--workers",
        "0",
        "--warmup",
        "1",
        "--out",
        str(out),
        "--cache-dir",
        str(tmp / "c"),
    ]


def test_train_cli_and_the_task_script(demos: Path, tmp_path: Path) -> None:
    out = tmp_path / "cli"
    args = _train_args(demos, out, tmp_path)
    result = CliRunner().invoke(app, ["train", *args])
    assert result.exit_code == 0, result.output
    assert "finished at step 2/2" in result.output
    assert ckpt.load_checkpoint(out).step == 2
    out2 = tmp_path / "task"
    script_args = [a if a != str(out) else str(out2) for a in args]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "source")}
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tasks" / "train.py"),
            "--headless",
            "--enable_cameras",
            *script_args,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "ignoring Isaac Lab launcher flags ['--headless', '--enable_cameras']" in proc.stdout
    assert ckpt.load_checkpoint(out2).step == 2


def test_two_gloo_processes_train_one_model(demos: Path, tmp_path: Path) -> None:
    out = tmp_path / "ddp"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "source"), "OMP_NUM_THREADS": "1"}
    args = _train_args(demos, out, tmp_path)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]
    torchrun += ["--standalone"]
    proc = subprocess.run(
        [*torchrun, str(ROOT / "tasks" / "train.py"), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=400,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    saved = ckpt.load_checkpoint(out)
    assert saved.step == 2 and saved.trainer["samples"] == 2 * 2 * 2


@pytest.mark.filterwarnings(r"ignore:connect\(\) must be used as a context manager")
def test_served_policy_answers_as_the_in_process_one(demos: Path, tmp_path: Path) -> None:
    from openpi_client.websocket_client_policy import WebsocketClientPolicy

    from r2s2r.policy.client import RemotePolicy
    from r2s2r.policy.serve import PolicyServer

    run = tmp_path / "run"
    Trainer(_cfg(demos, tmp_path, steps=2), run).fit()
    policy = LearnedPolicy.load(run, device="cpu")
    with Dataset(demos) as ds:
        window = ds.window(30, 20, 40)
        frame = ds.frame(30)
    request = {
        **{IMAGE_PREFIX + c: frame[IMAGE_PREFIX + c] for c in policy.metadata.cameras},
        STATE_KEY: window[STATE_KEY],
        TASK_KEY: frame["task"],
    }
    local = policy.infer(request)
    with PolicyServer(LearnedPolicy.load(run, device="cpu"), port=0, token="s3cret") as server:
        openpi = WebsocketClientPolicy("127.0.0.1", server.port, api_key="s3cret")
        assert openpi.get_server_metadata()["action_horizon"] == 40
        reply = openpi.infer(request)
        np.testing.assert_array_equal(reply["actions"], local.astype(np.float32))
        openpi._ws.close()
        remote = RemotePolicy("127.0.0.1", server.port, token="s3cret")
        np.testing.assert_array_equal(remote.infer(request), local.astype(np.float32))
        remote.close()
        with pytest.raises(PolicyError, match="401|token"):
            RemotePolicy("127.0.0.1", server.port).infer(request)


def test_bench_commands_print_their_figures(demos: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["policy", "bench", "--preset", "tiny", "--repeats", "2", "--json"])
    assert result.exit_code == 0, result.output
    figures = json.loads(result.output)
    for key in ("ms_per_chunk", "encode_ms", "denoise_ms", "params", "trainable_params", "device"):
        assert key in figures
    assert figures["params"] > figures["trainable_params"] > 0
    result = runner.invoke(app, ["policy", "params", "--preset", "tiny"])
    assert result.exit_code == 0 and "tiny" in result.output, result.output
    args = ["train", "bench", "--data", str(demos), "--image-size", "64", "--batch-size", "4"]
    result = runner.invoke(app, [*args, "--batches", "2", "--workers", "0", "--json"])
    assert result.exit_code == 0, result.output
    loader = json.loads(result.output)
    assert loader["samples_per_s"] > 0 and loader["cold_samples_per_s"] > 0
    assert loader["over_plain"] > 0


def test_init_fine_tunes_from_another_runs_weights(demos: Path, tmp_path: Path) -> None:
    first = tmp_path / "first"
    Trainer(_cfg(demos, tmp_path, steps=1), first).fit()
    saved = ckpt.load_checkpoint(first).model
    tuned = Trainer(_cfg(demos, tmp_path, steps=1, init=first), tmp_path / "tuned")
    assert tuned.step == 0
    for name, value in tuned.model.state_dict().items():
        assert torch.equal(value, saved[name]), name
    # A checkpoint of another policy size is refused by name.
    other = tmp_path / "other.yaml"
    from r2s2r.policy.config import load_policy_cfg

    load_policy_cfg("tiny").replace(width=64, heads=2).save(other)
    with pytest.raises(PolicyError, match="another policy size"):
        Trainer(_cfg(demos, tmp_path, steps=1, preset=str(other), init=first), tmp_path / "x")


def test_a_mixture_with_a_domain_token_trains_and_loads(demos: Path, tmp_path: Path) -> None:
    run = tmp_path / "mix"
    cfg = _cfg(demos, tmp_path, steps=1, sims=(str(demos),), alpha=0.5, domain_conditioning=True)
    trainer = Trainer(cfg, run)
    assert trainer.mixture.domains == ("real", "sim1")
    trainer.fit()
    config = json.loads((run / ckpt.CONFIG_FILE).read_text())
    assert config["policy"]["domain_conditioning"] is True
    assert [d["domain"] for d in config["datasets"]] == ["real", "sim1"]
    policy = LearnedPolicy.load(run, device="cpu")
    assert policy.model.cfg.domain_conditioning
    with pytest.raises(PolicyError, match="domain_conditioning"):
        Trainer(_cfg(demos, tmp_path, steps=2, sims=(str(demos),), alpha=0.5), run, resume=True)


def test_validation_episodes_never_overlap_training(demos: Path, tmp_path: Path) -> None:
    ds = Dataset(demos)
    train, val = real_split(_cfg(demos, tmp_path, val_episodes=1), ds)
    assert (train, val) == ([0, 1], [2])
    train, val = real_split(_cfg(demos, tmp_path, val_episodes=1, real_episodes=2), ds)
    assert (train, val) == ([0], [1])
    with pytest.raises(PolicyError, match="leaves no episode to train on"):
        real_split(_cfg(demos, tmp_path, val_episodes=3), ds)


def test_only_successful_keeps_the_successful_takes(demos: Path, tmp_path: Path) -> None:
    # The fixture's takes are 1.5 s long: none sorts its object.
    cfg = _cfg(demos, tmp_path, only_successful=True)
    with pytest.raises(PolicyError, match="no successful episode"):
        real_split(cfg, Dataset(demos))
    # The same takes with the first and the last labelled successful in the episodes table.
    import pyarrow.parquet as pq

    relabelled = tmp_path / "relabelled"
    shutil.copytree(demos, relabelled)
    (table_path,) = (relabelled / "meta" / "episodes").rglob("*.parquet")
    table = pq.read_table(table_path)
    column = table.schema.get_field_index("success")
    table = table.set_column(column, "success", pyarrow.array([True, False, True]))
    pq.write_table(table, table_path)
    cfg = _cfg(relabelled, tmp_path, only_successful=True)
    assert real_split(cfg, Dataset(relabelled)) == ([0, 2], [])
    # Held-out episodes are the last ones whatever their label; the rest are filtered.
    held = _cfg(relabelled, tmp_path, only_successful=True, val_episodes=1)
    assert real_split(held, Dataset(relabelled)) == ([0], [2])


def test_windows_come_only_from_the_chosen_episodes(demos: Path, tmp_path: Path) -> None:
    data = WindowDataset(demos, 64, cache_dir=tmp_path / "cache", episodes=[0, 2])
    ds = Dataset(demos)
    lengths = [int(e["length"]) for e in ds.episodes]
    assert len(data) == lengths[0] + lengths[2]
    seen = {data[i]["episode_index"] for i in range(0, len(data), 7)}
    assert seen == {0, 2}
    # The first sample of the second chosen episode is that episode's first frame.
    sample = data[lengths[0]]
    assert (sample["episode_index"], sample["frame_index"]) == (2, 0)
    assert data.states().shape == (len(data), ds.contract.state_dim)
    with pytest.raises(PolicyError, match="expected a non-empty set of positions"):
        WindowDataset(demos, 64, cache_dir=tmp_path / "cache", episodes=[5])


def test_validation_is_logged_and_changes_nothing_the_run_learns(
    demos: Path, tmp_path: Path
) -> None:
    torch.set_num_threads(1)
    with_val, without = tmp_path / "val", tmp_path / "plain"
    cfg = _cfg(demos, tmp_path, val_episodes=1, val_every=2, val_windows=8)
    trainer = Trainer(cfg, with_val)
    trainer.fit()
    rows = read_metrics(with_val)
    logged = [(r["step"], r["val_loss"] is not None) for r in rows]
    assert logged == [(1, False), (2, True), (3, False), (4, True)]
    val_rows = [r for r in rows if r["val_loss"] is not None]
    assert all(np.isfinite(r["val_loss"]) and r["val_pos_mm"] > 0 for r in val_rows)
    # The same weights measure the same: the draws are fixed. No locator, no place error.
    assert trainer._validate()[:3] == trainer._validate()[:3]
    assert all(r["val_place_cm"] is None for r in val_rows)
    # Training on the same episodes without validation gives the same weights, bit for bit.
    Trainer(_cfg(demos, tmp_path, real_episodes=2), without).fit()
    a, b = ckpt.load_checkpoint(with_val), ckpt.load_checkpoint(without)
    for name, value in a.model.items():
        assert torch.equal(value, b.model[name]), name
    # A resume must hold the split it started with.
    changed = _cfg(demos, tmp_path, val_episodes=2, steps=6)
    with pytest.raises(PolicyError, match="val_episodes"):
        Trainer(changed, with_val, resume=True)


def test_the_studio_reads_steps_whose_validation_figures_are_null(tmp_path: Path) -> None:
    from r2s2r.app.train_process import read_metrics as read_live

    rows = [
        {"step": 1, "loss": 2.0, "lr": 1e-3, "val_loss": None, "val_pos_mm": None},
        {"step": 2, "loss": 1.5, "lr": 1e-3, "val_loss": 1.7, "val_pos_mm": 40.0},
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = read_live(tmp_path)
    assert [r["step"] for r in got] == [1.0, 2.0]
    assert "val_loss" not in got[0] and got[1]["val_pos_mm"] == 40.0


def test_the_probe_scores_held_out_episodes_from_tokens_and_from_pixels(
    demos: Path, tmp_path: Path
) -> None:
    from r2s2r.eval.probe import probe

    run = tmp_path / "run"
    Trainer(_cfg(demos, tmp_path, steps=2), run).fit()
    tokens = probe(run, demos, frames=90, alpha=10.0)
    pixels = probe(run, demos, frames=90, alpha=10.0, pixels=True)
    # Three takes: the last is held out, whatever the features.
    ds = Dataset(demos)
    assert tokens["frames_test"] == pixels["frames_test"] > 0
    assert tokens["frames_fit"] + tokens["frames_test"] == 90 < len(ds)
    assert (tokens["features"], pixels["features"]) == ("tokens", "pixels")
    for result in (tokens, pixels):
        assert all(np.isfinite(result[k]) for k in ("object_x_cm", "object_y_cm", "belt_speed_r2"))
    # Other features, other fits.
    assert tokens["object_x_cm"] != pixels["object_x_cm"]


def test_a_locators_place_error_on_held_out_takes_is_logged(demos: Path, tmp_path: Path) -> None:
    torch.set_num_threads(1)
    from r2s2r.policy.config import load_policy_cfg

    preset = tmp_path / "tiny_locator.yaml"
    load_policy_cfg("tiny").replace(locator_weight=0.01, augment_shift=0.0).save(preset)
    run = tmp_path / "run"
    Trainer(_cfg(demos, tmp_path, preset=str(preset), val_episodes=1, val_every=2), run).fit()
    places = [r["val_place_cm"] for r in read_metrics(run) if r["val_loss"] is not None]
    # Two measurements, each a finite error in cm (the held-out take's frames before its
    # grasp have a place); a locator at random starts metres from the belt, not micrometres.
    assert len(places) == 2 and all(np.isfinite(p) and p > 0.01 for p in places), places
