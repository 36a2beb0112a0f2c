"""Recording on the twin: record -> verify -> read round trip, discarded takes, labels, CLI."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from r2s2r.cli import app
from r2s2r.data import CameraCfg, Dataset, DatasetCfg, DatasetWriter, VideoCfg, verify
from r2s2r.data.config import ACTION_KEY, STATE_KEY
from r2s2r.data.record import FrameRecord, QueuedKeys, Recorder
from r2s2r.rig.safety import SafetySupervisor
from r2s2r.rig.teleop import TeleopSession, TrackerCalibration
from r2s2r.rig.teleop.operator import ScriptedOperator, TwinEyes
from r2s2r.rig.twin import TwinRig
from r2s2r.spec.worlds import world_at


def _recorder(
    root: Path, seed: int, cameras: bool, max_s: float | None, frames: list[FrameRecord]
) -> tuple[TwinRig, Recorder, DatasetWriter]:
    logging.getLogger("r2s2r.safety").setLevel(logging.ERROR)
    rig = TwinRig(seed=seed, world=world_at(64))
    cal = TrackerCalibration.twin()
    teleop = TeleopSession(rig, SafetySupervisor(rig.arms, rig.hands, rig.now, rig.embodiment), cal)
    operator = ScriptedOperator(seed, TwinEyes(rig), rig.task, rig.nominal, cal)
    cams = tuple(CameraCfg(name=n, height=64, width=64) for n in rig.cameras) if cameras else ()
    cfg = DatasetCfg(cameras=cams, video=VideoCfg(lossless=True), env_state=True)
    writer = DatasetWriter(root, cfg)
    meta = {"world": "twin", "behavior": "teleop", "seed": seed}
    rec = Recorder(rig, operator, teleop, writer, rig.task, rig.nominal, meta, max_s, frames.append)
    return rig, rec, writer


def test_record_verify_read_round_trip_drops_the_discarded_take(tmp_path: Path) -> None:
    frames: list[FrameRecord] = []
    root = tmp_path / "ds"
    rig, rec, writer = _recorder(root, seed=4, cameras=True, max_s=0.4, frames=frames)
    keys = QueuedKeys()
    keys.schedule(take=1, frame=8, key="d")  # The second take is discarded halfway.
    with writer:
        takes = rec.run(2, keys)
    assert [t.decision for t in takes] == ["saved", "discarded", "saved"]
    assert [t.frames for t in takes] == [20, 8, 20]

    report = verify(root, decode=True)
    assert report.ok, report.faults
    assert report.notes == []  # Nothing of the discarded take is left on disk.
    with Dataset(root) as ds:
        assert ds.num_episodes == 2 and len(ds) == 40
        low = ds.low_dim()
        for ep, take in enumerate(t for t in takes if t.decision == "saved"):
            mine = [f for f in frames if f.take == take.index]
            rows = low["episode_index"] == ep
            np.testing.assert_array_equal(
                low[ACTION_KEY][rows], np.array([f.action for f in mine], dtype=np.float32)
            )
            np.testing.assert_array_equal(
                low[STATE_KEY][rows], np.array([f.state for f in mine], dtype=np.float32)
            )
            np.testing.assert_array_equal(
                low["timestamp"][rows], np.array(take.capture_times, dtype=np.float32)
            )
            # The object's pose as the twin tracked it, moving down the belt.
            objects = low["observation.environment_state"][rows]
            np.testing.assert_array_equal(
                objects, np.array([f.env_state for f in mine], dtype=np.float32)
            )
            assert objects[-1, 0] > objects[0, 0]
            for cam in ds.camera_keys:
                name = cam.removeprefix("observation.images.")
                np.testing.assert_array_equal(
                    ds.episode_images(ep, cam), np.stack([f.images[name] for f in mine])
                )
            row = ds.episode(ep)
            assert row["success"] == take.success
            assert row["object_ids"] == [take.object_name]
            assert row["world"] == "twin" and row["behavior"] == "teleop" and row["seed"] == 4
            assert row["belt_speed"] == pytest.approx(take.belt_speed)
            assert row["embodiment_id"] == 0
            assert ds.tasks[int(low["task_index"][rows][0])] == rec.instruction(take.object_name)
        # No recorded action of the discarded take is in the dataset.
        dropped = np.array([f.action for f in frames if f.take == 1], dtype=np.float32)
        assert not any((low[ACTION_KEY] == a).all(axis=1).any() for a in dropped[1:])


def test_scripted_take_ends_on_the_twins_verdict_with_its_label(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    rig, rec, writer = _recorder(root, seed=3, cameras=False, max_s=None, frames=[])
    with writer:
        (take,) = rec.run(1)
    status, success, done = rig.episode_outcome()
    assert take.ended_by == "verdict" and done
    assert (take.outcome, take.success) == (status, success) == ("sorted", True)
    with Dataset(root) as ds:
        assert ds.episode(0)["success"] is True
        assert ds.episode(0)["length"] == take.frames


def test_record_cli_on_the_twin_and_hardware_without_driver(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = CliRunner()
    out = tmp_path / "cli"
    args = ["record", "--out", str(out), "--episodes", "1", "--image-size", "64"]
    result = runner.invoke(app, [*args, "--max-seconds", "0.1", "--seed", "1"])
    assert result.exit_code == 0, result.output
    assert "saved 1 episodes" in result.output
    assert verify(out).ok
    config = tmp_path / "cell.yaml"
    config.write_text("{}\n")
    hw = ["record", "--rig", "hardware", "--keyboard", "--out", str(tmp_path / "hw")]
    result = runner.invoke(app, hw)
    assert result.exit_code == 2 and "--calibration" in result.output
    # Without the hardware module the command says so instead of failing with a traceback.
    monkeypatch.setitem(sys.modules, "r2s2r.rig.hardware", None)
    files = ["--config", str(config), "--calibration", str(config)]
    result = runner.invoke(app, [*hw, *files])
    assert result.exit_code == 2
    assert "hardware rig is not available" in result.output


def test_interactive_keys_start_redo_and_save(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    rig, rec, writer = _recorder(root, seed=5, cameras=False, max_s=None, frames=[])
    keys = QueuedKeys()
    keys.push("s")
    keys.schedule(take=0, frame=5, key="r")  # Redo: dropped, and a new take starts at once.
    keys.schedule(take=1, frame=7, key="e")  # End and save.
    with writer:
        takes = rec.run(1, keys, interactive=True)
    assert [t.decision for t in takes] == ["redo", "saved"]
    assert takes[1].frames == 7 and takes[1].success == rig.episode_outcome()[1]
    with Dataset(root) as ds:
        assert ds.num_episodes == 1 and len(ds) == 7


def test_recording_bench_reports_its_figures_from_a_real_recording() -> None:
    """``r2s2r rig bench``'s recording figures come from takes really recorded (twin, views,
    operator, writer)."""
    from r2s2r.data.record_bench import bench_record

    figures = bench_record(0.1, take_s=0.5)
    assert set(figures) == {
        "record_realtime_factor",
        "record_frames_per_s",
        "dataset_write_frames_per_s",
        "dataset_write_mb_per_s",
        "dataset_write_raw_mb_per_s",
    }
    assert all(np.isfinite(v) and v > 0 for v in figures.values())
