"""The Deployment and evaluation tab: a training run, the twin's scripted operator or a
policy server; episodes started and stopped on the rig with the live views and the chunk
timing (inference latency, delay, period jitter) plotted; the safety events as a log; an
evaluation protocol run with its success table filling in; the report."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QSettings, QUrl
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import (
    QComboBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from r2s2r.app.deploy import DeployRequest, DeployResult, deploy
from r2s2r.app.evaluate import EvalRequest, evaluate, write_report
from r2s2r.app.jobs import Cancel, ProgressFn
from r2s2r.app.live import BUDGET_MS, STRIP_MAX_MS, LiveFrame, timing_line
from r2s2r_studio.jobs import Latest
from r2s2r_studio.widgets import LiveViews, PathField, RollingPlot

if TYPE_CHECKING:
    from r2s2r_studio.window import StudioWindow

TRIAL_COLUMNS = ("trial", "condition", "object", "belt m/s", "outcome", "success")


class DeployTab(QWidget):
    def __init__(self, window: StudioWindow) -> None:
        super().__init__()
        self.studio = window
        self._make_deploy_controls()
        self._make_eval_controls()
        left = self._controls_panel()
        right = self._monitor_layout()
        layout = QHBoxLayout(self)
        layout.addWidget(left)
        layout.addLayout(right, 1)
        self._init_job_state()

    def _make_deploy_controls(self) -> None:
        """Create the policy, episode and recording fields and the start and stop buttons."""
        self.source = QComboBox()
        self.source.addItems(["scripted", "run", "server"])
        self.run = PathField("training run folder")
        self.server = QLineEdit()
        self.server.setPlaceholderText("HOST:PORT of r2s2r serve")
        self.token = QLineEdit()
        self.token.setEchoMode(QLineEdit.EchoMode.Password)
        self.episodes = QSpinBox()
        self.episodes.setRange(1, 1000)
        self.max_seconds = QSpinBox()
        self.max_seconds.setRange(0, 600)
        self.max_seconds.setSpecialValueText("task's")
        self.execution = QComboBox()
        self.execution.addItems(["rtc", "blend", "sync"])
        self.record = PathField("record the episodes into (optional)")
        self.start_button = QPushButton("Start episodes")
        self.start_button.clicked.connect(self.start)
        self.stop_button = QPushButton("Stop")
        self.stop_button.clicked.connect(lambda: self._cancel("deploy"))

    def _make_eval_controls(self) -> None:
        """Create the evaluation protocol fields and its run, stop and report buttons."""
        self.protocol = QComboBox()
        self.protocol.addItems(["paper", "smoke"])
        self.protocol.setEditable(True)
        self.trials = QSpinBox()
        self.trials.setRange(0, 1000)
        self.trials.setSpecialValueText("all")
        self.eval_out = PathField("evaluation folder")
        self.eval_button = QPushButton("Run evaluation")
        self.eval_button.clicked.connect(self.run_eval)
        self.eval_stop = QPushButton("Stop evaluation")
        self.eval_stop.clicked.connect(lambda: self._cancel("evaluate"))
        self.report_button = QPushButton("Open report")
        self.report_button.clicked.connect(self.open_report)

    def _controls_panel(self) -> QWidget:
        """The left panel: the deployment and evaluation controls in a form, and the status."""
        self.status = QLabel("")
        self.status.setWordWrap(True)
        form = QFormLayout()
        form.addRow("policy", self.source)
        form.addRow("run", self.run)
        form.addRow("server", self.server)
        form.addRow("token", self.token)
        form.addRow("episodes", self.episodes)
        form.addRow("episode limit (s)", self.max_seconds)
        form.addRow("execution", self.execution)
        form.addRow("record", self.record)
        row = QHBoxLayout()
        row.addWidget(self.start_button)
        row.addWidget(self.stop_button)
        form.addRow(row)
        form.addRow(QLabel("<b>evaluation</b>"))
        form.addRow("protocol", self.protocol)
        form.addRow("trials", self.trials)
        form.addRow("folder", self.eval_out)
        row2 = QHBoxLayout()
        row2.addWidget(self.eval_button)
        row2.addWidget(self.eval_stop)
        form.addRow(row2)
        form.addRow(self.report_button)
        form.addRow(self.status)
        left = QWidget()
        left.setLayout(form)
        left.setMaximumWidth(420)
        return left

    def _monitor_layout(self) -> QVBoxLayout:
        """The right side: the live views, the timing plots, the safety log and the trials."""
        self.views = LiveViews()
        self.timing = QLabel("")
        self.timing.setWordWrap(True)
        self.period_plot = RollingPlot("control period (ms)", ["period"], "ms")
        self.period_plot.setLabel("bottom", "step")
        # The live strip's scale: the 20 ms budget, and periods up to 60 ms.
        self.period_plot.getPlotItem().enableAutoRange(y=False)
        self.period_plot.setYRange(0, STRIP_MAX_MS)
        self.period_plot.addItem(pg.InfiniteLine(BUDGET_MS, angle=0, pen="w"))
        self.chunk_plot = pg.PlotWidget(title="chunks: inference latency (ms) and delay (periods)")
        self.chunk_plot.setBackground("#202024")
        self.chunk_plot.addLegend()
        self.latency_curve = self.chunk_plot.plot(
            pen="c", symbol="o", symbolSize=4, name="latency ms"
        )
        self.delay_curve = self.chunk_plot.plot(pen="y", symbol="t", symbolSize=4, name="delay")
        self.events = QPlainTextEdit()
        self.events.setReadOnly(True)
        self.events.setMaximumBlockCount(1000)
        self.table = QTableWidget(0, len(TRIAL_COLUMNS))
        self.table.setHorizontalHeaderLabels(list(TRIAL_COLUMNS))
        plots = QHBoxLayout()
        plots.addWidget(self.period_plot)
        plots.addWidget(self.chunk_plot)
        lower = QHBoxLayout()
        lower.addWidget(self.events)
        lower.addWidget(self.table)
        right = QVBoxLayout()
        right.addWidget(self.views, 2)
        right.addWidget(self.timing)
        right.addLayout(plots, 2)
        right.addLayout(lower, 2)
        return right

    def _init_job_state(self) -> None:
        """Set up the frame and trial queues the workers fill and the results they leave."""
        self.frames = Latest()
        self.frames.ready.connect(self._show_frame)
        self.trial_rows = Latest()
        self.trial_rows.ready.connect(self._add_trial)
        self._trial_lock = threading.Lock()
        self._trial_queue: list[Any] = []
        self.result: DeployResult | None = None
        self.trials_done: list[Any] = []
        self._seen_events: set[str] = set()
        self._last_step = -1

    def restore(self, s: QSettings) -> None:
        self.run.setText(str(s.value("deploy/run", "")))
        self.eval_out.setText(str(s.value("deploy/eval_out", "")))

    def save(self, s: QSettings) -> None:
        s.setValue("deploy/run", self.run.text())
        s.setValue("deploy/eval_out", self.eval_out.text())

    def _cancel(self, name: str) -> None:
        job = self.studio.jobs.get(name)
        if job is not None and job.running:
            job.cancel()
            self.status.setText(f"stopping {name} after the period in progress…")

    def _policy(self) -> dict[str, Any]:
        """The request's policy fields (``ValueError`` when the form lacks one)."""
        kind = self.source.currentText()
        if kind == "run" and not self.run.text():
            raise ValueError("--policy: choose the training run folder")
        if kind == "server" and not self.server.text().strip():
            raise ValueError("--server: give the policy server's HOST:PORT")
        if kind == "server":
            return {"server": self.server.text().strip(), "token": self.token.text() or None}
        return {"policy": "scripted" if kind == "scripted" else self.run.text()}

    # ----------------------------------------------------------------- deployment
    def start(self) -> None:
        try:
            rig = self.studio.rig_request()
            request = DeployRequest(
                rig=rig.rig,
                config=rig.config,
                realtime=rig.realtime,
                seed=rig.seed,
                episodes=self.episodes.value(),
                execution=self.execution.currentText(),  # type: ignore[arg-type]
                record=Path(self.record.text()) if self.record.text() else None,
                max_seconds=self.max_seconds.value() or None,
                view_every=2,
                **self._policy(),
            )
        except ValueError as err:
            self.studio.show_error("deploy", f"error: {err}")
            return
        if self.studio.take_rig("deploy") is None:
            return
        estop = self.studio.new_estop("deploy")

        def job(cancel: Cancel, progress: ProgressFn) -> DeployResult:
            return deploy(request, progress, cancel, self.frames.put, estop)

        self.start_button.setEnabled(False)
        self.status.setText("deploying…")
        self.studio.run_job("deploy", job, self._deployed, self._progress, self._ended)

    def _show_frame(self) -> None:
        frame: LiveFrame | None = self.frames.take()
        if frame is None:
            return
        self.views.show_views(frame.views)
        self.timing.setText(timing_line(frame))
        for s in frame.steps:
            if s.step > self._last_step or s.step < self._last_step - 500:
                self.period_plot.add(float(s.step), {"period": s.period_ms})
                self._last_step = s.step
        self.period_plot.redraw()
        done = [c for c in frame.chunks if c.arrived_step is not None]
        if done:
            x = np.array([c.index for c in done], float)
            lat = np.array([np.nan if c.latency_ms is None else c.latency_ms for c in done])
            self.latency_curve.setData(x, lat)
            self.delay_curve.setData(x, np.array([c.delay for c in done], float))
        for event in frame.events:
            key = f"{frame.episode}:{event}"
            if key not in self._seen_events:
                self._seen_events.add(key)
                self.events.appendPlainText(f"episode {frame.episode}: {event}")
        if frame.rig is not None:
            self.studio.snapshots.put(frame.rig)

    def _progress(self, p: Any) -> None:
        self.status.setText(f"{p.stage} {p.done}/{p.total} {p.message}")

    def _deployed(self, result: DeployResult) -> None:
        self.result = result
        lines = [
            f"episode {e.index}: {e.summary.get('outcome')} (ended by {e.summary.get('ended_by')})"
            for e in result.episodes
        ]
        if result.estopped:
            lines.append("stopped by the emergency stop")
        self.status.setText("; ".join(lines) or "no episode ran")
        for e in result.episodes:
            for ev in e.summary.get("safety_events", []):
                text = (
                    ev
                    if isinstance(ev, str)
                    else f"{ev.get('device')} {ev.get('kind')}: {ev.get('detail')}"
                )
                self.events.appendPlainText(f"episode {e.index} (log): {text}")

    def _ended(self) -> None:
        self.start_button.setEnabled(True)
        self.eval_button.setEnabled(True)

    # ----------------------------------------------------------------- evaluation
    def run_eval(self) -> None:
        if not self.eval_out.text():
            self.studio.show_error("evaluate", "error: choose the evaluation folder first")
            return
        try:
            rig = self.studio.rig_request()
            request = EvalRequest(
                out=Path(self.eval_out.text()),
                rig=rig.rig,
                config=rig.config,
                protocol=self.protocol.currentText(),
                trials=self.trials.value() or None,
                video="none",
                image_size=128,
                **self._policy(),
            )
        except ValueError as err:
            self.studio.show_error("evaluate", f"error: {err}")
            return
        if self.studio.take_rig("evaluate") is None:
            return
        self.table.setRowCount(0)
        self.trials_done = []

        def job(cancel: Cancel, progress: ProgressFn) -> Any:
            return evaluate(request, progress, cancel, on_trial=self._queue_trial)

        self.eval_button.setEnabled(False)
        self.studio.run_job("evaluate", job, self._evaluated, self._progress, self._ended)

    def _queue_trial(self, record: Any) -> None:
        with self._trial_lock:
            self._trial_queue.append(record)
        self.trial_rows.put(None)

    def _add_trial(self) -> None:
        self.trial_rows.take()
        with self._trial_lock:
            records, self._trial_queue = self._trial_queue, []
        for r in records:
            self.trials_done.append(r)
            row = self.table.rowCount()
            self.table.insertRow(row)
            cells = (r.trial, r.condition, r.object, f"{r.belt_speed:.3f}", r.outcome, r.success)
            for col, value in enumerate(cells):
                text = ("yes" if value else "no") if isinstance(value, bool) else str(value)
                self.table.setItem(row, col, QTableWidgetItem(text))
        n = len(self.trials_done)
        ok = sum(r.success for r in self.trials_done)
        self.status.setText(f"evaluation: {ok}/{n} sorted")

    def _evaluated(self, result: Any) -> None:
        self.status.setText(
            f"evaluation {'stopped' if result.cancelled else 'done'}: "
            f"{result.successes}/{len(result.records)} sorted ({result.out})"
        )

    def open_report(self) -> None:
        out = self.eval_out.text()
        if not out:
            self.studio.show_error("evaluate", "error: choose the evaluation folder first")
            return

        def job(cancel: Cancel, progress: ProgressFn) -> Path:
            return write_report([Path(out)], Path(out) / "report")

        def show(html: Path) -> None:
            QDesktopServices.openUrl(QUrl.fromLocalFile(str(html)))

        self.studio.run_job("report", job, show)
