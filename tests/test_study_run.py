"""The whole study, run as a user runs it (``r2s2r study``, its own process), scaled down
(``tests/presets/study_micro.yaml``): it ends with a report that has every policy and
condition; killed (SIGKILL) in each stage and restarted, it ends with what an uninterrupted
run made; with a changed setting it makes again exactly the stages that setting reaches."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors.numpy import load_file

from r2s2r.data import Dataset
from r2s2r.study.config import load_study

# One worker runs the module (make test-slow: --dist loadgroup), so the whole study is made once.
pytestmark = [pytest.mark.long, pytest.mark.timeout(1500), pytest.mark.xdist_group("study")]

MICRO = Path(__file__).parent / "presets" / "study_micro.yaml"
# Trial fields that are wall-clock times, not outcomes.
CLOCK = {"infer_ms_p50", "wall_s", "seconds", "started", "finished"}


def study_cmd(out: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "r2s2r",
        "study",
        "--preset",
        str(MICRO),
        "--out",
        str(out),
        *extra,
    ]


def run_study(out: Path, *extra: str) -> str:
    env = dict(os.environ, MUJOCO_GL=os.environ.get("MUJOCO_GL", "egl"))
    done = subprocess.run(study_cmd(out, *extra), capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout


# Session-scoped, in a fixed folder of the worker's: under --dist loadgroup other modules'
# tests run between this module's on its worker, and pytest-xdist can tear a session fixture
# down between them (CI made it twice, 9 min each). Made again, the study finds its outputs up
# to date and skips every stage.
@pytest.fixture(scope="session")
def whole(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.getbasetemp() / "whole" / "study"
    run_study(out, "--json")
    return out


def ledger(out: Path) -> dict[str, Any]:
    path = out / "study.json"
    return json.loads(path.read_text()) if path.is_file() else {"stages": {}}


def test_the_study_ends_with_a_report_of_every_policy_and_condition(whole: Path) -> None:
    cfg = load_study(MICRO)
    data = json.loads((whole / "report" / "report.json").read_text())
    assert [p["label"] for p in data["policies"]] == list(cfg.policies)
    for p in data["policies"]:
        assert p["trials_logged"] == cfg.evaluation.trials
        assert set(p["table"]) >= {"nominal", "red_light", "fast_belt", "novel_objects"}
    # The 2x2 design was found from the runs' data: the effects were computed.
    assert not [n for n in data["effect_notes"] if "missing" in n]
    assert {e["kind"] for e in data["effects"]} >= {"world", "behavior"}
    assert len(data["latent"]) == len(cfg.policies)
    html = (whole / "report" / "report.html").read_text()
    assert "Table 2" in html and "grounded-planned" in html
    stages = ledger(whole)["stages"]
    assert all(e["state"] == "done" and e["seconds"] > 0 for e in stages.values())
    assert Dataset(whole / "real").num_episodes == cfg.real.episodes
    for d in cfg.generation.datasets:
        assert Dataset(whole / "sim" / d).num_episodes == cfg.generation.episodes
    # Run again: everything is up to date and nothing is made.
    again = json.loads(run_study(whole, "--json"))
    assert {s["decision"] for s in again["stages"]} == {"skip"}


def kill_when(out: Path, stage: str) -> bool:
    """Whether stage ``stage`` has come far enough to be killed part-way."""
    entry = ledger(out)["stages"].get(stage, {})
    if entry.get("state") != "running":
        return False
    kind = stage.split(":")[0]
    if kind == "record":
        return (out / "real" / "meta" / "info.json").is_file()
    if kind == "ground":
        return (out / "ground" / "capture.json").is_file()
    if kind == "train":
        return any((out / entry["out"] / "checkpoints").glob("*"))
    if kind == "eval":
        return (out / entry["out"] / "trials.jsonl").is_file()
    return True


def test_a_study_killed_in_every_stage_ends_as_an_uninterrupted_one(
    whole: Path, tmp_path: Path
) -> None:
    out = tmp_path / "study"
    targets = ["record", "ground", "generate:nominal-adapted", "train:real-only",
               "eval:real-only", "latent:real-only"]  # fmt: skip
    killed: list[str] = []
    env = dict(os.environ, MUJOCO_GL=os.environ.get("MUJOCO_GL", "egl"))
    while True:
        proc = subprocess.Popen(
            study_cmd(out), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            start_new_session=True,
        )  # fmt: skip
        while proc.poll() is None:
            target = next((t for t in targets if t not in killed), None)
            if target is not None and kill_when(out, target):
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                killed.append(target)
                break
            # A target that finished before it could be caught is passed over.
            if target is not None and ledger(out)["stages"].get(target, {}).get("state") == "done":
                killed.append(target + " (finished first)")
                targets.remove(target)
            time.sleep(0.2)
        else:
            assert proc.returncode == 0, proc.stderr.read().decode()[-4000:] if proc.stderr else ""
            break
    assert [k for k in killed if "finished" not in k][:5] == targets[:5], killed
    same_outputs(whole, out)


def same_outputs(a: Path, b: Path) -> None:
    cfg = load_study(MICRO)
    for folder in ["real", *(f"sim/{d}" for d in cfg.generation.datasets)]:
        da, db = Dataset(a / folder), Dataset(b / folder)
        assert da.num_episodes == db.num_episodes, folder
        for key in ("observation.state", "action", "timestamp"):
            if key in da.low_dim():
                assert np.array_equal(da.low_dim()[key], db.low_dim()[key]), (folder, key)
        for e in range(da.num_episodes):
            ea, eb = da.episode(e), db.episode(e)
            assert ea["success"] == eb["success"] and ea["length"] == eb["length"], (folder, e)
    assert (a / "ground" / "grounded.yaml").read_text() == (
        b / "ground" / "grounded.yaml"
    ).read_text()
    for policy in cfg.policies:
        wa = final_weights(a / "runs" / policy)
        wb = final_weights(b / "runs" / policy)
        assert wa.keys() == wb.keys()
        assert all(np.array_equal(wa[k], wb[k]) for k in wa), policy
        ta, tb = trials(a / "eval" / policy), trials(b / "eval" / policy)
        assert ta == tb, policy
    ra = json.loads((a / "report" / "report.json").read_text())
    rb = json.loads((b / "report" / "report.json").read_text())
    assert tables(ra) == tables(rb)
    assert [e["estimate"] for e in ra["effects"]] == [e["estimate"] for e in rb["effects"]]


def final_weights(run: Path) -> dict[str, np.ndarray]:
    newest = sorted((run / "checkpoints").iterdir())[-1]
    return load_file(str(newest / "model.safetensors"))


def trials(evaluation: Path) -> list[dict[str, Any]]:
    rows = [json.loads(x) for x in (evaluation / "trials.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in CLOCK} for r in rows]


def tables(report: dict[str, Any]) -> list[Any]:
    return [(p["label"], {g: (c["successes"], c["trials"]) for g, c in p["table"].items()})
            for p in report["policies"]]  # fmt: skip


def test_a_changed_setting_makes_again_exactly_the_stages_it_reaches(
    whole: Path, tmp_path: Path
) -> None:
    out = tmp_path / "study"
    shutil.copytree(whole, out)
    preset = tmp_path / "micro3.yaml"
    preset.write_text(MICRO.read_text().replace("trials: 2", "trials: 3"))
    env = dict(os.environ, MUJOCO_GL=os.environ.get("MUJOCO_GL", "egl"))
    cmd = [sys.executable, "-m", "r2s2r", "study", "--preset", str(preset), "--out", str(out),
           "--json"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    decisions = {s["stage"]: s["decision"] for s in json.loads(done.stdout)["stages"]}
    made = {name for name, d in decisions.items() if d != "skip"}
    cfg = load_study(preset)
    assert made == {f"{k}:{p}" for k in ("eval", "latent") for p in cfg.policies} | {"report"}
    for policy in cfg.policies:
        assert len(trials(out / "eval" / policy)) == 3
