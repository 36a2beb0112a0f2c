"""Scale-out: generation attempts and evaluation trials as independent tasks, in local worker
processes or on a Ray cluster (a real local one, started here with ``ray start --head``),
give the same datasets and trial logs as one process; a task whose worker dies runs again."""

from __future__ import annotations

import contextlib
import json
import logging
import multiprocessing
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scaleout_tasks import always_die, fails, marker, square_or_die_once
from typer.testing import CliRunner

from r2s2r.app.evaluate import EvalRequest, evaluate
from r2s2r.app.jobs import RequestError
from r2s2r.behavior.generate import GenerateCfg, Generator
from r2s2r.cli import app
from r2s2r.data import Dataset
from r2s2r.eval.runner import EvalResult
from r2s2r.eval.trials import read_trials

# Torch and its vision models are imported before any twin renders: importing torchvision
# after MuJoCo's EGL renderer has run crashes the process on this machine.
from r2s2r.policy.learned import LearnedPolicy  # noqa: F401
from r2s2r.runtime import RuntimeCfg
from r2s2r.scaleout import Job, ScaleoutError, in_order, run_tasks

pytest.importorskip("ray", reason="the ray extra is not installed")
TESTS = Path(__file__).resolve().parent
RAY = Path(sys.executable).with_name("ray")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A Ray cluster of this machine (2 CPUs), started as its own head process; its address.
    Its workers import r2s2r and this module from the paths this test runs with."""
    port = _free_port()
    temp = Path(tempfile.mkdtemp(prefix="r2s2r_ray_", dir="/tmp"))
    paths = [str(TESTS), *sys.path]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    # A cluster of this machine's loopback, for this test only: no token to keep in a home
    # directory (the driver, this process, is told so too).
    auth = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    start = [str(RAY), "start", "--head", f"--port={port}", "--num-cpus=2"]
    start += ["--node-ip-address=127.0.0.1", "--include-dashboard=false"]
    start += [f"--temp-dir={temp}", "--disable-usage-stats"]
    with pytest.MonkeyPatch.context() as mp:
        for k, v in auth.items():
            mp.setenv(k, v)
        subprocess.run(start, env={**env, **auth}, check=True, capture_output=True, timeout=120)
        try:
            yield f"127.0.0.1:{port}"
        finally:
            _stop_cluster(temp)
            shutil.rmtree(temp, ignore_errors=True)


def _stop_cluster(temp: Path) -> None:
    """End this cluster's processes (each names its session folder under ``temp``) by their
    ids; ``ray stop`` would end every Ray cluster of this user on the machine."""
    if not Path("/proc").is_dir():
        subprocess.run([str(RAY), "stop", "--force"], capture_output=True, timeout=120)
        return

    def ours() -> list[int]:
        pids = []
        for d in Path("/proc").iterdir():
            if d.name.isdigit() and int(d.name) != os.getpid():
                try:
                    if str(temp).encode() in (d / "cmdline").read_bytes():
                        pids.append(int(d.name))
                except OSError:
                    continue
        return pids

    for sig, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        for pid in ours():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait_s
        while ours() and time.monotonic() < deadline:
            time.sleep(0.2)


# ------------------------------------------------------------------ the seam itself
@pytest.mark.parametrize("where", ["local", "ray"])
def test_a_task_whose_worker_dies_runs_again(
    where: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    ray = request.getfixturevalue("cluster") if where == "ray" else None
    job = Job(marker, square_or_die_once, (str(tmp_path),))
    results = list(run_tasks(job, range(6), workers=2, ray=ray))
    assert (tmp_path / "died").exists()  # Task 2 did kill its worker ...
    assert sorted(i for i, _ in results) == list(range(6))  # ... and every task came back once.
    assert {i: r for i, (r, _) in results} == {i: i * i for i in range(6)}
    assert os.getpid() not in {pid for _, (_, pid) in results}  # They ran in workers.
    ordered = list(in_order(iter(results), range(6)))
    assert [i for i, _ in ordered] == list(range(6))

    # A task's own error is not retried: it stops the run, naming the task.
    with pytest.raises(ScaleoutError, match="task 1") as err:
        list(run_tasks(Job(marker, fails, (str(tmp_path),)), range(4), workers=2, ray=ray))
    assert err.value.index == 1 and isinstance(err.value.__cause__, ValueError)
    assert "task one is broken" in str(err.value.__cause__)


def test_a_task_that_always_kills_its_worker_fails_after_its_retries(tmp_path: Path) -> None:
    job = Job(marker, always_die, (str(tmp_path),))
    with pytest.raises(ScaleoutError, match=r"task 0: its worker process died 2 times"):
        list(run_tasks(job, [0], workers=1, retries=1))


# ------------------------------------------------------------------------ generation
LOW_DIM = ("action", "observation.state", "observation.environment_state")


@pytest.fixture(scope="module")
def one_process(tmp_path_factory: pytest.TempPathFactory) -> GenerateCfg:
    """Planned episodes (no source demos), 32 px views, generated in this process."""
    out = tmp_path_factory.mktemp("gen") / "one"
    cfg = GenerateCfg(source=None, out=out, episodes=2, image_size=32, behavior="planned", seed=3)
    gen = Generator(cfg)
    gen.run()
    gen.close()
    return cfg


def _same_dataset(a: Path, b: Path) -> None:
    first, second = Dataset(a), Dataset(b)
    assert first.num_episodes == second.num_episodes == 2
    for key in LOW_DIM:
        np.testing.assert_array_equal(first.low_dim()[key], second.low_dim()[key])
    for e in range(first.num_episodes):
        ea, eb = first.episode(e), second.episode(e)
        assert (ea["seed"], ea["object_ids"]) == (eb["seed"], eb["object_ids"])


@pytest.mark.parametrize("where", ["processes", "ray"])
def test_generation_scaled_out_gives_the_same_dataset(
    where: str, one_process: GenerateCfg, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    out = tmp_path / where
    if where == "ray":  # Through the command line: r2s2r generate --ray ADDRESS.
        args = ["generate", "--behavior", "planned", "--episodes", "2", "--seed", "3"]
        args += ["--image-size", "32", "--ray", request.getfixturevalue("cluster")]
        result = CliRunner().invoke(app, [*args, "--out", str(out), "--json"])
        assert result.exit_code == 0, result.output
        summary = json.loads(result.stdout)
    else:
        gen = Generator(one_process.replace(out=out, workers=2))
        summary = gen.run()
        gen.close()
    assert summary["kept"] == 2
    _same_dataset(one_process.out, out)


# ------------------------------------------------------------------------ evaluation
def _eval(out: Path, policy: str = "scripted", **options: Any) -> EvalResult:
    request = EvalRequest(
        out=out,
        policy=policy,
        protocol="smoke",
        image_size=64,
        video="2",
        device="cpu",
        runtime=RuntimeCfg(max_s=0.3),
        **options,
    )
    return evaluate(request)


def _outcomes(out: Path) -> list[dict[str, Any]]:
    # The median inference latency is a wall-clock time: the one field a rerun may change.
    records = read_trials(out).records
    return [{k: v for k, v in r.to_json().items() if k != "infer_ms_p50"} for r in records]


@pytest.fixture(scope="module")
def sequential(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three trials of the scripted operator, one after another in this process."""
    out = tmp_path_factory.mktemp("eval") / "sequential"
    assert _eval(out, trials=3).ran == 3
    return out


def _same_rollouts(a: Path, b: Path) -> None:
    first, second = Dataset(a / "rollouts"), Dataset(b / "rollouts")
    assert [e["trial"] for e in first.episodes] == [e["trial"] for e in second.episodes]
    for e in range(first.num_episodes):
        ours, theirs = first.episode_arrays(e), second.episode_arrays(e)
        for key in ("action", "observation.state"):
            np.testing.assert_array_equal(ours[key], theirs[key])


@pytest.mark.parametrize("where", ["processes", "ray"])
def test_trials_in_workers_log_what_sequential_trials_do(
    where: str, sequential: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    ray = request.getfixturevalue("cluster") if where == "ray" else None
    out = tmp_path / where
    # Two trials first, then the evaluation continues to three: a resumed one.
    first = _eval(out, trials=2, workers=2, ray=ray)
    assert first.ran == 2 and [r.trial for r in first.records] == [0, 1]
    rest = _eval(out, trials=3, workers=2, ray=ray)
    assert rest.ran == 1 and rest.finished
    assert _outcomes(out) == _outcomes(sequential)
    # The recorded trials (0 and 2) have their videos next to the log, as sequential ones.
    videos = [r.video for r in read_trials(out).records]
    assert videos == [r.video for r in read_trials(sequential).records]
    assert videos[0] is not None and all((out / v).is_file() for v in videos if v)
    _same_rollouts(sequential, out)


def test_a_trained_policy_runs_in_workers(recorded_demos: Path, tmp_path: Path) -> None:
    from r2s2r.policy.train import TrainCfg, Trainer

    options = {"preset": "tiny", "real": recorded_demos, "steps": 1, "batch_size": 2}
    options |= {"workers": 0, "cache_dir": tmp_path / "cache", "stats_windows": 200}
    Trainer(TrainCfg.from_dict(options), tmp_path / "run").fit()
    _eval(tmp_path / "one", str(tmp_path / "run"), trials=2)
    _eval(tmp_path / "two", str(tmp_path / "run"), trials=2, workers=2)
    assert _outcomes(tmp_path / "two") == _outcomes(tmp_path / "one")
    _same_rollouts(tmp_path / "one", tmp_path / "two")


def test_the_real_cell_refuses_trials_at_once(tmp_path: Path) -> None:
    config = tmp_path / "cell.yaml"
    config.write_text("{}\n")
    for options in ({"workers": 2}, {"ray": "local"}):
        request = EvalRequest(
            out=tmp_path / "hw", policy=str(tmp_path), rig="hardware", config=config, **options
        )
        with pytest.raises(RequestError, match="the real cell runs one trial at a time"):
            evaluate(request)
    assert not (tmp_path / "hw").exists()


# Slow (about 40 s): the seam's own test of a dying worker is in the fast suite.
@pytest.mark.slow
def test_generation_whose_worker_is_killed_gives_the_same_dataset(
    one_process: GenerateCfg, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker process SIGKILLed while the run waits on its first tasks: they run again."""
    killed: list[int] = []

    def cpu_s(pid: int) -> float:
        """A process's CPU time so far (s), from /proc."""
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    # Children an earlier test in this process left to the garbage collector (a twin's view
    # servers, a pool) are not this run's workers.
    earlier = {p.pid for p in multiprocessing.active_children()}

    def kill_one() -> None:
        # Before any task has come back, by the work the worker has done rather than the
        # wall clock (which a loaded or a quiet machine stretches or shrinks): a worker
        # hands back its first attempt after about 2.4 s of CPU here, and at 1 s it is still
        # starting or building its state inside its first task. Killed later, it could die
        # in an attempt the run no longer needs (CI saw that when attempts got faster): the
        # run ends without noticing. The run's pool workers are spawned processes
        # (SpawnProcess-N); a twin's view server is not one of them.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not killed:
            for worker in multiprocessing.active_children():
                pid = worker.pid
                if pid is None or pid in earlier or not worker.name.startswith("SpawnProcess"):
                    continue
                with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                    if worker.is_alive() and cpu_s(pid) >= 1.0:
                        os.kill(pid, signal.SIGKILL)
                        killed.append(pid)
                        break
            time.sleep(0.05)

    cfg = one_process.replace(out=tmp_path / "killed", workers=2)
    killer = threading.Thread(target=kill_one)
    killer.start()
    with caplog.at_level(logging.WARNING, logger="r2s2r.scaleout"):
        gen = Generator(cfg)
        summary = gen.run()
        gen.close()
    killer.join()
    assert killed, "no worker of the run was killed"
    assert "a worker process died" in caplog.text, f"killed {killed}, logged: {caplog.text!r}"
    assert summary["kept"] == 2
    _same_dataset(one_process.out, cfg.out)


def test_ctrl_c_stops_trials_in_workers_and_the_rerun_continues(tmp_path: Path) -> None:
    """Ctrl-C in a terminal reaches the whole process group, workers included: the
    evaluation stops with its log a prefix of the trial list, and the same command
    continues it. Trials are up to 12 s long (about 3 s of wall time each here), so the
    interrupt lands while some are still running: with 3 s trials the twin, now several
    times faster than real time, could play all four before the poll below saw the log."""
    out = tmp_path / "interrupted"
    cmd = [sys.executable, "-m", "r2s2r", "eval", "--policy", "scripted", "--protocol", "smoke"]
    cmd += ["--trials", "4", "--video", "none", "--max-seconds", "12", "--image-size", "64"]
    cmd += ["--workers", "2", "--out", str(out)]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    deadline = time.monotonic() + 120
    while not (out / "trials.jsonl").is_file() and time.monotonic() < deadline:
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    assert "rerun to continue" in stdout
    done = [r.trial for r in read_trials(out).records]
    assert done == list(range(len(done))) and 1 <= len(done) < 4
    rest = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert rest.returncode == 0, rest.stderr
    assert [r.trial for r in read_trials(out).records] == [0, 1, 2, 3]


def test_an_empty_ray_address_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="got an empty string"):
        GenerateCfg(source=None, out=tmp_path, ray="")
    with pytest.raises(ValueError, match="got an empty string"):
        EvalRequest(out=tmp_path, policy="scripted", ray=" ")
