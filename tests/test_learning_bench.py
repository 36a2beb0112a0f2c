"""The learning benchmark: its demonstration and trial instances never overlap, and a small
run records, trains and evaluates end to end on the twin, continues where it stopped, and
refuses a folder of other settings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from r2s2r.app.jobs import RequestError
from r2s2r.app.learning import LearningRequest, run, split_instances
from r2s2r.data import Dataset

PRESET = "tiny_closed_loop"


@pytest.mark.parametrize("seed", [0, 1, 7, 12345])
def test_demo_and_trial_instances_never_overlap(seed: int) -> None:
    demos, trials = split_instances(seed, 104, 50)
    assert len(set(demos)) == 104 and len(set(trials)) == 50
    assert not set(demos) & set(trials)
    # A twin seeded with the cell's seed presents instance ``seed`` first: neither list has it.
    assert seed not in demos and seed not in trials
    assert split_instances(seed, 104, 50) == (demos, trials)
    # Fewer demos are a prefix of more: a 50-demo run's instances are a 100-demo run's first.
    assert split_instances(seed, 54, 50)[0] == demos[:54]


def test_other_seeds_draw_other_instances() -> None:
    a, b = split_instances(0, 20, 20), split_instances(1, 20, 20)
    assert not set(a[0]) & set(b[0]) and not set(a[1]) & set(b[1])


@pytest.mark.slow
def test_a_small_benchmark_runs_end_to_end_and_continues(tmp_path: Path) -> None:
    request = LearningRequest(
        out=tmp_path / "bench",
        demos=2,
        val_demos=1,
        trials=2,
        seed=3,
        preset=PRESET,
        steps=4,
        batch_size=4,
        warmup=1,
        max_seconds=2.0,
        workers=0,
        cache_dir=tmp_path / "cache",
        curve_every=2,
        curve_trials=1,
    )
    summary = run(request)
    # The learning curve: the checkpoints of steps 2 and 4, each on the first unseen trial.
    assert [(p["step"], p["trials"]) for p in summary["curve"]] == [(2, 1), (4, 1)]
    assert (tmp_path / "bench" / "curve.png").is_file()
    assert summary["trials"] == 2 and summary["finished"]
    assert summary["funnel"] is not None and set(summary["funnel"]) >= {"reached", "sorted"}
    assert summary["val_loss"] is not None and summary["train_samples_per_s"] > 0
    saved = json.loads((tmp_path / "bench" / "learning.json").read_text())
    assert saved["sorted"] == summary["sorted"]
    # Each demonstration was recorded alone at its instance's seed, in the benchmark's cell.
    demos, trials = split_instances(3, 3, 2)
    ds = Dataset(tmp_path / "bench" / "demos")
    assert [int(e["seed"]) for e in ds.episodes] == demos
    eval_seeds = [
        json.loads(line)["seed"]
        for line in (tmp_path / "bench" / "eval" / "trials.jsonl").read_text().splitlines()
    ]
    assert eval_seeds == trials
    # Rerun: nothing is recorded or trained again.
    again = run(request)
    assert Dataset(tmp_path / "bench" / "demos").num_episodes == 3
    assert again["sorted"] == summary["sorted"]
    with pytest.raises(RequestError, match="other settings"):
        run(request.replace(trials=3))
