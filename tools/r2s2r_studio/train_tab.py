"""The Co-training tab: the real dataset and the simulated ones, α, the preset and the steps;
training runs as a separate ``r2s2r train`` process (a crash of it leaves the GUI up, and it
goes on when the GUI closes); its loss and learning-rate curves are read from the run folder
as they grow; stop (a checkpoint is saved) and resume."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QSettings, QTimer
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from r2s2r.app.train_process import TrainingProcess, TrainLaunch, read_metrics
from r2s2r_studio.widgets import PathField

if TYPE_CHECKING:
    from r2s2r_studio.window import StudioWindow

PRESETS = ("tiny", "500m", "2b")


class TrainTab(QWidget):
    def __init__(self, window: StudioWindow) -> None:
        super().__init__()
        self.studio = window
        sim_row = self._make_dataset_fields()
        self._make_training_fields()
        left = self._controls_panel(sim_row)
        plots = self._plots_layout()
        layout = QHBoxLayout(self)
        layout.addWidget(left)
        layout.addLayout(plots, 1)
        self.process: TrainingProcess | None = None
        self.reported: TrainingProcess | None = None
        self.points = 0
        self.timer = QTimer(self)
        self.timer.timeout.connect(self.poll)
        self.timer.start(500)

    def _make_dataset_fields(self) -> QHBoxLayout:
        """Create the real dataset field and the list of simulated ones; returns the row that
        adds to and removes from that list."""
        self.real = PathField("real dataset")
        self.sim = PathField("a simulated dataset to add")
        self.sims = QListWidget()
        add = QPushButton("Add")
        add.clicked.connect(self._add_sim)
        remove = QPushButton("Remove")
        remove.clicked.connect(lambda: self.sims.takeItem(self.sims.currentRow()))
        sim_row = QHBoxLayout()
        sim_row.addWidget(self.sim)
        sim_row.addWidget(add)
        sim_row.addWidget(remove)
        return sim_row

    def _make_training_fields(self) -> None:
        """Create the mixing, preset, schedule, device and run-folder fields and the launch,
        resume and stop buttons."""
        self.use_alpha = QCheckBox("set α (share of real data per batch)")
        self.alpha = QDoubleSpinBox()
        self.alpha.setRange(0.0, 1.0)
        self.alpha.setSingleStep(0.05)
        self.alpha.setValue(0.5)
        self.preset = QComboBox()
        self.preset.addItems(PRESETS)
        self.preset.setEditable(True)
        self.steps = QSpinBox()
        self.steps.setRange(1, 10_000_000)
        self.steps.setValue(30_000)
        self.batch = QSpinBox()
        self.batch.setRange(1, 4096)
        self.batch.setValue(32)
        self.log_every = QSpinBox()
        self.log_every.setRange(1, 100_000)
        self.log_every.setValue(10)
        self.workers = QSpinBox()
        self.workers.setRange(0, 64)
        self.workers.setValue(2)
        self.device = QComboBox()
        self.device.addItems(["auto", "cpu", "cuda"])
        self.out = PathField("run folder")
        self.launch_button = QPushButton("Launch")
        self.launch_button.clicked.connect(lambda: self.launch(resume=False))
        self.resume_button = QPushButton("Resume")
        self.resume_button.clicked.connect(lambda: self.launch(resume=True))
        self.stop_button = QPushButton("Stop (saves a checkpoint)")
        self.stop_button.clicked.connect(self.stop)

    def _controls_panel(self, sim_row: QHBoxLayout) -> QWidget:
        """The left panel: the datasets and training fields in a form, and the status."""
        self.status = QLabel("")
        self.status.setWordWrap(True)
        form = QFormLayout()
        form.addRow("real dataset", self.real)
        form.addRow("simulated", sim_row)
        form.addRow(self.sims)
        form.addRow(self.use_alpha, self.alpha)
        form.addRow("preset", self.preset)
        form.addRow("steps", self.steps)
        form.addRow("batch size", self.batch)
        form.addRow("log every", self.log_every)
        form.addRow("loader workers", self.workers)
        form.addRow("device", self.device)
        form.addRow("run folder", self.out)
        row = QHBoxLayout()
        for b in (self.launch_button, self.resume_button, self.stop_button):
            row.addWidget(b)
        form.addRow(row)
        form.addRow(self.status)
        left = QWidget()
        left.setLayout(form)
        left.setMaximumWidth(460)
        return left

    def _plots_layout(self) -> QVBoxLayout:
        """The loss and learning-rate plots, one above the other."""
        self.loss_plot = pg.PlotWidget(title="loss")
        self.lr_plot = pg.PlotWidget(title="learning rate")
        for plot in (self.loss_plot, self.lr_plot):
            plot.setBackground("#202024")
            plot.showGrid(x=True, y=True, alpha=0.3)
            plot.setLabel("bottom", "step")
        self.loss_curve = self.loss_plot.plot(pen=pg.mkPen("c", width=2), symbol="o", symbolSize=4)
        self.lr_curve = self.lr_plot.plot(pen=pg.mkPen("y", width=2))
        plots = QVBoxLayout()
        plots.addWidget(self.loss_plot)
        plots.addWidget(self.lr_plot)
        return plots

    def restore(self, s: QSettings) -> None:
        self.real.setText(str(s.value("train/real", "")))
        self.out.setText(str(s.value("train/out", "")))
        sims: Any = s.value("train/sims", [])
        for sim in [sims] if isinstance(sims, str) else list(sims or []):
            if sim:
                self.sims.addItem(str(sim))

    def save(self, s: QSettings) -> None:
        s.setValue("train/real", self.real.text())
        s.setValue("train/out", self.out.text())
        s.setValue("train/sims", [self.sims.item(i).text() for i in range(self.sims.count())])

    def _add_sim(self) -> None:
        if self.sim.text():
            self.sims.addItem(self.sim.text())
            self.sim.setText("")

    def request(self, resume: bool) -> TrainLaunch:
        return TrainLaunch(
            out=Path(self.out.text()),
            preset=self.preset.currentText(),
            real=Path(self.real.text()) if self.real.text() else None,
            sims=tuple(Path(self.sims.item(i).text()) for i in range(self.sims.count())),
            alpha=self.alpha.value() if self.use_alpha.isChecked() else None,
            steps=self.steps.value(),
            batch_size=self.batch.value(),
            log_every=self.log_every.value(),
            workers=self.workers.value(),
            device=self.device.currentText(),
            resume=resume,
        )

    def launch(self, resume: bool) -> None:
        if self.process is not None and self.process.poll() is None:
            self.studio.show_error("train", "error: a training run is already going")
            return
        if not self.out.text():
            self.studio.show_error("train", "error: choose the run folder first")
            return
        try:
            launch = self.request(resume)
        except ValueError as err:
            self.studio.show_error("train", f"error: {err}")
            return
        self.process = TrainingProcess(launch)
        self.status.setText(f"training (pid {self.process.pid}) into {launch.out}")
        self.studio.statusBar().showMessage(f"training started: {launch.out}", 5000)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.status.setText("stopping: saving a checkpoint…")
        code = self.process.stop()
        self.status.setText(f"stopped (exit {code}): resume continues from the checkpoint")

    def poll(self) -> None:
        """Redraw the curves from the run folder; say how the process ended."""
        out = self.out.text()
        if out:
            rows = read_metrics(out)
            if len(rows) != self.points:
                self.points = len(rows)
                steps = np.array([r["step"] for r in rows])
                self.loss_curve.setData(steps, np.array([r["loss"] for r in rows]))
                self.lr_curve.setData(steps, np.array([r["lr"] for r in rows]))
        proc = self.process
        if proc is not None and proc.poll() is not None and self.reported is not proc:
            self.reported = proc
            failure = proc.failure()
            # A stopped run exits on SIGINT after saving its checkpoint: not a failure.
            if failure is not None and proc.poll() not in (-2, 130):
                self.studio.show_error("train", failure)
            else:
                self.status.setText(f"run ended (exit {proc.poll()}), {self.points} logged steps")

    def detach(self) -> None:
        """The window closes: the run goes on by itself."""
        self.timer.stop()
        if self.process is not None and self.process.poll() is None:
            import logging

            logging.getLogger("r2s2r.studio").info(
                "training (pid %d) goes on in %s", self.process.pid, self.process.out
            )
