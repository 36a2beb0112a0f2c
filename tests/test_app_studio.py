"""The services the Studio (and any GUI) runs on, without Qt: a live rig session with its
snapshots, calls between periods and emergency stop; board views captured one at a time;
training launched as its own process and its metrics read while they grow; a dataset's
episodes for playback."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from r2s2r.app.board import capture_board_view, draw_corners, good_views
from r2s2r.app.episodes import list_episodes, load_episode
from r2s2r.app.live import RigSnapshot
from r2s2r.app.session import RigRequest, RigSession
from r2s2r.app.train_process import TrainingProcess, TrainLaunch, read_metrics


def test_a_rig_session_streams_snapshots_runs_calls_and_estops(tmp_path: Path) -> None:
    shots: list[RigSnapshot] = []
    with RigSession(RigRequest(seed=0, realtime=False, image_size=64), shots.append) as session:
        deadline = time.monotonic() + 120
        while len(shots) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert session.error is None and len(shots) >= 4
        snap = shots[-1]
        assert set(snap.views) == {"head", "left_wrist", "right_wrist"}
        assert snap.views["head"].shape == (64, 64, 3)
        assert {s: v.shape for s, v in snap.tcp.items()} == {"left": (7,), "right": (7,)}
        assert {s: v.shape for s, v in snap.hand_q.items()} == {"left": (20,), "right": (20,)}
        # Snapshots come at 25 Hz of rig time: 2 periods apart at 50 Hz.
        gaps = np.diff([s.t for s in shots[-4:]])
        assert np.allclose(gaps, 0.04, atol=0.021)
        assert snap.safety.state == "armed" and not snap.safety.estopped
        # A call runs on the session's thread between periods.
        assert session.call(lambda rig, sup: rig.conveyor.set_speed(0.12)).result(30) is None
        session.set_belt_speed(0.05)
        assert session.call(lambda rig, sup: rig.conveyor.speed()).result(30) == pytest.approx(0.05)
        failed = session.call(lambda rig, sup: 1 / 0)
        with pytest.raises(ZeroDivisionError):
            failed.result(30)
        session.emergency_stop("test")
        assert session.sup.estopped
        n = len(shots)
        while len(shots) < n + 2:
            time.sleep(0.02)
        assert shots[-1].safety.state == "stopped" and "estop: test" in shots[-1].safety.last_event
        session.release_estop()
        assert not session.sup.estopped
    assert not session.alive
    with pytest.raises(Exception, match="closed"):
        session.call(lambda rig, sup: None).result(1)


def test_rig_requests_are_checked() -> None:
    with pytest.raises(ValueError, match="--config"):
        RigRequest(rig="hardware")
    with pytest.raises(ValueError, match="image_size"):
        RigRequest(image_size=4)


def test_board_views_are_kept_per_camera_in_the_grounding_layout(tmp_path: Path) -> None:
    from r2s2r.rig.twin import TwinRig

    with TwinRig(seed=0, native_cameras=True) as twin:
        views = [capture_board_view(twin, tmp_path, k) for k in range(3)]
    found = [v for v in views if v.corners["head"] is not None]
    assert found, "the head camera found the board in none of three placements"
    for v in views:
        assert ("head" in v.saved) == (v.corners["head"] is not None)
    names = sorted(p.name for p in (tmp_path / "cameras" / "head").glob("*.png"))
    assert names == [f"p{v.placement:02d}.png" for v in found]
    assert good_views(tmp_path)["head"] == len(found) == views[-1].counts["head"]
    drawn = draw_corners(found[0].images["head"], found[0].corners["head"])
    assert drawn.shape == found[0].images["head"].shape
    assert (drawn != found[0].images["head"]).sum() > 100
    assert (draw_corners(found[0].images["head"], None) == found[0].images["head"]).all()


def test_training_launch_builds_the_cli_command_and_checks_its_options(tmp_path: Path) -> None:
    launch = TrainLaunch(
        out=tmp_path / "run",
        real=tmp_path / "real",
        sims=(tmp_path / "s1",),
        alpha=0.3,
        steps=5,
        resume=True,
    )
    cmd = launch.command()
    assert cmd[:4] == [sys.executable, "-m", "r2s2r", "train"]
    assert cmd[cmd.index("--alpha") + 1] == "0.3" and cmd[-1] == "--resume"
    assert cmd[cmd.index("--sim") + 1] == str(tmp_path / "s1")
    with pytest.raises(ValueError, match="real dataset"):
        TrainLaunch(out=tmp_path)
    with pytest.raises(ValueError, match="alpha"):
        TrainLaunch(out=tmp_path, real=tmp_path, alpha=1.5)


def test_metrics_are_read_while_a_line_is_being_written(tmp_path: Path) -> None:
    rows = [{"step": 1, "loss": 2.0, "lr": 1e-4}, {"step": 2, "loss": 1.5, "lr": 2e-4}]
    text = "".join(json.dumps(r) + "\n" for r in rows) + '{"step": 3, "lo'
    (tmp_path / "metrics.jsonl").write_text(text)
    assert [r["step"] for r in read_metrics(tmp_path)] == [1.0, 2.0]
    assert read_metrics(tmp_path / "none") == []


def test_a_failed_training_process_says_why_as_the_cli_does(tmp_path: Path) -> None:
    proc = TrainingProcess(TrainLaunch(out=tmp_path / "run", real=tmp_path / "missing", steps=1))
    code = proc.wait(120)
    assert code != 0
    failure = proc.failure()
    assert failure is not None and str(tmp_path / "missing") in proc.log_tail()
    assert failure.startswith(f"r2s2r train exited with {code}")
    assert proc.stop() == code  # Stopping an ended run does nothing.


def test_episodes_list_with_success_labels_and_play_back(recorded_demos: Path) -> None:
    episodes = list_episodes(recorded_demos)
    assert [e.index for e in episodes] == [0, 1, 2]
    from r2s2r.data import Dataset

    with Dataset(recorded_demos) as ds:
        assert [e.success for e in episodes] == [bool(r["success"]) for r in ds.episodes]
        assert [e.frames for e in episodes] == [int(r["length"]) for r in ds.episodes]
    playback = load_episode(recorded_demos, 1)
    assert set(playback.views) == {"head", "left_wrist", "right_wrist"}
    assert playback.views["head"].shape[0] == episodes[1].frames == len(playback.actions)
    assert playback.timestamps[1] == pytest.approx(1 / playback.fps)
    assert list_episodes(recorded_demos / "nothing") == []
