"""The main window: the tabs, the emergency stop (always visible, bound to a key from any
tab), the status bar (rig state, safety, frame rate), the log, and the one rig connection and
the jobs the tabs start."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, QSettings, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QDockWidget,
    QLabel,
    QMainWindow,
    QPlainTextEdit,
    QPushButton,
    QTabWidget,
    QToolBar,
)

from r2s2r.app.deploy import EmergencyStop
from r2s2r.app.jobs import Cancel, ProgressFn
from r2s2r.app.live import RigSnapshot
from r2s2r.app.session import RigRequest, RigSession
from r2s2r_studio.jobs import Job, Latest
from r2s2r_studio.widgets import LiveViews

log = logging.getLogger("r2s2r.studio")
ESTOP_KEYS = ("Escape", "F12")
PLOT_PERIOD_MS = 333


class _LogBridge(QObject, logging.Handler):
    """Log records from any thread, as a signal to the UI thread."""

    line = Signal(str)

    def __init__(self) -> None:
        QObject.__init__(self)
        logging.Handler.__init__(self, logging.INFO)
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:  # type: ignore[override]
        # The supervisor's routine events (clamped, limited targets: every period at times)
        # are in the Rig tab's safety state; its warnings come through.
        if record.name == "r2s2r.safety" and record.levelno < logging.WARNING:
            return
        with contextlib.suppress(RuntimeError):  # The window is gone.
            self.line.emit(self.format(record))


class StudioWindow(QMainWindow):
    def __init__(self, settings: QSettings | None = None) -> None:
        super().__init__()
        self.setWindowTitle("r2s2r Studio")
        self.settings = settings or QSettings("r2s2r", "studio")
        self.session: RigSession | None = None
        self.session_request: RigRequest | None = None
        self.jobs: dict[str, Job] = {}
        self.estops: dict[str, EmergencyStop] = {}
        self.errors: list[str] = []
        self.snapshots = Latest()
        self.snapshots.ready.connect(self._on_snapshot)
        self.last_snapshot: RigSnapshot | None = None
        self._add_tabs()
        self._add_estop()
        dock = self._add_log_dock()
        self._add_menus(dock)
        self._add_status_bar()
        self.timer = QTimer(self)
        self.timer.timeout.connect(self._tick)
        # Plots redraw at 3 Hz at most (the views at every snapshot): on a software-rendered
        # display the plots, not the views, cost the most.
        self.timer.start(PLOT_PERIOD_MS)
        self.restore_settings()

    def _add_tabs(self) -> None:
        """Create the five tabs and make their tab widget the central one."""
        from r2s2r_studio.calibration_tab import CalibrationTab
        from r2s2r_studio.deploy_tab import DeployTab
        from r2s2r_studio.record_tab import RecordTab
        from r2s2r_studio.rig_tab import RigTab
        from r2s2r_studio.train_tab import TrainTab

        self.tabs = QTabWidget()
        self.rig_tab = RigTab(self)
        self.calibration_tab = CalibrationTab(self)
        self.record_tab = RecordTab(self)
        self.train_tab = TrainTab(self)
        self.deploy_tab = DeployTab(self)
        for tab, name in (
            (self.rig_tab, "Rig"),
            (self.calibration_tab, "Calibration"),
            (self.record_tab, "Teleop recording"),
            (self.train_tab, "Co-training"),
            (self.deploy_tab, "Deployment && evaluation"),
        ):
            self.tabs.addTab(tab, name)
        self.setCentralWidget(self.tabs)

    def _add_estop(self) -> None:
        """Add the emergency stop: a toolbar button always in view and keys that work from
        any tab."""
        bar = QToolBar("Emergency stop")
        bar.setObjectName("estop_bar")
        bar.setMovable(False)
        self.estop_button = QPushButton(f"EMERGENCY STOP  ({' / '.join(ESTOP_KEYS)})")
        self.estop_button.setObjectName("estop")
        self.estop_button.setStyleSheet(
            "QPushButton{background:#c00;color:white;font-weight:bold;padding:8px 24px;}"
        )
        self.estop_button.clicked.connect(lambda: self.emergency_stop("e-stop button"))
        bar.addWidget(self.estop_button)
        self.addToolBar(Qt.ToolBarArea.TopToolBarArea, bar)
        self.estop_shortcuts = []
        for key in ESTOP_KEYS:
            shortcut = QShortcut(QKeySequence(key), self)
            shortcut.setContext(Qt.ShortcutContext.ApplicationShortcut)
            shortcut.activated.connect(lambda k=key: self.emergency_stop(f"e-stop key {k}"))
            self.estop_shortcuts.append(shortcut)

    def _add_log_dock(self) -> QDockWidget:
        """Add the log dock that shows r2s2r's log records; returns it."""
        self.log_view = QPlainTextEdit()
        self.log_view.setReadOnly(True)
        self.log_view.setMaximumBlockCount(2000)
        dock = QDockWidget("Log")
        dock.setObjectName("log_dock")
        dock.setWidget(self.log_view)
        self.addDockWidget(Qt.DockWidgetArea.BottomDockWidgetArea, dock)
        self._log_bridge = _LogBridge()
        self._log_bridge.line.connect(self.log_view.appendPlainText)
        logging.getLogger("r2s2r").addHandler(self._log_bridge)
        return dock

    def _add_menus(self, dock: QDockWidget) -> None:
        """Add the View menu (the log dock's toggle) and the File menu (Quit)."""
        view_menu = self.menuBar().addMenu("&View")
        view_menu.addAction(dock.toggleViewAction())
        quit_action = QAction("&Quit", self)
        quit_action.triggered.connect(self.close)
        self.menuBar().addMenu("&File").addAction(quit_action)

    def _add_status_bar(self) -> None:
        """Add the rig, safety and view-rate labels and the error line to the status bar."""
        self.rig_state = QLabel("rig: not connected")
        self.safety_state = QLabel("safety: -")
        self.fps_label = QLabel("views: - fps")
        self.error_label = QLabel("")
        self.error_label.setStyleSheet("color:#e33;")
        for widget in (self.rig_state, self.safety_state, self.fps_label):
            self.statusBar().addPermanentWidget(widget)
        self.statusBar().addWidget(self.error_label, 1)

    # ------------------------------------------------------------------ settings
    def restore_settings(self) -> None:
        s = self.settings
        geometry, state = s.value("window/geometry"), s.value("window/state")
        if geometry is not None:
            self.restoreGeometry(geometry)
        else:
            self.resize(1400, 900)
        if state is not None:
            self.restoreState(state)
        for tab in (self.rig_tab, self.calibration_tab, self.record_tab, self.train_tab):
            restore = getattr(tab, "restore", None)
            if restore is not None:
                restore(s)
        self.deploy_tab.restore(s)
        self.rig_tab.kind.setCurrentText(str(s.value("rig/kind", "twin")))
        self.rig_tab.seed.setValue(int(str(s.value("rig/seed", 0))))
        self.rig_tab.realtime.setChecked(str(s.value("rig/realtime", "true")) == "true")
        self.rig_tab.config.setText(str(s.value("rig/config", "")))

    def save_settings(self) -> None:
        s = self.settings
        s.setValue("window/geometry", self.saveGeometry())
        s.setValue("window/state", self.saveState())
        s.setValue("rig/kind", self.rig_tab.kind.currentText())
        s.setValue("rig/seed", self.rig_tab.seed.value())
        s.setValue("rig/realtime", "true" if self.rig_tab.realtime.isChecked() else "false")
        s.setValue("rig/config", self.rig_tab.config.text())
        for tab in (self.calibration_tab, self.record_tab, self.train_tab, self.deploy_tab):
            tab.save(s)
        s.sync()

    # ------------------------------------------------------------------ the rig
    def connect_rig(self, request: RigRequest) -> None:
        """Open ``request``'s rig on a worker (opening the twin takes seconds)."""
        if self.session is not None:
            self.disconnect_rig()
        if self.busy_with_rig():
            self.show_error("rig", f"error: the rig is in use by {self.busy_with_rig()}")
            return
        self.rig_state.setText(f"rig: connecting to the {request.rig}…")

        def open_session(cancel: Cancel, progress: ProgressFn) -> RigSession:
            return RigSession(request, on_snapshot=self.snapshots.put)

        def opened(session: RigSession) -> None:
            self.session, self.session_request = session, request
            what = (
                f"{request.rig} seed {request.seed}" if session.kind.truth else str(request.config)
            )
            self.rig_state.setText(f"rig: connected ({what})")
            self.rig_tab.state.setText(f"connected: {what}")
            log.info("connected to the %s", what)

        self.run_job("connect", open_session, opened)

    def disconnect_rig(self) -> None:
        session, self.session = self.session, None
        if session is not None:
            session.close()
            log.info("disconnected from the rig")
        self.rig_state.setText("rig: not connected")
        self.rig_tab.state.setText("not connected")

    def rig_request(self) -> RigRequest:
        """The rig the Rig tab names (jobs open it themselves)."""
        return self.rig_tab.request()

    def take_rig(self, job: str) -> RigRequest | None:
        """Hand the rig to ``job``: the live session closes (a cell's devices have one owner);
        None (with the error shown) if another job has it or the Rig tab's form is wrong."""
        busy = self.busy_with_rig()
        if busy:
            self.show_error(job, f"error: the rig is in use by {busy}")
            return None
        try:
            request = self.rig_request()
        except ValueError as err:
            self.show_error(job, f"error: {err}")
            return None
        self.disconnect_rig()
        self.rig_state.setText(f"rig: in use by {job}")
        return request

    def busy_with_rig(self) -> str | None:
        for name in ("connect", "record", "ground", "deploy", "evaluate"):
            job = self.jobs.get(name)
            if job is not None and job.running:
                return name
        return None

    def emergency_stop(self, reason: str = "emergency stop") -> None:
        """Stop every arm now: the live session's and every running job's (thread-safe: the
        stops happen in the calling thread, under each supervisor's lock)."""
        session = self.session
        if session is not None:
            session.emergency_stop(reason)
        for estop in list(self.estops.values()):
            estop.trigger(reason)
        self.estopped = True
        log.warning("EMERGENCY STOP (%s)", reason)
        self.safety_state.setText("safety: E-STOP")
        self.safety_state.setStyleSheet("color:#e33;font-weight:bold;")

    estopped = False

    def release_estop(self) -> None:
        if self.session is not None:
            self.session.release_estop()
        self.estopped = False
        self.safety_state.setStyleSheet("")
        log.info("e-stop released")

    def new_estop(self, job: str) -> EmergencyStop:
        """An emergency stop for ``job``, pressed already if the e-stop is latched."""
        estop = EmergencyStop()
        if self.estopped:
            estop.trigger("e-stop latched before the job started")
        self.estops[job] = estop
        return estop

    # ------------------------------------------------------------------ jobs
    def run_job(
        self,
        name: str,
        fn: Callable[[Cancel, ProgressFn], Any],
        on_done: Callable[[Any], None] | None = None,
        on_progress: Callable[[Any], None] | None = None,
        on_end: Callable[[], None] | None = None,
    ) -> Job | None:
        old = self.jobs.get(name)
        if old is not None and old.running:
            self.show_error(name, f"error: {name} is already running")
            return None
        job = Job(name, fn)
        if on_done is not None:
            job.finished.connect(on_done)
        if on_progress is not None:
            job.progress.connect(on_progress)
        job.failed.connect(lambda msg: self.show_error(name, msg))
        job.cancelled.connect(lambda msg: self.statusBar().showMessage(msg, 5000))

        def ended() -> None:
            self.estops.pop(name, None)
            if on_end is not None:
                on_end()
            if self.session is None and self.busy_with_rig() is None:
                self.rig_state.setText("rig: not connected")

        job.ended.connect(ended)
        self.jobs[name] = job
        self.error_label.setText("")
        return job.start()

    def show_error(self, where: str, message: str) -> None:
        """Show ``message`` (the CLI's words) in the window and log it."""
        self.errors.append(message)
        self.error_label.setText(f"{where}: {message}")
        log.error("%s: %s", where, message)
        tab = {
            "ground": self.calibration_tab,
            "board": self.calibration_tab,
            "record": self.record_tab,
            "playback": self.record_tab,
            "train": self.train_tab,
            "deploy": self.deploy_tab,
            "evaluate": self.deploy_tab,
        }.get(where)
        status = getattr(tab, "status", None)
        if isinstance(status, QLabel):
            status.setText(f"<span style='color:#e33'>{message}</span>")

    # ------------------------------------------------------------------ live data
    def _on_snapshot(self) -> None:
        snap = self.snapshots.take()
        if snap is None:
            return
        self.last_snapshot = snap
        current = self.tabs.currentWidget()
        self.rig_tab.show_snapshot(snap, visible=current is self.rig_tab)
        show = getattr(current, "show_snapshot", None)
        if show is not None and current is not self.rig_tab:
            show(snap)
        if not self.estopped:
            state = snap.safety.state
            self.safety_state.setText(f"safety: {state}")

    def _tick(self) -> None:
        current = self.tabs.currentWidget()
        if current is self.rig_tab:
            start = time.perf_counter()
            self.rig_tab.redraw()
            # The plots yield to the views on a busy machine: their redraws (and the paints
            # that follow) take at most about a tenth of the UI thread's time.
            spent_ms = 1e3 * (time.perf_counter() - start)
            self.timer.setInterval(int(min(max(PLOT_PERIOD_MS, 25 * spent_ms), 2000)))
        views = getattr(current, "views", None)
        fps = views.fps if isinstance(views, LiveViews) else self.rig_tab.views.fps
        self.fps_label.setText(f"views: {fps:.1f} fps")

    # ------------------------------------------------------------------ closing
    def closeEvent(self, event: Any) -> None:  # noqa: N802 - Qt's naming
        """Save the settings, end every worker (cancelled, then joined) and release the rig;
        a training process goes on (its run folder holds everything)."""
        self.save_settings()
        self.timer.stop()
        for name, job in list(self.jobs.items()):
            if job.running and not job.stop(60):
                log.warning("%s did not stop within 60 s", name)
        self.disconnect_rig()
        self.train_tab.detach()
        logging.getLogger("r2s2r").removeHandler(self._log_bridge)
        super().closeEvent(event)
