"""Memorization against generalization: a run's training instances are named from its
datasets, a "train" protocol meets exactly them, an "unseen" one none of them, and eval.json
says which."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from r2s2r.eval.instances import InstanceError, instance_protocol, training_instances
from r2s2r.eval.protocol import ProtocolSpec, trial_list
from r2s2r.eval.trials import EvalInfo, PolicyInfo, TrialLogError
from r2s2r.policy import checkpoint as ckpt


def _run(tmp_path: Path, datasets: list[Path]) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    records = [{"path": str(p), "domain": "real", "fingerprint": "x"} for p in datasets]
    (run / ckpt.CONFIG_FILE).write_text(json.dumps({"datasets": records}))
    return run


def test_training_instances_are_each_takes_first_episode(
    recorded_demos: Path, tmp_path: Path
) -> None:
    # The fixture's three episodes are one take at seed 1: one named instance.
    assert training_instances(_run(tmp_path, [recorded_demos])) == [1]
    with pytest.raises(InstanceError, match="not a training run"):
        training_instances(tmp_path / "nothing")


def test_train_and_unseen_protocols_meet_and_avoid_the_training_instances() -> None:
    trained = [11, 22, 33]
    base = ProtocolSpec(name="nominal6", trials={"nominal": 6})
    train = instance_protocol("train", base, 0, trained, None)
    assert [t.seed for t in trial_list(train)] == trained
    assert [t.seed for t in trial_list(instance_protocol("train", base, 0, trained, 2))] == [11, 22]
    with pytest.raises(InstanceError, match="trained on 3 named instances"):
        instance_protocol("train", base, 0, trained, 4)
    # A protocol whose list holds two training instances gets them redrawn, the rest kept.
    listed = base.replace(seeds=(5, 11, 6, 33, 7, 8))
    unseen = [t.seed for t in trial_list(instance_protocol("unseen", listed, 3, trained, None))]
    assert unseen[0] == 5 and unseen[2] == 6 and unseen[4:] == [7, 8]
    assert not set(unseen) & set(trained) and len(set(unseen)) == 6
    # Without a collision the drawn list is the protocol's own.
    drawn = [t.seed for t in trial_list(base, 9)]
    assert [t.seed for t in trial_list(instance_protocol("unseen", base, 9, [1], None))] == drawn


def test_eval_json_says_which_instances_and_refuses_others() -> None:
    info = EvalInfo("p", 0, "twin", 3, PolicyInfo("run", "learned"), instances="unseen")
    assert EvalInfo.from_json(info.to_json()).instances == "unseen"
    with pytest.raises(TrialLogError, match="expected one of train, unseen"):
        EvalInfo.from_json({**info.to_json(), "instances": "some"})
