"""r2s2r Studio driven through its tabs on the twin (pytest-qt, offscreen): connect and watch
the views and plots, capture a board view, record and discard a take, train a few steps in a
separate process with the loss curve updating, deploy the scripted policy for an episode, the
emergency stop from any tab and while the UI thread is busy, closing with a worker running,
errors in the window with the CLI's words, remembered settings."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
pytest.importorskip("PySide6", reason="the studio extra: pip install -e '.[studio]'")
pytest.importorskip("pytestqt", reason="the studio extra: pip install -e '.[studio]'")

try:
    import r2s2r_studio  # noqa: F401
except ImportError:  # Not installed: run from the source tree.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))

from PySide6.QtCore import QSettings, Qt  # noqa: E402
from PySide6.QtWidgets import QDockWidget  # noqa: E402
from r2s2r_studio.window import StudioWindow  # noqa: E402

from r2s2r.app.ground import GroundRequest, ground  # noqa: E402
from r2s2r.app.jobs import RequestError  # noqa: E402
from r2s2r.data import Dataset  # noqa: E402

# Seconds a step of a flow may take on 2 busy cores (the twin's first period compiles).
WAIT_MS = 120_000


@pytest.fixture
def window(qtbot, tmp_path: Path):  # type: ignore[no-untyped-def]
    settings = QSettings(str(tmp_path / "studio.ini"), QSettings.Format.IniFormat)
    win = StudioWindow(settings)
    qtbot.addWidget(win)
    win.show()
    win.rig_tab.realtime.setChecked(False)
    win.rig_tab.image_size.setValue(96)
    yield win
    win.close()


def _connect(qtbot, win: StudioWindow) -> None:  # type: ignore[no-untyped-def]
    qtbot.mouseClick(win.rig_tab.connect_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: win.session is not None, timeout=WAIT_MS)
    qtbot.waitUntil(lambda: win.rig_tab.views.views["head"].frames >= 3, timeout=WAIT_MS)


def test_rig_connects_shows_views_and_plots_captures_a_board_view_and_estops_from_any_tab(
    qtbot, window: StudioWindow, tmp_path: Path
) -> None:
    window.rig_tab.image_size.setValue(256)
    _connect(qtbot, window)
    for view in window.rig_tab.views.views.values():
        assert view.image is not None and view.image.shape == (256, 256, 3)
    qtbot.waitUntil(lambda: window.rig_tab.plots.tcp.samples >= 5, timeout=WAIT_MS)
    assert "connected (twin seed 0)" in window.rig_state.text()
    assert "ARMED" in window.rig_tab.safety.text()

    # Board views, placement after placement, until the head camera has found the board
    # whole (at 256 px it misses some placements; each capture moves to the next).
    tab = window.calibration_tab
    window.tabs.setCurrentWidget(tab)
    tab.out.setText(str(tmp_path / "capture"))
    views = []
    for _ in range(6):
        qtbot.mouseClick(tab.capture_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(
            lambda: tab.last_view is not None and tab.last_view not in views, timeout=WAIT_MS
        )
        views.append(tab.last_view)
        if "head" in tab.last_view.saved:
            break
    view = views[-1]
    assert view is not None and view.corners["head"] is not None and "head" in view.saved
    assert [v.placement for v in views] == list(range(len(views)))
    kept = sorted(p.name for p in (tmp_path / "capture" / "cameras" / "head").glob("*.png"))
    assert kept == [f"p{view.placement:02d}.png"]
    assert view.counts["head"] == 1 and "head 1" in tab.counts.text()
    # The corners are drawn over the view the camera delivered.
    shown = tab.views["head"].image
    assert shown is not None and (shown != view.images["head"]).any()
    assert tab.placement.value() == view.placement + 1

    # The e-stop key works from any tab; the supervisor latches and the Rig tab says so.
    window.tabs.setCurrentWidget(window.train_tab)
    qtbot.keyClick(window.train_tab, Qt.Key.Key_Escape)
    assert window.session is not None and window.session.sup.estopped
    qtbot.waitUntil(lambda: "STOPPED" in window.rig_tab.safety.text(), timeout=WAIT_MS)
    assert window.safety_state.text() == "safety: E-STOP"
    window.release_estop()
    assert not window.session.sup.estopped
    qtbot.waitUntil(lambda: "ARMED" in window.rig_tab.safety.text(), timeout=WAIT_MS)
    window.disconnect_rig()
    assert window.session is None


def test_recording_discards_a_take_saves_the_next_and_plays_it_back(
    qtbot, window: StudioWindow, tmp_path: Path
) -> None:
    tab = window.record_tab
    window.tabs.setCurrentWidget(tab)
    out = tmp_path / "teleop"
    tab.out.setText(str(out))
    tab.episodes.setValue(1)
    tab.image_size.setValue(64)
    tab.max_seconds.setValue(30)
    qtbot.mouseClick(tab.begin_button, Qt.MouseButton.LeftButton)
    assert window.jobs["record"].running
    qtbot.mouseClick(tab.key_buttons["s"], Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: tab.live.views["head"].frames >= 5, timeout=WAIT_MS)
    # The recorder reports the discard once the take is gone; nothing of it is on disk.
    with qtbot.waitSignal(
        window.jobs["record"].progress,
        timeout=WAIT_MS,
        check_params_cb=lambda p: "discarded=1" in p.message,
    ):
        qtbot.mouseClick(tab.key_buttons["d"], Qt.MouseButton.LeftButton)
    assert not (out / "meta" / "episodes").exists() or Dataset(out).num_episodes == 0
    seen = tab.live.views["head"].frames
    qtbot.mouseClick(tab.key_buttons["s"], Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: tab.live.views["head"].frames >= seen + 5, timeout=WAIT_MS)
    qtbot.mouseClick(tab.key_buttons["e"], Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: window.jobs["record"].done, timeout=WAIT_MS)
    result = tab.result
    assert result is not None
    assert [t.decision for t in result.takes] == ["discarded", "saved"]
    saved = result.takes[1]
    with Dataset(out) as ds:
        assert ds.num_episodes == 1 and ds.episode(0)["length"] == saved.frames
    assert tab.table.rowCount() == 1
    assert tab.table.item(0, 3).text() == ("yes" if saved.success else "no")
    assert "saved 1 episodes" in tab.status.text()

    tab.table.selectRow(0)
    qtbot.mouseClick(tab.play_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: tab.playback is not None, timeout=WAIT_MS)
    assert tab.scrubber.maximum() == saved.frames - 1
    tab.scrubber.setValue(saved.frames - 1)
    assert f"frame {saved.frames}/{saved.frames}" in tab.frame_label.text()
    assert tab.playback_views.views["head"].image is not None


def _launch_training(qtbot, win: StudioWindow, demos: Path, run: Path, steps: int):  # type: ignore[no-untyped-def]
    tab = win.train_tab
    win.tabs.setCurrentWidget(tab)
    tab.real.setText(str(demos))
    tab.steps.setValue(steps)
    tab.batch.setValue(2)
    tab.log_every.setValue(1)
    tab.workers.setValue(0)
    tab.device.setCurrentText("cpu")
    tab.out.setText(str(run))
    qtbot.mouseClick(tab.launch_button, Qt.MouseButton.LeftButton)
    proc = tab.process
    assert proc is not None and proc.pid != os.getpid()
    return proc


def _last_step(run: Path) -> int:
    return int(json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])["step"])


# About 50 s on 2 cores (two processes importing torch, the stats, the steps): slow.
@pytest.mark.slow
def test_training_runs_in_its_own_process_its_curve_updates_and_it_stops(
    qtbot, window: StudioWindow, tmp_path: Path, recorded_demos: Path
) -> None:
    tab, run = window.train_tab, tmp_path / "run"
    proc = _launch_training(qtbot, window, recorded_demos, run, 400)
    try:
        qtbot.waitUntil(lambda: tab.points >= 3, timeout=WAIT_MS)
        steps, losses = tab.loss_curve.getData()
        assert len(steps) >= 3 and list(steps) == sorted(steps) and (losses > 0).all()
        assert len(tab.lr_curve.getData()[0]) == len(steps)
        qtbot.mouseClick(tab.stop_button, Qt.MouseButton.LeftButton)
        assert proc.poll() is not None
        # Stopped as Ctrl-C stops it: a checkpoint of the step it reached, to resume from.
        assert _last_step(run) < 400 and any((run / "checkpoints").iterdir())
        assert "stopped" in tab.status.text()
        qtbot.wait(700)
        assert window.errors == []
    finally:
        proc.stop(30)


@pytest.mark.slow
def test_a_stopped_training_resumes_from_its_checkpoint(
    qtbot, window: StudioWindow, tmp_path: Path, recorded_demos: Path
) -> None:
    tab, run = window.train_tab, tmp_path / "run"
    proc = _launch_training(qtbot, window, recorded_demos, run, 400)
    try:
        qtbot.waitUntil(lambda: tab.points >= 2, timeout=WAIT_MS)
        qtbot.mouseClick(tab.stop_button, Qt.MouseButton.LeftButton)
        stopped = _last_step(run)
        tab.steps.setValue(stopped + 2)
        qtbot.mouseClick(tab.resume_button, Qt.MouseButton.LeftButton)
        resumed = tab.process
        assert resumed is not None and resumed is not proc
        assert "--resume" in resumed.launch.command()
        assert resumed.wait(WAIT_MS / 1000) == 0, resumed.log_tail()
        qtbot.waitUntil(lambda: int(tab.loss_curve.getData()[0][-1]) == stopped + 2, timeout=5000)
    finally:
        for p in (proc, tab.process):
            if p is not None:
                p.stop(30)


def test_deploying_the_scripted_policy_runs_an_episode_with_live_timing(
    qtbot, window: StudioWindow, tmp_path: Path
) -> None:
    tab = window.deploy_tab
    window.tabs.setCurrentWidget(tab)
    tab.source.setCurrentText("scripted")
    tab.max_seconds.setValue(2)
    tab.record.setText(str(tmp_path / "deployed"))
    qtbot.mouseClick(tab.start_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: tab.result is not None, timeout=WAIT_MS)
    qtbot.waitUntil(lambda: window.jobs["deploy"].done, timeout=WAIT_MS)
    result = tab.result
    assert result is not None and len(result.episodes) == 1 and not result.estopped
    assert result.episodes[0].summary["ended_by"] in ("timeout", "verdict", "success")
    with Dataset(tmp_path / "deployed") as ds:
        assert ds.num_episodes == 1
    assert (tmp_path / "deployed" / "deploy" / "sessions.jsonl").is_file()
    assert tab.views.views["head"].frames >= 3
    assert tab.period_plot.samples >= 10
    xs, latency = tab.latency_curve.getData()
    assert xs is not None and len(xs) >= 1
    assert "episode 0" in tab.status.text()
    assert window.errors == []


def test_estop_stops_a_deployment_while_the_ui_thread_is_busy(qtbot, window: StudioWindow) -> None:
    tab = window.deploy_tab
    window.tabs.setCurrentWidget(tab)
    tab.source.setCurrentText("scripted")
    tab.max_seconds.setValue(60)
    qtbot.mouseClick(tab.start_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: tab.views.views["head"].frames >= 3, timeout=WAIT_MS)
    job = window.jobs["deploy"]
    assert job.running
    # The UI thread is busy for 20 s (a long slot); the stop comes from another thread (a
    # hardware e-stop input, a second window) and must stop the arms without it.
    pressed = threading.Timer(0.2, lambda: window.emergency_stop("hardware e-stop input"))
    pressed.start()
    start = time.monotonic()
    while job.running and time.monotonic() - start < 20:
        time.sleep(0.05)  # Busy: no event is processed.
    pressed.join()
    assert not job.running, "the deployment went on while the UI thread was busy"
    qtbot.waitUntil(lambda: tab.result is not None, timeout=WAIT_MS)
    assert tab.result is not None and tab.result.estopped
    assert tab.result.episodes[0].summary["ended_by"] == "estop"


def test_closing_the_window_while_a_worker_runs_ends_it_cleanly(qtbot, tmp_path: Path) -> None:
    import multiprocessing

    before = set(multiprocessing.active_children())
    settings = QSettings(str(tmp_path / "studio.ini"), QSettings.Format.IniFormat)
    win = StudioWindow(settings)
    qtbot.addWidget(win)
    win.show()
    win.rig_tab.realtime.setChecked(False)
    tab = win.deploy_tab
    tab.source.setCurrentText("scripted")
    tab.max_seconds.setValue(60)
    qtbot.mouseClick(tab.start_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: tab.views.views["head"].frames >= 2, timeout=WAIT_MS)
    job = win.jobs["deploy"]
    win.close()
    assert not job.running and job.error is None
    # The twin's view worker went with the rig.
    assert not [p for p in set(multiprocessing.active_children()) - before if p.is_alive()]


def test_errors_are_shown_in_the_window_with_the_clis_message(
    qtbot, window: StudioWindow, tmp_path: Path
) -> None:
    tab = window.calibration_tab
    window.tabs.setCurrentWidget(tab)
    empty = tmp_path / "no_capture"
    empty.mkdir()
    tab.out.setText(str(empty))
    tab.reuse.setChecked(True)
    with pytest.raises((RequestError, ValueError, OSError)) as err:
        ground(GroundRequest(out=empty, reuse=True))
    qtbot.mouseClick(tab.ground_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: bool(window.errors), timeout=WAIT_MS)
    assert window.errors == [f"error: {err.value}"]
    assert f"error: {err.value}" in tab.status.text()
    assert str(err.value) in window.error_label.text()
    assert str(err.value) in window.log_view.toPlainText()
    assert not (empty / "grounded.yaml").exists()
    # Bad input is refused before anything runs, with what to do.
    window.train_tab.out.setText(str(tmp_path / "run"))
    window.train_tab.launch(resume=False)
    assert "choose a real dataset" in window.errors[-1]


def test_a_job_is_done_only_once_its_result_reached_the_ui_thread(qtbot) -> None:
    from r2s2r_studio.jobs import Job

    got: list[tuple[int, bool]] = []
    job = Job("sum", lambda cancel, progress: 42)
    job.finished.connect(lambda value: got.append((value, threading.get_ident() == ui)))
    ui = threading.get_ident()
    job.start()
    job._thread.join()
    # The worker ended; its signals wait in the UI thread's queue, so it is not done yet.
    assert not job.running and not job.done and got == []
    qtbot.waitUntil(lambda: job.done, timeout=5_000)
    assert got == [(42, True)]


def test_settings_remember_the_rig_datasets_and_layout(qtbot, tmp_path: Path) -> None:
    path = str(tmp_path / "studio.ini")
    first = StudioWindow(QSettings(path, QSettings.Format.IniFormat))
    qtbot.addWidget(first)
    first.rig_tab.seed.setValue(7)
    first.record_tab.out.setText("/data/teleop")
    first.train_tab.real.setText("/data/real")
    first.train_tab.sims.addItem("/data/sim_gg")
    first.show()
    # The layout: the log dock closed.
    first.findChild(QDockWidget, "log_dock").close()
    first.close()
    again = StudioWindow(QSettings(path, QSettings.Format.IniFormat))
    qtbot.addWidget(again)
    assert again.rig_tab.seed.value() == 7
    assert again.record_tab.out.text() == "/data/teleop"
    assert again.train_tab.real.text() == "/data/real"
    assert [again.train_tab.sims.item(i).text() for i in range(again.train_tab.sims.count())] == [
        "/data/sim_gg"
    ]
    again.show()
    assert not again.findChild(QDockWidget, "log_dock").isVisible()
    again.close()


@pytest.mark.slow
def test_grounding_from_the_calibration_tab_writes_the_world_and_shows_its_figures(
    qtbot, window: StudioWindow, tmp_path: Path
) -> None:
    tab = window.calibration_tab
    window.tabs.setCurrentWidget(tab)
    out = tmp_path / "grounding"
    tab.out.setText(str(out))
    stages: list[str] = []
    qtbot.mouseClick(tab.ground_button, Qt.MouseButton.LeftButton)
    assert tab.cancel_button.isEnabled()
    # The job reports through queued signals: nothing was delivered before this connects.
    window.jobs["ground"].progress.connect(lambda p: stages.append(p.stage))
    qtbot.waitUntil(lambda: window.jobs["ground"].done, timeout=1_100_000)
    assert window.errors == [], window.errors
    assert tab.result is not None and (out / "grounded.yaml").is_file()
    assert (out / "report.md").is_file() and "wrote" in tab.status.text()
    assert stages[0] == "capture" and stages[-1] == "write"
    assert tab.progress.value() == tab.progress.maximum()
    assert tab.bars >= 6  # At least MIN_VIEWS views per camera calibrated.
    assert tab.overlay.image is not None
    assert len(tab.tcp_plot.getPlotItem().listDataItems()) == 3


@pytest.mark.slow
def test_an_evaluation_fills_the_success_table_as_trials_are_logged(
    qtbot, window: StudioWindow, tmp_path: Path
) -> None:
    from r2s2r.eval.trials import read_trials

    tab = window.deploy_tab
    window.tabs.setCurrentWidget(tab)
    tab.source.setCurrentText("scripted")
    tab.protocol.setCurrentText("smoke")
    tab.trials.setValue(2)
    tab.eval_out.setText(str(tmp_path / "eval"))
    qtbot.mouseClick(tab.eval_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: tab.table.rowCount() >= 1, timeout=600_000)
    qtbot.waitUntil(lambda: window.jobs["evaluate"].done, timeout=600_000)
    assert window.errors == [], window.errors
    logged = read_trials(tmp_path / "eval").records
    assert tab.table.rowCount() == len(logged) == 2
    for row, record in enumerate(logged):
        assert tab.table.item(row, 0).text() == str(record.trial)
        assert tab.table.item(row, 4).text() == record.outcome
    assert f"{sum(r.success for r in logged)}/2 sorted" in tab.status.text()


def test_the_script_in_tools_runs_the_studio_from_a_checkout() -> None:
    import subprocess

    root = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(root / "source")  # The core package, as an install provides it.
    done = subprocess.run(
        [sys.executable, str(root / "tools" / "studio.py"), "--help"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: r2s2r-studio") and "--screenshots" in done.stdout
