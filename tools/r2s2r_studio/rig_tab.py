"""The Rig tab: connect to the twin or to the real cell, watch its three cameras and plots of
its devices, set the belt speed, see the safety supervisor's state."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from r2s2r.app.live import RigSnapshot
from r2s2r.app.rigs import rig_kinds
from r2s2r.app.session import RigRequest
from r2s2r_studio.widgets import LiveViews, PathField, RigPlots

if TYPE_CHECKING:
    from r2s2r_studio.window import StudioWindow

SAFETY_COLOURS = {"armed": "#3c3", "holding": "#fa2", "stopped": "#e33"}


class RigTab(QWidget):
    def __init__(self, window: StudioWindow) -> None:
        super().__init__()
        self.studio = window
        form = QFormLayout()
        self.kind = QComboBox()
        self.kind.addItems(list(rig_kinds()))
        self.seed = QSpinBox()
        self.seed.setRange(0, 1_000_000)
        self.realtime = QCheckBox("pace the twin to the wall clock")
        self.realtime.setChecked(True)
        self.native = QCheckBox("cameras at their own resolution (calibration)")
        self.image_size = QSpinBox()
        self.image_size.setRange(16, 2048)
        self.image_size.setValue(256)
        self.config = PathField("the cell's hardware YAML", file=True)
        form.addRow("rig", self.kind)
        form.addRow("twin seed", self.seed)
        form.addRow("", self.realtime)
        form.addRow("twin views (px)", self.image_size)
        form.addRow("", self.native)
        form.addRow("hardware YAML", self.config)
        self.connect_button = QPushButton("Connect")
        self.disconnect_button = QPushButton("Disconnect")
        self.connect_button.clicked.connect(self.connect_rig)
        self.disconnect_button.clicked.connect(window.disconnect_rig)
        buttons = QHBoxLayout()
        buttons.addWidget(self.connect_button)
        buttons.addWidget(self.disconnect_button)
        self.belt = QDoubleSpinBox()
        self.belt.setRange(0.0, 0.5)
        self.belt.setSingleStep(0.01)
        self.belt.setDecimals(3)
        self.belt.setSuffix(" m/s")
        self.set_belt = QPushButton("Set belt speed")
        self.set_belt.clicked.connect(self._set_belt)
        belt_row = QHBoxLayout()
        belt_row.addWidget(self.belt)
        belt_row.addWidget(self.set_belt)
        form.addRow(buttons)
        form.addRow("belt", belt_row)
        self.safety = QLabel("safety: not connected")
        self.safety.setWordWrap(True)
        self.release = QPushButton("Release e-stop")
        self.release.clicked.connect(window.release_estop)
        form.addRow(self.safety)
        form.addRow(self.release)
        self.state = QLabel("not connected")
        form.addRow(self.state)

        left = QWidget()
        left.setLayout(form)
        left.setMaximumWidth(360)
        self.views = LiveViews()
        self.plots = RigPlots()
        right = QVBoxLayout()
        right.addWidget(self.views, 2)
        right.addWidget(self.plots, 3)
        layout = QHBoxLayout(self)
        layout.addWidget(left)
        layout.addLayout(right, 1)

    def request(self) -> RigRequest:
        """The rig the form describes (``ValueError`` naming what is wrong)."""
        config = self.config.text() or None
        return RigRequest(
            rig=self.kind.currentText(),
            seed=self.seed.value(),
            realtime=self.realtime.isChecked(),
            config=config,  # type: ignore[arg-type]
            image_size=self.image_size.value(),
            native_cameras=self.native.isChecked(),
        )

    def connect_rig(self) -> None:
        try:
            request = self.request()
        except ValueError as err:
            self.studio.show_error("rig", f"error: {err}")
            return
        self.studio.connect_rig(request)

    def _set_belt(self) -> None:
        session = self.studio.session
        if session is None:
            self.studio.show_error("rig", "error: connect to a rig first")
            return
        session.call(lambda rig, sup: rig.conveyor.set_speed(self.belt.value()))

    def show_snapshot(self, snap: RigSnapshot, visible: bool = True) -> None:
        """Add ``snap`` to the plots; draw the views only where the tab is in view."""
        if visible:
            self.views.show_views(snap.views)
        self.plots.add(snap)
        safety = snap.safety
        colour = SAFETY_COLOURS[safety.state]
        modes = ", ".join(f"{side} {mode}" for side, mode in safety.modes.items())
        latched = " (e-stop latched)" if safety.estopped else ""
        self.safety.setText(
            f"<span style='color:{colour}'><b>{safety.state.upper()}</b></span>{latched} "
            f"— {modes}<br>last event: {safety.last_event or 'none'}"
        )

    def redraw(self) -> None:
        self.plots.redraw()
