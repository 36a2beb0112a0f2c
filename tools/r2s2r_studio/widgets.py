"""The widgets every tab shares: camera views, rolling pyqtgraph plots of the rig's devices,
and a path field with a browse button."""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Sequence

import numpy as np

os.environ.setdefault("PYQTGRAPH_QT_LIB", "PySide6")

import pyqtgraph as pg  # noqa: E402
from PySide6.QtCore import Qt  # noqa: E402
from PySide6.QtGui import QImage, QPixmap  # noqa: E402
from PySide6.QtWidgets import (  # noqa: E402
    QFileDialog,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from r2s2r.app.live import RigSnapshot  # noqa: E402

CAMERAS = ("head", "left_wrist", "right_wrist")
# Samples the rolling plots keep (10 s at 25 snapshots/s).
HISTORY = 250
# The joint of each finger the hand plot shows (0-based within the finger's four, the
# vendor's order): joint 1, the knuckle's flexion (the thumb's: its swing across the palm).
HAND_JOINTS = (0,)


def to_qimage(image: np.ndarray) -> QImage:
    """An (H, W, 3) uint8 RGB array as a QImage (copied: the array may be reused)."""
    rgb = np.ascontiguousarray(image[..., :3], dtype=np.uint8)
    h, w = rgb.shape[:2]
    return QImage(rgb.data, w, h, 3 * w, QImage.Format.Format_RGB888).copy()


class ImageView(QLabel):
    """One camera view, scaled to fit, with its name and frame rate as a caption."""

    def __init__(self, name: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.name = name
        self.setMinimumSize(160, 120)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.setStyleSheet("background:#18181c; color:#ddd;")
        self.setText(f"{name}: no view")
        self.frames = 0
        self.image: np.ndarray | None = None
        self._stamps: deque[float] = deque(maxlen=30)

    def show_image(self, image: np.ndarray) -> None:
        self.image = image
        self.frames += 1
        self._stamps.append(time.monotonic())
        pix = QPixmap.fromImage(to_qimage(image))
        self.setPixmap(
            pix.scaled(
                self.size(),
                Qt.AspectRatioMode.KeepAspectRatio,
                Qt.TransformationMode.FastTransformation,
            )
        )
        self.setToolTip(f"{self.name}: {image.shape[1]}x{image.shape[0]}, {self.fps:.1f} fps")

    @property
    def fps(self) -> float:
        """Frames shown per second over the last 30."""
        if len(self._stamps) < 2:
            return 0.0
        span = self._stamps[-1] - self._stamps[0]
        return (len(self._stamps) - 1) / span if span > 0 else 0.0


class LiveViews(QWidget):
    """The rig's three camera views side by side."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.views = {name: ImageView(name) for name in CAMERAS}
        for view in self.views.values():
            layout.addWidget(view)

    def show_views(self, images: dict[str, np.ndarray]) -> None:
        for name, image in images.items():
            if name in self.views:
                self.views[name].show_image(image)

    @property
    def fps(self) -> float:
        rates = [v.fps for v in self.views.values() if v.frames]
        return min(rates) if rates else 0.0


class RollingPlot(pg.PlotWidget):
    """A plot of the last ``HISTORY`` samples of a few named series."""

    def __init__(
        self,
        title: str,
        names: Sequence[str],
        units: str = "",
        window: float | None = None,
        y_range: tuple[float, float] | None = None,
    ) -> None:
        super().__init__(title=title)
        self.setBackground("#202024")
        self.showGrid(x=True, y=True, alpha=0.3)
        # With ``window``, x is time before the newest sample over a fixed range (the axes
        # are not redrawn at every update, which is most of a plot's cost).
        self.window = window
        if window is not None:
            self.setXRange(-window, 0, padding=0)
            self.setMouseEnabled(x=False, y=True)
            self.getPlotItem().enableAutoRange(x=False, y=y_range is None)
        if y_range is not None:
            self.setYRange(*y_range, padding=0.02)
        self.setLabel("bottom", "t - now" if window is not None else "t", units="s")
        if units:
            self.setLabel("left", units)
        if len(names) <= 8:
            self.addLegend(offset=(5, 5))
        self.t: deque[float] = deque(maxlen=HISTORY)
        self.data: dict[str, deque[float]] = {n: deque(maxlen=HISTORY) for n in names}
        self.curves = {
            n: self.plot(name=n, pen=pg.mkPen(pg.intColor(i, len(names)), width=1.5))
            for i, n in enumerate(names)
        }

    def add(self, t: float, values: dict[str, float]) -> None:
        if self.t and t < self.t[-1]:
            # A new episode restarted the rig clock.
            self.t.clear()
            for d in self.data.values():
                d.clear()
        self.t.append(t)
        for name, series in self.data.items():
            series.append(float(values.get(name, np.nan)))

    def redraw(self) -> None:
        t = np.fromiter(self.t, float)
        if self.window is not None and len(t):
            t = t - t[-1]
        for name, curve in self.curves.items():
            curve.setData(t, np.fromiter(self.data[name], float))

    @property
    def samples(self) -> int:
        return len(self.t)


class RigPlots(QWidget):
    """Live plots of TCP positions, arm joints, hand joints and the belt speed."""

    def __init__(self, sides: Sequence[str] = ("left", "right")) -> None:
        super().__init__()
        grid = QGridLayout(self)
        grid.setContentsMargins(0, 0, 0, 0)
        tcp = [f"{s} {a}" for s in sides for a in "xyz"]
        arm = [f"{s} j{j + 1}" for s in sides for j in range(7)]
        # One joint of every finger per hand (its first, the flexion; all 20 would not read).
        hand = [f"{s} f{f + 1}j{j + 1}" for s in sides for f in range(5) for j in HAND_JOINTS]
        span = HISTORY / 25.0
        # Fixed ranges (the cell's workspace, the joints' ranges; drag to zoom): a plot whose
        # axes change repaints them at every update.
        self.tcp = RollingPlot("TCP position", tcp, "m", span, (-1.0, 1.2))
        self.arm = RollingPlot("arm joints", arm, "rad", span, (-3.1, 3.1))
        self.hand = RollingPlot("hand joints", hand, "rad", span, (-0.5, 1.8))
        self.belt = RollingPlot("belt speed", ["belt"], "m/s", span, (0.0, 0.3))
        for i, plot in enumerate((self.tcp, self.arm, self.hand, self.belt)):
            grid.addWidget(plot, i // 2, i % 2)

    def add(self, snap: RigSnapshot) -> None:
        t = snap.t
        self.tcp.add(
            t, {f"{s} {a}": p[k] for s, p in snap.tcp.items() for k, a in enumerate("xyz")}
        )
        self.arm.add(
            t, {f"{s} j{j + 1}": q[j] for s, q in snap.arm_q.items() for j in range(len(q))}
        )
        self.hand.add(
            t,
            {
                f"{s} f{f + 1}j{j + 1}": q[4 * f + j]
                for s, q in snap.hand_q.items()
                for f in range(5)
                for j in HAND_JOINTS
                if len(q) >= 20
            },
        )
        self.belt.add(t, {"belt": snap.belt_speed})

    def redraw(self) -> None:
        for plot in (self.tcp, self.arm, self.hand, self.belt):
            plot.redraw()


class PathField(QWidget):
    """A path typed or chosen with a dialog (a folder, or a file where ``file``)."""

    def __init__(self, placeholder: str = "", file: bool = False) -> None:
        super().__init__()
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.edit = QLineEdit()
        self.edit.setPlaceholderText(placeholder)
        self.button = QPushButton("…")
        self.button.setFixedWidth(28)
        self.button.clicked.connect(self._browse)
        self.file = file
        layout.addWidget(self.edit)
        layout.addWidget(self.button)

    def _browse(self) -> None:
        if self.file:
            path, _ = QFileDialog.getOpenFileName(self, "Choose a file", self.text())
        else:
            path = QFileDialog.getExistingDirectory(self, "Choose a folder", self.text())
        if path:
            self.edit.setText(path)

    def text(self) -> str:
        return self.edit.text().strip()

    def setText(self, text: str) -> None:  # noqa: N802 - Qt's naming
        self.edit.setText(text)


def titled(title: str, widget: QWidget) -> QWidget:
    """``widget`` under a bold title."""
    box = QWidget()
    layout = QVBoxLayout(box)
    layout.setContentsMargins(0, 0, 0, 0)
    label = QLabel(f"<b>{title}</b>")
    layout.addWidget(label)
    layout.addWidget(widget)
    return box
