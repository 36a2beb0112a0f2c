"""Held-out validation during training: the split of the real episodes (validation never
overlaps training, failed takes left out on request), windows drawn only from the chosen
episodes, and the validation figures logged without changing what the run learns."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from r2s2r.data import Dataset
from r2s2r.policy import checkpoint as ckpt
from r2s2r.policy.base import PolicyError
from r2s2r.policy.train import TrainCfg, Trainer, read_metrics, real_split
from r2s2r.policy.windows import WindowDataset


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


def test_validation_episodes_never_overlap_training(recorded_demos: Path, tmp_path: Path) -> None:
    ds = Dataset(recorded_demos)
    train, val = real_split(_cfg(recorded_demos, tmp_path, val_episodes=1), ds)
    assert (train, val) == ([0, 1], [2])
    train, val = real_split(_cfg(recorded_demos, tmp_path, val_episodes=1, real_episodes=2), ds)
    assert (train, val) == ([0], [1])
    with pytest.raises(PolicyError, match="leaves no episode to train on"):
        real_split(_cfg(recorded_demos, tmp_path, val_episodes=3), ds)


def test_only_successful_keeps_the_successful_takes(recorded_demos: Path, tmp_path: Path) -> None:
    ds = Dataset(recorded_demos)
    successful = [e for e in range(ds.num_episodes) if ds.episodes[e]["success"]]
    cfg = _cfg(recorded_demos, tmp_path, only_successful=True)
    if successful:
        assert real_split(cfg, ds)[0] == successful
    else:
        # The fixture's takes are 1.5 s long: none sorts its object.
        with pytest.raises(PolicyError, match="no successful episode"):
            real_split(cfg, ds)


def test_windows_come_only_from_the_chosen_episodes(recorded_demos: Path, tmp_path: Path) -> None:
    data = WindowDataset(recorded_demos, 64, cache_dir=tmp_path / "cache", episodes=[0, 2])
    ds = Dataset(recorded_demos)
    lengths = [int(e["length"]) for e in ds.episodes]
    assert len(data) == lengths[0] + lengths[2]
    seen = {data[i]["episode_index"] for i in range(0, len(data), 7)}
    assert seen == {0, 2}
    # The first sample of the second chosen episode is that episode's first frame.
    sample = data[lengths[0]]
    assert (sample["episode_index"], sample["frame_index"]) == (2, 0)
    assert data.states().shape == (len(data), ds.contract.state_dim)
    with pytest.raises(PolicyError, match="expected a non-empty set of positions"):
        WindowDataset(recorded_demos, 64, cache_dir=tmp_path / "cache", episodes=[5])


def test_validation_is_logged_and_changes_nothing_the_run_learns(
    recorded_demos: Path, tmp_path: Path
) -> None:
    torch.set_num_threads(1)
    with_val, without = tmp_path / "val", tmp_path / "plain"
    cfg = _cfg(recorded_demos, tmp_path, val_episodes=1, val_every=2, val_windows=8)
    trainer = Trainer(cfg, with_val)
    trainer.fit()
    rows = read_metrics(with_val)
    logged = [(r["step"], r["val_loss"] is not None) for r in rows]
    assert logged == [(1, False), (2, True), (3, False), (4, True)]
    val_rows = [r for r in rows if r["val_loss"] is not None]
    assert all(np.isfinite(r["val_loss"]) and r["val_pos_mm"] > 0 for r in val_rows)
    # The same weights measure the same: the draws are fixed.
    assert trainer._validate()[:2] == trainer._validate()[:2]
    # Training on the same episodes without validation gives the same weights, bit for bit.
    Trainer(_cfg(recorded_demos, tmp_path, real_episodes=2), without).fit()
    a, b = ckpt.load_checkpoint(with_val), ckpt.load_checkpoint(without)
    for name, value in a.model.items():
        assert torch.equal(value, b.model[name]), name
    # A resume must hold the split it started with.
    changed = _cfg(recorded_demos, tmp_path, val_episodes=2, steps=6)
    with pytest.raises(PolicyError, match="val_episodes"):
        Trainer(changed, with_val, resume=True)
