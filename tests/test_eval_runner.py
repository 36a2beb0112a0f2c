"""The evaluation runner on real twin episodes: resuming, the trial list every policy meets,
recorded trials and their videos, a policy server, and bad input (clear errors, nothing
logged lost)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from r2s2r.data import Dataset
from r2s2r.data.record import QueuedKeys
from r2s2r.eval.hardware import KeyJudge, trial_draws
from r2s2r.eval.policies import GivenSource, PlannedSource, ScriptedSource, open_policy
from r2s2r.eval.protocol import ProtocolSpec, load_protocol, select_trials, trial_list
from r2s2r.eval.runner import EvalError, EvalResult, EvalSetup, TwinRigs, evaluate
from r2s2r.eval.trials import PolicyInfo, TrialLogError, read_trials
from r2s2r.policy.base import PolicyError

# Torch and its vision models are imported before any twin renders: importing torchvision
# after MuJoCo's EGL renderer has run crashes the process on this machine.
from r2s2r.policy.learned import LearnedPolicy  # noqa: F401
from r2s2r.policy.plan import PlanPolicy
from r2s2r.policy.train import TrainCfg, Trainer
from r2s2r.rig.twin import TwinRig
from r2s2r.runtime import EpisodeLog, EpisodeStart, RuntimeCfg
from r2s2r.sim.contract import ContractError

SMOKE = load_protocol("smoke")
ROOT = Path(__file__).resolve().parents[1]


def run(
    out: Path,
    source: Any,
    trials: int = 3,
    max_s: float = 10.0,
    video: str = "none",
    protocol: ProtocolSpec = SMOKE,
    seed: int = 0,
    stop: Any = None,
    progress: Any = None,
    cell: int | None = None,
    **runtime: Any,
) -> EvalResult:
    setup = EvalSetup(
        out=out,
        protocol=protocol,
        protocol_seed=seed,
        trials=trials,
        runtime=RuntimeCfg(max_s=max_s, **runtime),
        video=video,
        cell=cell,
    )
    rigs = TwinRigs(64, cell=cell)
    return evaluate(setup, source, rigs, progress=progress, should_stop=stop)


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (path / "trials.jsonl").read_text().splitlines()]


def without_timing(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # The median inference latency is a wall-clock time: the one field a rerun may change.
    return [{k: v for k, v in r.items() if k != "infer_ms_p50"} for r in records]


def snapshot(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in path.iterdir() if p.is_file()}


@pytest.fixture(scope="module")
def one_trial(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An evaluation directory with one short trial of the scripted operator."""
    out = tmp_path_factory.mktemp("eval") / "one"
    result = run(out, ScriptedSource(), trials=1, max_s=0.2)
    assert result.ran == 1 and result.finished
    return out


def copy(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / src.name
    shutil.copytree(src, dst)
    return dst


def test_a_resumed_evaluation_logs_what_an_uninterrupted_one_does(tmp_path: Path) -> None:
    whole = run(tmp_path / "whole", ScriptedSource())
    assert whole.ran == 3 and whole.finished and not whole.cancelled
    want = lines(tmp_path / "whole")
    assert [r["trial"] for r in want] == [0, 1, 2]
    assert [(r["trial"], r["seed"], r["condition"]) for r in want] == [
        (t.index, t.seed, t.condition) for t in trial_list(SMOKE, 0)[:3]
    ]
    # The scripted operator sorts the nominal trial (the twin judges from its truth).
    assert want[0]["outcome"] == "sorted" and want[0]["ended_by"] == "verdict"

    # Stopped in the middle of the second trial: the first stays logged, the second is dropped.
    out = tmp_path / "resumed"
    seen = {"done": 0, "polls": 0}

    def progress(done: int, total: int, successes: int, last: Any) -> None:
        seen["done"] = done

    def stop() -> bool:
        if seen["done"] >= 1:
            seen["polls"] += 1
        return seen["polls"] > 100

    first = run(out, ScriptedSource(), stop=stop, progress=progress)
    assert first.cancelled and first.ran == 1 and not first.finished
    assert without_timing(lines(out)) == without_timing(want[:1])
    # A crash in the middle of writing a line leaves a torn tail; it is ignored and cut.
    with open(out / "trials.jsonl", "a") as f:
        f.write('{"trial": 1, "seed": 56')
    rest = run(out, ScriptedSource())
    assert rest.ran == 2 and rest.finished and rest.successes == whole.successes
    assert without_timing(lines(out)) == without_timing(want)
    # A finished evaluation runs nothing more and changes nothing.
    before = snapshot(out)
    again = run(out, ScriptedSource())
    assert again.ran == 0 and again.finished and snapshot(out) == before


def test_every_policy_meets_the_same_trials(tmp_path: Path, one_trial: Path) -> None:
    planned = run(tmp_path / "planned", PlannedSource(), trials=2, max_s=0.2)
    scripted = run(tmp_path / "scripted", ScriptedSource(), trials=2, max_s=0.2)
    a, b = lines(tmp_path / "planned"), lines(tmp_path / "scripted")
    key = ("trial", "seed", "condition", "object", "belt_speed")
    assert [[r[k] for k in key] for r in a] == [[r[k] for k in key] for r in b]
    assert [r["seed"] for r in a] == [t.seed for t in select_trials(trial_list(SMOKE, 0), 2)]
    assert planned.info.policy.kind == "planned" and scripted.info.policy.kind == "scripted"
    assert read_trials(tmp_path / "planned").info.trials_planned == 2
    # Extending a shorter run continues its list: its trials are the longer run's first ones.
    longer = run(copy(one_trial, tmp_path), ScriptedSource(), trials=2, max_s=0.2)
    assert longer.ran == 1 and [r.trial for r in longer.records] == [0, 1]
    assert read_trials(tmp_path / one_trial.name).info.trials_planned == 2
    # A shorter run than the directory plans is refused (its later trials would not count).
    with pytest.raises(EvalError, match="plans 2 trials; continue it with --trials 2 or more"):
        run(tmp_path / one_trial.name, ScriptedSource(), trials=1, max_s=0.2)


def test_recorded_trials_have_their_videos_and_a_lost_line_is_recovered(tmp_path: Path) -> None:
    out = tmp_path / "video"
    result = run(out, ScriptedSource(), max_s=0.3, video="2")
    records = lines(out)
    # Every second trial is recorded (indices 0 and 2): the head view of a scripted policy.
    assert [r["video"] is not None for r in records] == [True, False, True]
    for r in records:
        if r["video"]:
            assert (out / r["video"]).is_file() and "observation.images.head" in r["video"]
    ds = Dataset(out / "rollouts")
    assert [(e["trial"], e["condition"], e["seed"]) for e in ds.episodes] == [
        (r["trial"], r["condition"], r["seed"]) for r in records if r["video"]
    ]
    assert [e["length"] for e in ds.episodes] == [15, 15]
    # Each trial's clip is a file of its own (the rollouts keep one file per episode).
    clips = [r["video"] for r in records if r["video"]]
    assert len(set(clips)) == 2 and [
        ds.video_file(i, "observation.images.head") for i in (0, 1)
    ] == [out / c for c in clips]
    assert (out / "rollouts" / "deploy" / "episode_000001.json").is_file()
    assert result.ran == 3
    # A crash between saving trial 2's recording and logging it: the rerun logs it from the
    # recording (the same line) and records nothing twice.
    text = (out / "trials.jsonl").read_text().splitlines(keepends=True)
    (out / "trials.jsonl").write_text("".join(text[:2]))
    again = run(out, ScriptedSource(), max_s=0.3, video="2")
    assert again.ran == 0 and again.finished
    assert lines(out) == records
    assert Dataset(out / "rollouts").num_episodes == 2


def one_arm_plan() -> PlanPolicy:
    """A plan for a robot with one arm: its actions and state do not fit the bimanual twin."""
    emb = TwinRig(seed=0).embodiment
    one = dataclasses.replace(emb, sides=("left",), tcp_sites=emb.tcp_sites[:1])
    return PlanPolicy(np.zeros((10, one.action_dim("tcp"))), embodiment=one)


def test_a_policy_that_does_not_fit_the_rig_fails_before_anything_is_written(
    tmp_path: Path, one_trial: Path
) -> None:
    source = GivenSource(one_arm_plan(), PolicyInfo(name="one arm", kind="planned"))
    out = tmp_path / "new"
    with pytest.raises(ContractError, match=r"actions have 27 entries, this rig's 54") as err:
        run(out, source, trials=1, max_s=0.2)
    assert "reads 34 state entries, this rig gives 68" in str(err.value)
    assert not out.exists()
    # In a directory with logged trials (of a policy under the same name): refused, nothing lost.
    existing = copy(one_trial, tmp_path)
    before = snapshot(existing)
    with pytest.raises(ContractError):
        run(existing, GivenSource(one_arm_plan(), ScriptedSource.info), trials=2, max_s=0.2)
    assert snapshot(existing) == before


def test_a_directory_of_another_evaluation_is_refused_and_left_alone(
    tmp_path: Path, one_trial: Path
) -> None:
    existing = copy(one_trial, tmp_path)
    before = snapshot(existing)
    cases = [
        (dict(protocol=load_protocol("paper")), "evaluates protocol 'smoke', not 'paper'"),
        (dict(seed=1), "evaluates protocol_seed 0, not 1"),
        (dict(execution="sync"), '"execution": "rtc"'),
        (dict(cell=3), "evaluates cell None, not 3"),
    ]
    for options, message in cases:
        with pytest.raises(EvalError, match=message):
            run(existing, ScriptedSource(), trials=1, max_s=0.2, **options)
    with pytest.raises(EvalError, match=r"evaluates policy .*\"kind\": \"scripted\""):
        run(existing, PlannedSource(), trials=1, max_s=0.2)
    assert snapshot(existing) == before
    # A line of another trial list, and a line that is not JSON.
    record = lines(existing)[0]
    (existing / "trials.jsonl").write_text(json.dumps({**record, "seed": 5}) + "\n")
    with pytest.raises(EvalError, match=r"trials.jsonl:1: trial 0 is nominal/seed 5, but"):
        run(existing, ScriptedSource(), trials=1, max_s=0.2)
    (existing / "trials.jsonl").write_text("not json\n" + json.dumps(record) + "\n")
    with pytest.raises(TrialLogError, match=r"trials.jsonl:1: not valid JSON"):
        run(existing, ScriptedSource(), trials=1, max_s=0.2)
    # A folder that holds something else.
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(EvalError, match="not an evaluation directory"):
        run(other, ScriptedSource(), trials=1, max_s=0.2)
    assert (other / "notes.txt").read_text() == "mine"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_unreachable_server_fails_clearly_and_loses_nothing(
    tmp_path: Path, one_trial: Path
) -> None:
    from r2s2r.app.evaluate import EvalRequest
    from r2s2r.app.evaluate import evaluate as app_evaluate

    port = free_port()
    with pytest.raises(PolicyError, match=rf"--server 127.0.0.1:{port}: cannot reach"):
        open_policy(server=f"127.0.0.1:{port}")
    with pytest.raises(PolicyError, match="expected HOST:PORT"):
        open_policy(server="localhost")
    existing = copy(one_trial, tmp_path)
    before = snapshot(existing)
    request = EvalRequest(out=existing, server=f"127.0.0.1:{port}", protocol="smoke", trials=1)
    with pytest.raises(PolicyError, match="cannot reach the policy server"):
        app_evaluate(request)
    assert snapshot(existing) == before


def test_a_served_policy_runs_through_the_same_loop(tmp_path: Path) -> None:
    from r2s2r.policy.serve import PolicyServer

    # A plan that holds the arms at home, served over a real socket: the runtime's
    # observations reach the server as requests in the dataset's form (it checks them).
    twin = TwinRig(seed=0)
    home = np.concatenate(
        [np.concatenate([twin.arms[s].state().tcp_pose, np.zeros(20)]) for s in ("left", "right")]
    )
    hold = PlanPolicy(np.tile(home, (200, 1)), horizon=8, embodiment=twin.embodiment)
    with PolicyServer(hold, port=0) as server:
        source = open_policy(server=f"127.0.0.1:{server.port}")
        try:
            result = run(tmp_path / "served", source, trials=2, max_s=0.5)
        finally:
            source.close()
    assert result.info.policy.kind == "remote" and result.ran == 2
    for r in result.records:
        assert (r.outcome, r.ended_by, r.steps) == ("timeout", "timeout", 25)
        assert r.infer_ms_p50 is not None and r.infer_ms_p50 > 0
    # A server that goes away: the trial it was needed for is not logged as a failure of
    # the policy; the evaluation stops with the reason, and the trials before it stay.
    with PolicyServer(hold, port=0) as server:
        source = open_policy(server=f"127.0.0.1:{server.port}")

        def progress(done: int, total: int, successes: int, last: Any) -> None:
            if done == 1:
                server.close()

        with pytest.raises(EvalError, match="trial 1: the policy server went away"):
            run(tmp_path / "gone", source, trials=2, max_s=0.5, progress=progress)
        source.close()
    assert [r["trial"] for r in lines(tmp_path / "gone")] == [0]
    # ... also in the middle of a trial (the control loop sees the inference fail).
    with PolicyServer(hold, port=0) as server:
        source = open_policy(server=f"127.0.0.1:{server.port}")
        polls = [0]

        def close_soon() -> bool:
            polls[0] += 1
            if polls[0] == 5:
                server.close()
            return False

        with pytest.raises(EvalError, match="trial 0: the policy server went away"):
            run(tmp_path / "gone2", source, trials=1, max_s=0.5, stop=close_soon)
        source.close()
    assert read_trials(tmp_path / "gone2").records == ()


def test_the_command_line_and_the_entry_script(tmp_path: Path) -> None:
    from r2s2r.cli import app

    out = tmp_path / "cli"
    args = ["eval", "--policy", "scripted", "--protocol", "smoke", "--trials", "1"]
    args += ["--video", "none", "--max-seconds", "0.2", "--out", str(out)]
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output[result.output.index("{") :])
    assert summary["trials_done"] == 1 and summary["table"]["nominal"]["trials"] == 1
    # Another protocol in the same folder: refused with the reason, exit code 2.
    bad = subprocess.run(
        [sys.executable, str(ROOT / "tasks" / "evaluate.py"), "--headless", *args[1:4]]
        + ["paper", "--trials", "1", "--video", "none", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(ROOT / "source"), "MUJOCO_GL": "egl", "PATH": "/usr/bin"},
    )
    assert bad.returncode == 2, bad.stderr
    assert "ignoring Isaac Lab launcher flags ['--headless']" in bad.stdout
    assert "evaluates protocol 'smoke', not 'paper'" in bad.stderr


def test_the_operators_keys_judge_a_trial_on_the_real_cell(task: Any) -> None:
    keys = QueuedKeys()
    judge = KeyJudge(keys)
    keys.push("w")
    judge.begin()  # A key pressed before the trial does not count.
    assert not judge.pressed()
    keys.push("x")
    keys.push("d")
    assert judge.pressed()
    start = EpisodeStart("red_block", "left", 0.07, "sort it", {})
    episode = EpisodeLog(start, ended_by="stopped", outcome="timeout")
    assert judge.verdict(episode) == ("dropped", False, "key:d")
    # Out of time: the operator is asked; t says it timed out.
    keys.push("t")
    assert judge.verdict(EpisodeLog(start, ended_by="timeout")) == (
        "timeout",
        False,
        "timeout, key:t",
    )
    # A trial's object and speed on the cell follow its seed and condition.
    fast = task.replace(belt=task.belt.replace(fixed_speed=task.belt.fast_speed))
    name, speed = trial_draws(fast, 11)
    assert speed == task.belt.fast_speed and (name, speed) == trial_draws(fast, 11)
    assert name in [o.name for o in task.objects]


def tiny_run(demos: Path, run: Path) -> None:
    """A run of the tiny policy trained one step on ``demos``: a learned policy to evaluate."""
    options = {"preset": "tiny", "real": demos, "steps": 1, "batch_size": 2}
    options |= {"workers": 0, "cache_dir": run.parent / "cache", "stats_windows": 200}
    Trainer(TrainCfg.from_dict(options), run).fit()


def test_a_trained_run_is_evaluated_with_what_its_datasets_say(
    recorded_demos: Path, tmp_path: Path
) -> None:
    from r2s2r.data import DatasetCfg, DatasetWriter
    from r2s2r.eval.policies import run_info, sim_levels

    tiny_run(recorded_demos, tmp_path / "run")
    source = open_policy(tmp_path / "run", device="cpu")
    result = run(tmp_path / "eval", source, 1, max_s=0.3, video="all")
    policy = read_trials(tmp_path / "eval").info.policy
    assert (policy.kind, policy.name, policy.real_only) == ("learned", "run", True)
    assert policy.run == str((tmp_path / "run").resolve()) and policy.world is None
    (r,) = result.records
    assert (r.steps, r.ended_by) == (15, "timeout") and r.infer_ms_p50 is not None
    # The policy's own views are recorded.
    rollouts = Dataset(tmp_path / "eval" / "rollouts")
    assert sorted(c.name for c in rollouts.cameras) == ["head", "left_wrist", "right_wrist"]
    # Served, the same policy runs the same trial: its requests reach the server in the
    # dataset's form, and the executed actions are the in-process ones.
    from r2s2r.policy.serve import PolicyServer

    with PolicyServer(LearnedPolicy.load(tmp_path / "run", device="cpu"), port=0) as server:
        remote = open_policy(server=f"127.0.0.1:{server.port}")
        try:
            run(tmp_path / "served", remote, 1, max_s=0.3, video="all")
        finally:
            remote.close()
    served = Dataset(tmp_path / "served" / "rollouts")
    ours, theirs = rollouts.episode_arrays(0), served.episode_arrays(0)
    np.testing.assert_allclose(theirs["action"], ours["action"], atol=1e-5)
    served_lines, our_lines = lines(tmp_path / "served"), lines(tmp_path / "eval")
    # The actions agree to 1e-5, so the nearest the hands came agrees to about that.
    distances = [[r.pop("min_hand_distance_m") for r in x] for x in (served_lines, our_lines)]
    assert distances[0] == pytest.approx(distances[1], abs=1e-5)
    assert without_timing(served_lines) == without_timing(our_lines)
    # Co-trained on a simulated dataset: its episodes name the grounding levels.
    sim = tmp_path / "sim"
    emb = TwinRig(seed=0).embodiment
    with DatasetWriter(sim, DatasetCfg(cameras=(), embodiment=emb)) as writer:
        for _ in range(2):
            for _ in range(3):
                writer.add_frame({}, np.zeros(emb.state_dim), np.zeros(emb.action_dim("tcp")))
            writer.save_episode("sort", True, {"world": "grounded", "behavior": "adapted"})
    assert sim_levels(sim) == ("grounded", "adapted")
    assert sim_levels(recorded_demos) == (None, None)  # Teleoperated twin takes.
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    config["datasets"].append({"path": str(sim), "domain": "sim1", "fingerprint": ""})
    (tmp_path / "run" / "config.json").write_text(json.dumps(config))
    info = run_info(tmp_path / "run")
    assert (info.real_only, info.world, info.behavior) == (False, "grounded", "adapted")


def test_a_noise_seed_gives_each_trial_its_own_draw_and_is_logged(
    recorded_demos: Path, tmp_path: Path
) -> None:
    from r2s2r.eval.policies import trial_noise_seed

    tiny_run(recorded_demos, tmp_path / "run")
    # Two trials of one instance: only the policy's noise can tell them apart.
    twice = ProtocolSpec(name="twice", trials={"nominal": 2}, seeds=(1, 1))

    def actions(out: Path, noise_seed: int | None) -> list[np.ndarray]:
        source = open_policy(tmp_path / "run", device="cpu", noise_seed=noise_seed)
        run(out, source, 2, max_s=0.3, video="all", protocol=twice)
        rollouts = Dataset(out / "rollouts")
        return [rollouts.episode_arrays(k)["action"] for k in range(2)]

    fixed = actions(tmp_path / "fixed", None)
    np.testing.assert_array_equal(fixed[0], fixed[1])
    drawn = actions(tmp_path / "drawn", 5)
    assert np.abs(drawn[0] - drawn[1]).max() > 1e-4  # Each trial its own draw.
    assert read_trials(tmp_path / "drawn").info.policy.noise_seed == 5
    assert read_trials(tmp_path / "fixed").info.policy.noise_seed is None
    assert trial_noise_seed(5, 0) == trial_noise_seed(5, 0) != trial_noise_seed(5, 1)
    # A rerun with another noise seed would not continue the same evaluation.
    before = snapshot(tmp_path / "drawn")
    source = open_policy(tmp_path / "run", device="cpu", noise_seed=6)
    with pytest.raises(EvalError, match="policy"):
        run(tmp_path / "drawn", source, 2, max_s=0.3, video="all", protocol=twice)
    assert snapshot(tmp_path / "drawn") == before
    # Only a learned policy draws noise here.
    with pytest.raises(PolicyError, match="--noise-seed 3.*--policy scripted"):
        open_policy("scripted", noise_seed=3)
    with pytest.raises(TrialLogError, match="noise_seed is 3 for a scripted policy"):
        PolicyInfo(name="scripted", kind="scripted", noise_seed=3)


def test_a_trial_on_the_real_cell_is_set_up_and_judged_by_the_operator(tmp_path: Path) -> None:
    from r2s2r.eval.hardware import HardwareRigs
    from r2s2r.rig.hardware import HardwareRig
    from r2s2r.rig.hardware.drivers.manual import ManualConveyor, OperatorPresenter
    from r2s2r.spec.worlds import load_task, load_world

    # A HardwareRig over the twin's arms and hands (paced to the wall clock, judged by no
    # truth): the operator answers every question with Enter and judges by key, trial 0
    # "wrong bin" while it runs, trial 1 "timeout" once its time is up.
    twin = TwinRig(seed=0)
    keys = QueuedKeys()
    asked: list[str] = []
    plan = {"Trial 0": ("w", 0.3), "Trial 1": ("t", 1.2)}

    def prompt(question: str) -> str:
        asked.append(question)
        for start, (key, after) in plan.items():
            if question.startswith(start):
                threading.Timer(after, keys.push, args=(key,)).start()
        return ""

    names = [o.name for o in twin.task.all_objects]
    presenter = OperatorPresenter(names, prompt)
    cell = HardwareRig(
        dict(twin.arms), dict(twin.hands), {}, ManualConveyor(prompt), presenter, twin.embodiment
    )
    rigs = HardwareRigs(cell, load_task("pick_sort"), load_world("nominal"), prompt)
    home = np.concatenate(
        [np.concatenate([twin.arms[s].state().tcp_pose, np.zeros(20)]) for s in ("left", "right")]
    )
    hold = PlanPolicy(np.tile(home, (200, 1)), horizon=8, embodiment=twin.embodiment)
    setup = EvalSetup(
        out=tmp_path / "cell",
        protocol=SMOKE,
        trials=2,
        rig="hardware",
        runtime=RuntimeCfg(max_s=0.8),
        video="none",
    )
    try:
        result = evaluate(
            setup, GivenSource(hold, PolicyInfo("hold", "planned")), rigs, KeyJudge(keys)
        )
    finally:
        rigs.close()
    first, second = result.records
    assert (first.outcome, first.success, first.ended_by) == ("wrong_bin", False, "key:w")
    assert 0 < first.steps < 40
    assert (second.outcome, second.ended_by, second.steps) == ("timeout", "timeout, key:t", 40)
    trials = trial_list(SMOKE, 0)
    assert [r.condition for r in result.records] == [t.condition for t in trials[:2]]
    # The operator was asked to set each trial up, then for its belt speed and its object.
    assert asked[0].startswith("Trial 0 (nominal)") and "Set the belt to" in asked[1]
    assert f"Place the {first.object}" in asked[2]
    assert "a novel object" in asked[3] and first.belt_speed > 0
    assert second.object in [o.name for o in twin.task.novel_objects]


def test_ctrl_c_drops_the_trial_in_progress_and_keeps_the_log(tmp_path: Path) -> None:
    out = tmp_path / "interrupted"
    cmd = [sys.executable, "-m", "r2s2r", "eval", "--policy", "scripted", "--protocol", "smoke"]
    cmd += ["--trials", "2", "--video", "none", "--max-seconds", "10", "--out", str(out)]
    env = {"PYTHONPATH": str(ROOT / "source"), "MUJOCO_GL": "egl", "PATH": "/usr/bin"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 120
    while not (out / "trials.jsonl").is_file() and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    assert "stopping: the trial in progress is dropped" in stdout
    assert "1 of 2 trials (stopped; rerun to continue)" in stdout
    assert [r["trial"] for r in lines(out)] == [0]


def test_the_operators_terminal_gives_keys_and_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    from r2s2r.cli.eval import LineKeys

    read, write = os.pipe()
    monkeypatch.setattr(sys, "stdin", os.fdopen(read))
    keys = LineKeys()
    os.write(write, b"\nSorted\n")
    deadline = time.monotonic() + 10
    key = None
    while key is None and time.monotonic() < deadline:
        key = keys.poll()
        time.sleep(0.01)
    assert key == "s"
    # A line typed before a question does not answer it.
    os.write(write, b"stale\n")
    time.sleep(0.2)
    threading.Timer(0.2, os.write, args=(write, b"0.12\n")).start()
    assert keys.prompt("speed? ") == "0.12"
    os.close(write)
