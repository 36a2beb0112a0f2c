"""``r2s2r deploy`` on the twin: episodes run live, shown (the composite live view drawn into
an image; a refreshed PNG and timing lines without a display), recorded as a dataset that
the dataset tools open and ``r2s2r deploy inspect`` reads back, faults from the command
line, a real policy server as the policy, an emergency stop from another thread, clear
errors for requests that cannot run; and ``r2s2r runtime bench``'s JSON."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
from typer.testing import CliRunner

from r2s2r.app.deploy import DeployRequest, EmergencyStop, check_request, deploy
from r2s2r.app.deployments import DeploymentError, inspect_deployment
from r2s2r.app.jobs import RequestError
from r2s2r.app.live import (
    _HELD,
    _LATE,
    _OK,
    STRIP_HEIGHT,
    TEXT_HEIGHT,
    VIEW_HEIGHT,
    LiveFrame,
    compose,
    timing_line,
)
from r2s2r.cli import app
from r2s2r.cli.deploy import Keys
from r2s2r.data import Dataset
from r2s2r.data.config import STATE_KEY
from r2s2r.policy.base import STATE_PAD_KEY, TASK_KEY, PolicyMetadata
from r2s2r.policy.serve import PolicyServer
from r2s2r.rig.twin import TwinRig
from r2s2r.runtime.episode import StepLog
from r2s2r.sim.contract import Contract, ContractError
from r2s2r.sim.scene import nominal_embodiment

runner = CliRunner()


# ---------------------------------------------------------------------------- requests
@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({}, "give one of --policy"),
        ({"policy": "scripted", "server": "127.0.0.1:8000"}, "give one of --policy"),
        ({"server": "localhost"}, "expected HOST:PORT"),
        ({"rig": "hardware", "policy": "scripted"}, "needs --config"),
        ({"rig": "hardware", "policy": "scripted", "config": "cell.yaml"}, "only the twin"),
        ({"policy": "scripted", "faults": ("nan@x",)}, "'x' is not a time"),
        ({"server": "127.0.0.1:9", "faults": ("disconnect@1s",)}, "not --server"),
        ({"policy": "scripted", "faults": ("latency:300ms@1s",)}, "--lockstep-delay measured"),
        ({"policy": "no/such/run"}, "no such training run folder"),
    ],
)
def test_requests_that_cannot_run_are_refused_before_anything_opens(
    fields: dict[str, Any], message: str
) -> None:
    with pytest.raises(RequestError, match=message):
        check_request(DeployRequest(**fields))


def test_the_cli_refuses_a_bad_request_with_its_message() -> None:
    result = runner.invoke(app, ["deploy", "--policy", "scripted", "--fault", "lag@1s"])
    assert result.exit_code == 2
    assert "unknown kind 'lag'" in result.output


def test_an_unreachable_server_is_a_clear_error() -> None:
    result = runner.invoke(app, ["deploy", "--server", "127.0.0.1:9", "--max-seconds", "0.1"])
    assert result.exit_code == 2
    assert "cannot reach the policy server at ws://127.0.0.1:9" in result.output


# ---------------------------------------------------------------------------- a recorded run
@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """Two short episodes of the scripted operator with a NaN fault, recorded with 32 px
    views and shown headless (a PNG and timing lines)."""
    tmp = tmp_path_factory.mktemp("deploy")
    out, png = tmp / "ds", tmp / "live.png"
    args = ["deploy", "--policy", "scripted", "--seed", "3", "--episodes", "2"]
    args += ["--max-seconds", "0.6", "--image-size", "32", "--fault", "nan@0.3s"]
    args += ["--record", str(out), "--show", "--preview", str(png)]
    result = runner.invoke(app, args, env={"DISPLAY": "", "WAYLAND_DISPLAY": ""})
    assert result.exit_code == 0, result.output
    return out, png, result.output


def test_deploy_runs_records_and_shows_the_episodes(recorded: tuple[Path, Path, str]) -> None:
    out, png, output = recorded
    assert "episode 0:" in output and "episode 1:" in output
    assert "(1 rejected)" in output and "saved as episode 1" in output
    # Without a display: a timing line per live frame, and the PNG.
    lines = [line for line in output.splitlines() if line.startswith("ep ")]
    assert len(lines) == 2 * 3  # Steps 0, 10, 20 of two 30-step episodes.
    assert "period p50" in lines[-1] and "chunk" in lines[-1]
    image = cv2.imread(str(png))
    assert image is not None and image.shape[0] == VIEW_HEIGHT + STRIP_HEIGHT + TEXT_HEIGHT
    with Dataset(out) as ds:
        assert ds.num_episodes == 2 and len(ds) == 60
        assert sorted(c.name for c in ds.cameras) == ["head", "left_wrist", "right_wrist"]
        assert [e["outcome"] for e in ds.episodes] == ["timeout", "timeout"]
        assert ds.episodes[0]["behavior"] == "deploy" and ds.episodes[0]["seed"] == 3


def test_the_dataset_tools_open_a_recorded_deployment(
    recorded: tuple[Path, Path, str], tmp_path: Path
) -> None:
    out, _, _ = recorded
    verify = runner.invoke(app, ["dataset", "verify", str(out), "--decode"])
    assert verify.exit_code == 0 and "ok (2 episodes, 60 frames)" in verify.output
    info = json.loads(runner.invoke(app, ["dataset", "info", str(out), "--json"]).output)
    assert info["episodes"] == 2 and info["cameras"]["head"] == [32, 32]
    sheet = tmp_path / "sheet.png"
    view = runner.invoke(app, ["dataset", "view", str(out), "--episode", "1", "--out", str(sheet)])
    assert view.exit_code == 0 and cv2.imread(str(sheet)) is not None


def test_inspect_prints_the_chunk_timing_and_safety_events(
    recorded: tuple[Path, Path, str],
) -> None:
    out, _, _ = recorded
    result = runner.invoke(app, ["deploy", "inspect", str(out), "--json"])
    assert result.exit_code == 0
    report = json.loads(result.output)
    assert report["sessions"][0]["request"]["faults"] == ["nan@0.3s"]
    assert report["sessions"][0]["execution"] == "sync"  # The operator's horizon is 1.
    for ep in report["episodes"]:
        assert ep["frames"] == 30 and len(ep["chunks"]) >= 29
        rejected = [c for c in ep["chunks"] if not c["accepted"] and c["arrived_step"]]
        assert len(rejected) == 1 and "non-finite" in rejected[0]["reason"]
        assert rejected[0]["requested_step"] == 15
        assert any("a NaN in action 0" in m for m in ep["messages"])
        holds = [e for e in ep["safety_events"] if e["kind"] == "hold"]
        assert holds and holds[0]["stamp"] == pytest.approx(0.3)
    text = runner.invoke(app, ["deploy", "inspect", str(out), "--episode", "1"]).output
    assert "chunk  asked  arrived  delay  latency_ms  ran" in text
    assert "no: non-finite values" in text and "safety    0.30 s left_arm hold" in text
    with pytest.raises(DeploymentError, match="episode 5 out of range"):
        inspect_deployment(out, 5)


def test_inspect_refuses_a_dataset_without_deployment_records(tmp_path: Path) -> None:
    from r2s2r.app.record import RecordRequest, record

    record(RecordRequest(out=tmp_path / "demo", episodes=1, seed=3, image_size=0, max_seconds=0.2))
    with pytest.raises(DeploymentError, match="written by r2s2r deploy --record"):
        inspect_deployment(tmp_path / "demo")


# ---------------------------------------------------------------------------- live view
def _steps(periods: list[float], held: list[bool]) -> list[StepLog]:
    state = np.zeros(nominal_embodiment().state_dim)
    action = np.zeros(nominal_embodiment().action_dim("tcp"))
    return [
        StepLog(k, k * 0.02, state, None if h else action, None if h else 0, p, 1.0)
        for k, (p, h) in enumerate(zip(periods, held, strict=True))
    ]


def test_the_live_view_draws_the_three_views_over_the_chunk_timing() -> None:
    with TwinRig(seed=0) as twin:
        views = {name: cam.read().image for name, cam in twin.cameras.items()}
    # Ten periods: on budget, then two held, then one late (50 ms).
    periods = [20.0] * 6 + [20.0, 20.0] + [50.0] + [20.0]
    held = [False] * 6 + [True, True] + [False, False]
    frame = LiveFrame(0, 9, 0.18, views, _steps(periods, held), [])
    image = compose(frame)
    assert image.dtype == np.uint8 and image.shape[2] == 3
    assert image.shape[0] == VIEW_HEIGHT + STRIP_HEIGHT + TEXT_HEIGHT
    # The views, side by side in name order, each scaled to the row's height.
    x = 0
    for name in sorted(views):
        h, w = views[name].shape[:2]
        tile = cv2.resize(views[name], (round(w * VIEW_HEIGHT / h), VIEW_HEIGHT))
        # The name is written into the top left corner; the rest is the view.
        np.testing.assert_array_equal(image[30:VIEW_HEIGHT, x : x + tile.shape[1]], tile[30:])
        x += tile.shape[1]
    assert x == image.shape[1]
    # The strip: one column band per period, coloured by how it kept the budget.
    strip = image[VIEW_HEIGHT : VIEW_HEIGHT + STRIP_HEIGHT]
    col = image.shape[1] / 10
    bottom = STRIP_HEIGHT - 10

    def colour(i: int) -> tuple[int, ...]:
        return tuple(int(v) for v in strip[bottom, int((i + 0.5) * col)])

    assert colour(0) == _OK and colour(8) == _LATE
    assert tuple(int(v) for v in strip[12, int(6.5 * col)]) == _HELD  # Above the bar.
    line = timing_line(frame)
    assert "held 2" in line and "max 50.0 ms" in line and "no chunk yet" in line


def test_live_frames_come_from_the_running_episode() -> None:
    frames: list[LiveFrame] = []
    request = DeployRequest(policy="scripted", seed=3, max_seconds=0.9, image_size=32)
    result = deploy(request, on_frame=frames.append)
    assert [f.step for f in frames] == [0, 10, 20, 30, 40]
    last = frames[-1]
    assert sorted(last.views) == ["head", "left_wrist", "right_wrist"]
    assert all(v.shape == (32, 32, 3) for v in last.views.values())
    assert [s.step for s in last.steps] == list(range(41))
    assert last.chunks and last.chunks[-1].requested_step == 40
    assert result.episodes[0].summary["timing"]["steps"] == 45
    assert result.record is None and result.episodes[0].dataset_episode is None


# ---------------------------------------------------------------------------- server
class HoldPolicy:
    """Reads requests in the dataset's form (a proprio history of 3) and answers chunks that
    hold the newest state's TCP poses and hand joints; keeps every request it got."""

    def __init__(self, action_dim: int | None = None) -> None:
        emb = nominal_embodiment()
        self.contract = Contract.of(emb, "tcp", ())
        dim = action_dim or self.contract.action_dim
        self._metadata = PolicyMetadata(
            emb.name, "tcp", dim, 8, 50.0, state_dim=emb.state_dim, state_history=3
        )
        self.requests: list[dict[str, Any]] = []
        self.resets = 0

    @property
    def metadata(self) -> PolicyMetadata:
        return self._metadata

    def reset(self) -> None:
        self.resets += 1

    def infer(self, request: dict[str, Any]) -> np.ndarray:
        self.requests.append(request)
        parts = self.contract.split_state(np.asarray(request[STATE_KEY][-1], dtype=np.float64))
        action = self.contract.join_action(parts["tcp_pose"], parts["hand_joints"])
        return np.repeat(action[None], 8, axis=0)


def test_a_policy_server_drives_the_twin(tmp_path: Path) -> None:
    policy = HoldPolicy()
    with PolicyServer(policy, port=0) as server:
        args = ["deploy", "--server", f"127.0.0.1:{server.port}", "--max-seconds", "0.5"]
        result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    (episode,) = json.loads(result.output.splitlines()[-1])
    assert episode["ended_by"] == "timeout" and episode["timing"]["rejected_chunks"] <= 1
    assert policy.resets == 1 and len(policy.requests) >= 3
    first, later = policy.requests[0], policy.requests[-1]
    assert first[TASK_KEY] == later[TASK_KEY] and "Pick the" in first[TASK_KEY]
    # The proprio history of the loop (one sample a period): the first request repeats its
    # state, marked as padding; later ones are full.
    assert first[STATE_KEY].shape == (3, nominal_embodiment().state_dim)
    np.testing.assert_array_equal(first[STATE_KEY][0], first[STATE_KEY][2])
    assert first[STATE_PAD_KEY].tolist() == [True, True, False]
    assert not later[STATE_PAD_KEY].any()


def test_a_policy_that_does_not_fit_the_rig_is_refused() -> None:
    with PolicyServer(HoldPolicy(action_dim=7), port=0) as server:
        request = DeployRequest(server=f"127.0.0.1:{server.port}", max_seconds=0.2)
        with pytest.raises(ContractError, match="the policy's actions have 7 entries"):
            deploy(request)


# ---------------------------------------------------------------------------- e-stop
def test_the_emergency_stop_ends_the_session() -> None:
    estop = EmergencyStop()
    keys = Keys(estop.trigger, lambda: None)
    pressers: list[tuple[int, threading.Thread]] = []

    def press_soon(frame: LiveFrame) -> None:
        # The space key, from another thread, 0.5 s of rig time into the first episode. The
        # rig's clock, not a wall-clock timer: a paced twin that starts behind (its view
        # worker starting) catches up at full speed, and a timer then lands periods late.
        if not pressers and frame.step >= 25:
            pressers.append((frame.step, threading.Thread(target=keys.key, args=(" ",))))
            pressers[0][1].start()

    request = DeployRequest(
        policy="scripted", seed=3, realtime=True, episodes=3, max_seconds=3, image_size=16
    )
    result = deploy(request, on_frame=press_soon, estop=estop)
    pressed_at, presser = pressers[0]
    presser.join()
    assert result.estopped and len(result.episodes) == 1
    summary = result.episodes[0].summary
    assert (summary["ended_by"], summary["outcome"]) == ("estop", "safety_stop")
    # Within a few periods of the press (25 periods: 0.5 s at 50 Hz, room for a loaded
    # machine to schedule the pressing thread), well before the 150 the episode would last.
    assert pressed_at <= summary["timing"]["steps"] < pressed_at + 25
    assert [e["detail"] for e in summary["safety_events"] if e["kind"] == "estop"] == [
        "emergency stop key"
    ]


def test_an_emergency_stop_before_the_start_stops_at_once() -> None:
    estop = EmergencyStop()
    estop.trigger("pressed early")
    result = deploy(DeployRequest(policy="scripted", seed=3, max_seconds=1.0), estop=estop)
    assert result.estopped and result.episodes == []


def test_keys_map_to_the_stop_and_quit() -> None:
    calls: list[str] = []
    keys = Keys(lambda reason: calls.append("estop"), lambda: calls.append("quit"))
    for ch in (" ", "x", "q", "a"):
        keys.key(ch)
    assert calls == ["estop", "estop", "quit"]


# ---------------------------------------------------------------------------- bench
def test_the_runtime_bench_prints_its_figures_as_json() -> None:
    args = ["runtime", "bench", "--json", "--seconds", "1", "--seed", "3", "--latency-ms", "40"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    figures = json.loads(result.output[result.output.index("{") :])
    for key in (
        "period_p50_ms",
        "period_p99_ms",
        "period_max_ms",
        "infer_ms_p50",
        "stalls",
        "overhead_ms",
    ):
        assert key in figures and key in figures["peer"]
    assert figures["budget_ms"] == 20.0
    assert figures["execution"] == "rtc" and figures["peer"]["execution"] == "sync"
    assert figures["steps"] == figures["peer"]["steps"] == 50
    assert figures["infer_ms_p50"] >= 40 and figures["peer"]["waited_periods"] > 0
    assert figures["peer_ratio"]["period_p99"] == pytest.approx(
        figures["peer"]["period_p99_ms"] / figures["period_p99_ms"]
    )


def test_hardware_without_its_sdks_is_a_clear_error() -> None:
    import importlib.util

    if importlib.util.find_spec("flexivrdk") is not None:
        pytest.skip("the Flexiv SDK is installed here")
    config = Path(__file__).parents[1] / "source/r2s2r/presets/rig/hardware.example.yaml"
    with PolicyServer(HoldPolicy(), port=0) as server:
        args = ["deploy", "--rig", "hardware", "--config", str(config)]
        result = runner.invoke(app, [*args, "--server", f"127.0.0.1:{server.port}"])
    assert result.exit_code == 2
    assert "--rig hardware: flexivrdk is needed" in result.output


# ---------------------------------------------------------------------------- learned
@pytest.mark.slow
def test_deploy_runs_a_trained_policy(recorded_demos: Path, tmp_path: Path) -> None:
    """A tiny policy trained for 2 steps on the twin's demos, deployed and recorded: the
    whole path from a training run folder (about 1 min on 2 cores). Training and deploying
    run as commands of their own: importing triton in a process that has rendered with EGL
    crashes it."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "source")}

    def r2s2r(*args: str) -> str:
        proc = subprocess.run(
            [sys.executable, "-m", "r2s2r", *args], capture_output=True, text=True, env=env
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc.stdout

    run, out = tmp_path / "run", tmp_path / "deployed"
    r2s2r(
        *("train", "--preset", "tiny", "--real", str(recorded_demos), "--steps", "2"),
        *("--batch-size", "2", "--workers", "0", "--warmup", "1", "--out", str(run)),
        *("--cache-dir", str(tmp_path / "c")),
    )
    r2s2r(
        *("deploy", "--policy", str(run), "--device", "cpu", "--max-seconds", "0.4"),
        *("--image-size", "64", "--record", str(out), "--json"),
    )
    report = inspect_deployment(out)
    (episode,) = report.episodes
    assert episode.frames == 20
    arrived = [c for c in episode.chunks if c.arrived_step is not None]
    assert len(arrived) >= 2 and all(c.latency_ms is not None and c.latency_ms > 0 for c in arrived)
    assert report.sessions[0]["policy"]["cameras"]
