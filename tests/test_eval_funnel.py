"""The trial funnel: stages judged from known readings, from a real twin episode driven by
the scripted operator, and counted in the trial log and the report; rejected chunks and the
"did not act" flag."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from r2s2r.eval.funnel import STAGES, Funnel, funnel_counts
from r2s2r.eval.policies import ScriptedSource
from r2s2r.eval.protocol import ProtocolSpec
from r2s2r.eval.report import policy_progress
from r2s2r.eval.runner import EvalSetup, TwinRigs, evaluate
from r2s2r.eval.trials import TrialLogError, TrialRecord, read_trials
from r2s2r.rig.twin import TwinRig
from r2s2r.sim.progress import ProgressProbe, ProgressReading
from r2s2r.sim.scene import build_scene
from r2s2r.spec.worlds import load_task, load_world

BELT_Z = 0.84


def reading(
    z: float = BELT_Z, distance: float = 0.5, touching: int = 0, over: bool = False
) -> ProgressReading:
    return ProgressReading(
        np.array([0.0, 0.0, z]), np.array([distance, 1.0]), np.array([touching, 0]), over
    )


@pytest.mark.parametrize(
    ("readings", "stage"),
    [
        ([reading()], "none"),
        ([reading(), reading(distance=0.05)], "reached"),
        # Touching with two parts at a distance is no grasp until the hand has reached.
        ([reading(distance=0.2, touching=2)], "none"),
        ([reading(distance=0.04, touching=1)], "reached"),
        ([reading(distance=0.04, touching=2)], "grasped"),
        # A lift needs the grasp in the same period: an object knocked up is not lifted.
        ([reading(distance=0.04, touching=2), reading(z=BELT_Z + 0.1, distance=0.04)], "grasped"),
        ([reading(), reading(z=BELT_Z + 0.05, distance=0.04, touching=3)], "lifted"),
        # Over the bin counts only after the lift.
        ([reading(distance=0.04, over=True)], "reached"),
        (
            [
                reading(),
                reading(z=BELT_Z + 0.05, distance=0.04, touching=2),
                reading(z=BELT_Z + 0.2, distance=0.3, over=True),
            ],
            "over_bin",
        ),
    ],
)
def test_stages_are_judged_in_order_from_the_readings(
    readings: list[ProgressReading], stage: str
) -> None:
    funnel = Funnel()
    for r in readings:
        funnel.update(r)
    result = funnel.result("timeout")
    assert result.stage == stage
    assert result.min_hand_distance_m == min(float(r.hand_distance_m.min()) for r in readings)


def test_a_sorted_trial_passes_every_stage_and_counts_accumulate() -> None:
    assert Funnel().result("sorted").stage == "sorted"
    assert Funnel().result("sorted").min_hand_distance_m is None
    counts = funnel_counts(["none", "reached", "lifted", "sorted"])
    assert counts == {"reached": 3, "grasped": 2, "lifted": 2, "over_bin": 1, "sorted": 1}
    assert funnel_counts(["reached", None]) is None


def test_the_twin_reads_distance_and_touch_from_its_state() -> None:
    twin = TwinRig(seed=1)
    twin.present()
    twin.step(5)
    first = twin.reveal_progress()
    # At the start the object rides the belt far upstream of both hands, touched by none.
    assert first.hand_distance_m.shape == (2,) and first.hand_distance_m.min() > 0.2
    assert first.touching.tolist() == [0, 0] and not first.over_assigned_bin
    twin.step(25)
    later = twin.reveal_progress()
    # The belt carries it along x.
    assert later.object_pos[0] > first.object_pos[0] + 0.01


def test_the_probe_tells_the_palm_and_each_finger_apart() -> None:
    scene = build_scene(load_task("pick_sort"), load_world("nominal"))
    probe = ProgressProbe(scene.model, scene.embodiment)
    for side in range(len(scene.embodiment.sides)):
        assert probe.hand_parts(side) == {0, 1, 2, 3, 4, 5}


class _Recording(TwinRigs):
    """Twin trials whose progress readings are kept, to judge them again afterwards."""

    def __init__(self) -> None:
        super().__init__(64, cell=3)
        self.readings: list[ProgressReading] = []

    def progress(self, rig: Any) -> Any:
        read = super().progress(rig)

        def keep() -> ProgressReading:
            r = read()
            self.readings.append(r)
            return r

        return keep


def test_the_scripted_operator_passes_every_stage_before_it_sorts(tmp_path: Path) -> None:
    protocol = ProtocolSpec(name="one", trials={"nominal": 1}, seeds=(5,))
    setup = EvalSetup(out=tmp_path / "ev", protocol=protocol, cell=3, video="none")
    rigs = _Recording()
    result = evaluate(setup, ScriptedSource(), rigs)
    record = result.records[0]
    assert record.outcome == "sorted" and record.stage == "sorted"
    # Both hands stay within their joint ranges: the idle one holds the open hand, not zeros
    # outside the vendor thumb's range (which the supervisor clamped every period).
    assert record.safety_events == 0
    assert record.min_hand_distance_m is not None and record.min_hand_distance_m < 0.06
    # Judged from the readings alone (as if it had not been sorted), it passed over the bin.
    funnel = Funnel()
    for r in rigs.readings:
        funnel.update(r)
    assert funnel.result("timeout").stage == "over_bin"
    line = json.loads((tmp_path / "ev" / "trials.jsonl").read_text().splitlines()[0])
    assert line["stage"] == "sorted" and line["chunks"] == line["steps"]
    assert line["rejected_chunks"] == 0
    progress = policy_progress(read_trials(tmp_path / "ev"))
    assert progress["funnel"] == dict.fromkeys(STAGES, 1) and progress["did_not_act"] == []


def _record(**fields: Any) -> dict[str, Any]:
    base = {
        "trial": 0, "seed": 1, "condition": "nominal", "object": "green_can",
        "belt_speed": 0.08, "outcome": "timeout", "success": False, "duration_s": 2.0,
        "steps": 100, "ended_by": "timeout", "safety_events": 0,
    }  # fmt: skip
    return {**base, **fields}


def test_a_policy_whose_chunks_were_all_rejected_did_not_act() -> None:
    rejected = TrialRecord.from_json(_record(chunks=5, rejected_chunks=5, stage="none"))
    assert rejected.did_not_act
    assert not TrialRecord.from_json(_record(chunks=5, rejected_chunks=4)).did_not_act
    # Logs written before chunks were counted still read, with nothing known.
    old = TrialRecord.from_json(_record())
    assert old.chunks is None and old.stage is None and not old.did_not_act


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"chunks": 3, "rejected_chunks": 4}, "more than the 3 chunks"),
        ({"chunks": 3}, "go together"),
        ({"stage": "flying"}, "expected one of none, reached"),
        ({"stage": "sorted"}, "only a sorted trial"),
        ({"min_hand_distance_m": -1.0}, "expected a distance >= 0"),
    ],
)
def test_a_malformed_funnel_field_is_named(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(TrialLogError, match=message):
        TrialRecord.from_json(_record(**fields))
