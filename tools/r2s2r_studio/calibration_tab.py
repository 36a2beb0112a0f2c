"""The Calibration tab: board views captured one at a time with the detected corners drawn
and the good views counted per camera; grounding (calibration, registration, system
identification) with progress and Cancel; its per-view reprojection errors, the registration
overlay and the predicted-vs-measured TCP replay; ``grounded.yaml`` and the report."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import cv2
import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QSettings, QUrl, Signal
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFormLayout,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from r2s2r.app.board import BoardView, capture_board_view, draw_corners
from r2s2r.app.ground import GroundRequest, GroundResult, ground
from r2s2r.app.jobs import Cancel, Progress, ProgressFn
from r2s2r_studio.widgets import CAMERAS, ImageView, PathField

if TYPE_CHECKING:
    from r2s2r_studio.window import StudioWindow


class CalibrationTab(QWidget):
    captured = Signal(object)
    capture_failed = Signal(str)

    def __init__(self, window: StudioWindow) -> None:
        super().__init__()
        self.studio = window
        self.out = PathField("capture and grounding folder")
        self.placement = QSpinBox()
        self.placement.setRange(0, 31)
        self.capture_button = QPushButton("Capture board view")
        self.capture_button.clicked.connect(self.capture_view)
        self.captured.connect(self._show_view)
        self.capture_failed.connect(lambda msg: window.show_error("board", msg))
        self.reuse = QCheckBox("ground the capture already in the folder")
        self.ground_button = QPushButton("Capture and ground")
        self.ground_button.clicked.connect(self.run_ground)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.clicked.connect(self.cancel)
        self.cancel_button.setEnabled(False)
        self.report_button = QPushButton("Open report")
        self.report_button.clicked.connect(self.open_report)
        self.progress = QProgressBar()
        self.status = QLabel("")
        self.status.setWordWrap(True)
        self.counts = QLabel("good views: -")
        form = QFormLayout()
        form.addRow("folder", self.out)
        form.addRow("board placement", self.placement)
        form.addRow(self.capture_button)
        form.addRow(self.counts)
        form.addRow(self.reuse)
        row = QHBoxLayout()
        row.addWidget(self.ground_button)
        row.addWidget(self.cancel_button)
        form.addRow(row)
        form.addRow(self.progress)
        form.addRow(self.report_button)
        form.addRow(self.status)
        left = QWidget()
        left.setLayout(form)
        left.setMaximumWidth(360)

        self.views = {name: ImageView(name) for name in CAMERAS}
        views = QHBoxLayout()
        for v in self.views.values():
            views.addWidget(v)
        self.camera = QComboBox()
        self.camera.addItems(CAMERAS)
        self.camera.currentTextChanged.connect(lambda _: self._plot_errors())
        self.errors_plot = pg.PlotWidget(title="reprojection RMS per view (px)")
        self.errors_plot.setBackground("#202024")
        self.overlay = ImageView("registration overlay")
        self.tcp_plot = pg.PlotWidget(title="held-out TCP replay: rig vs sims (mm)")
        self.tcp_plot.setBackground("#202024")
        self.tcp_plot.addLegend()
        results = QGridLayout()
        errors_box = QVBoxLayout()
        errors_box.addWidget(self.camera)
        errors_box.addWidget(self.errors_plot)
        results.addLayout(errors_box, 0, 0)
        results.addWidget(self.overlay, 0, 1)
        results.addWidget(self.tcp_plot, 1, 0, 1, 2)
        right = QVBoxLayout()
        right.addLayout(views, 2)
        right.addLayout(results, 3)
        layout = QHBoxLayout(self)
        layout.addWidget(left)
        layout.addLayout(right, 1)
        self.last_view: BoardView | None = None
        self.result: GroundResult | None = None
        self.bars = 0

    def restore(self, s: QSettings) -> None:
        self.out.setText(str(s.value("calibration/out", "")))

    def save(self, s: QSettings) -> None:
        s.setValue("calibration/out", self.out.text())

    # ----------------------------------------------------------------- board views
    def capture_view(self) -> None:
        session, out = self.studio.session, self.out.text()
        if session is None:
            self.studio.show_error("board", "error: connect to a rig first (Rig tab)")
            return
        if not out:
            self.studio.show_error("board", "error: choose the capture folder first")
            return
        placement = self.placement.value()
        self.capture_button.setEnabled(False)
        future = session.call(lambda rig, sup: capture_board_view(rig, out, placement))

        def done(f: Any) -> None:
            err = f.exception()
            if err is not None:
                self.capture_failed.emit(f"error: {err}")
            else:
                self.captured.emit(f.result())

        future.add_done_callback(done)

    def _show_view(self, view: BoardView) -> None:
        self.capture_button.setEnabled(True)
        self.last_view = view
        for name, image in view.images.items():
            if name in self.views:
                self.views[name].show_image(draw_corners(image, view.corners[name]))
        self.counts.setText("good views: " + ", ".join(f"{n} {c}" for n, c in view.counts.items()))
        found = [n for n, c in view.corners.items() if c is not None]
        self.status.setText(
            f"placement {view.placement}: board found by {', '.join(found) or 'no camera'}"
        )
        self.placement.setValue(min(view.placement + 1, self.placement.maximum()))

    # ----------------------------------------------------------------- grounding
    def run_ground(self) -> None:
        out = self.out.text()
        if not out:
            self.studio.show_error("ground", "error: choose the capture folder first")
            return
        reuse = self.reuse.isChecked()
        try:
            rig = self.studio.rig_request()
        except ValueError as err:
            self.studio.show_error("ground", f"error: {err}")
            return
        # Grounding a capture already made needs no rig.
        if not reuse and self.studio.take_rig("ground") is None:
            return
        request = GroundRequest(
            out=Path(out), rig=rig.rig, seed=rig.seed, config=rig.config, reuse=reuse
        )

        def job(cancel: Cancel, progress: ProgressFn) -> GroundResult:
            return ground(request, progress, cancel)

        self.ground_button.setEnabled(False)
        self.cancel_button.setEnabled(True)
        self.status.setText("grounding…")
        self.studio.run_job("ground", job, self._grounded, self._progress, self._ended)

    def cancel(self) -> None:
        job = self.studio.jobs.get("ground")
        if job is not None:
            job.cancel()
            self.status.setText("cancelling after the step in progress…")

    def _progress(self, p: Progress) -> None:
        stages = ("capture", "ground", "write")
        k = stages.index(p.stage) if p.stage in stages else 0
        self.progress.setRange(0, 3 * 100)
        frac = p.done / p.total if p.total else 0.0
        self.progress.setFormat(f"{p.stage} {p.done}/{p.total or '?'} {p.message}")
        self.progress.setValue(int(100 * (k + frac)))

    def _ended(self) -> None:
        self.ground_button.setEnabled(True)
        self.cancel_button.setEnabled(False)

    def _grounded(self, result: GroundResult) -> None:
        self.result = result
        self.status.setText(f"wrote {result.world_path} and {result.report_path}")
        self.show_results(result.world_path.parent)

    def show_results(self, folder: Path) -> None:
        """The figures of the grounding just run: per-view errors, the overlay written
        beside ``grounded.yaml`` in ``folder``, the TCP replay."""
        self._plot_errors()
        overlay = Path(folder) / "registration.png"
        if overlay.is_file():
            image = cv2.imread(str(overlay))
            if image is not None:
                self.overlay.show_image(image[:, :, ::-1])
        self._plot_tcp()

    def _plot_errors(self) -> None:
        """Reprojection RMS per view of the chosen camera: the intrinsics fit (cyan) and
        leave-one-out (yellow)."""
        self.errors_plot.clear()
        if self.result is None:
            return
        cam = self.result.grounding.cameras.get(self.camera.currentText())
        if cam is None:
            return
        c = cam.calibration
        views = list(c.views_used)
        x = np.arange(len(views))
        rms = [c.view_rms_px[v] for v in views]
        loo = [c.view_loo_px.get(v, 0.0) for v in views]
        self.errors_plot.addItem(pg.BarGraphItem(x=x - 0.2, height=rms, width=0.4, brush="c"))
        self.errors_plot.addItem(pg.BarGraphItem(x=x + 0.2, height=loo, width=0.4, brush="y"))
        every = max(1, -(-len(views) // 8))  # At most 8 view names under the bars.
        ticks = [(i, v) for i, v in enumerate(views) if i % every == 0]
        self.errors_plot.getAxis("bottom").setTicks([ticks])
        self.bars = len(views)

    def _plot_tcp(self) -> None:
        self.tcp_plot.clear()
        if self.result is None:
            return
        arm = self.result.grounding.sysid.arm
        t, meas = arm.t[0], arm.measured[0]
        self.tcp_plot.plot(t, 1e3 * meas[:, 0], pen=pg.mkPen("w", width=2), name="rig x")
        self.tcp_plot.plot(t, 1e3 * arm.predicted_nominal[0][:, 0], pen="r", name="nominal x")
        self.tcp_plot.plot(t, 1e3 * arm.predicted[0][:, 0], pen="g", name="grounded x")

    def open_report(self) -> None:
        out = self.out.text()
        report = Path(out) / "report.md"
        if not report.is_file():
            self.studio.show_error("ground", f"error: {report}: no grounding report yet")
            return
        QDesktopServices.openUrl(QUrl.fromLocalFile(str(report)))
