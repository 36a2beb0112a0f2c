"""The Teleop recording tab: start, save, save as failed, discard and redo takes (the keys of
``r2s2r record --keyboard``, through the same recorder: a discarded take never reaches the
disk); the dataset's episodes with their success labels; playback of any episode with a
scrubber over its three views and its actions."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QSettings, Qt
from PySide6.QtWidgets import (
    QFormLayout,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSlider,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from r2s2r.app.episodes import EpisodePlayback, list_episodes, load_episode
from r2s2r.app.jobs import Cancel, ProgressFn
from r2s2r.app.live import RigSnapshot
from r2s2r.app.record import FrameRecord, QueuedKeys, RecordRequest, RecordResult, record
from r2s2r_studio.jobs import Latest
from r2s2r_studio.widgets import LiveViews, PathField

if TYPE_CHECKING:
    from r2s2r_studio.window import StudioWindow

# Button label, key of ``r2s2r record --keyboard``.
TAKE_KEYS = (
    ("Start take", "s"),
    ("Save", "e"),
    ("Save as failed", "f"),
    ("Discard", "d"),
    ("Redo", "r"),
)


class RecordTab(QWidget):
    def __init__(self, window: StudioWindow) -> None:
        super().__init__()
        self.studio = window
        form = self._session_form()
        left_box = self._episodes_panel(form)
        right = self._views_layout()
        layout = QHBoxLayout(self)
        layout.addWidget(left_box)
        layout.addLayout(right, 1)
        self.frames = Latest()
        self.frames.ready.connect(self._show_frame)
        self.playback: EpisodePlayback | None = None
        self.result: RecordResult | None = None
        self.takes = 0
        self._set_recording(False)

    def _session_form(self) -> QFormLayout:
        """The recording session's fields, its open and end buttons, the take keys and the
        status, in a form."""
        self.out = PathField("dataset folder (created or continued)")
        self.episodes = QSpinBox()
        self.episodes.setRange(1, 10_000)
        self.episodes.setValue(10)
        self.image_size = QSpinBox()
        self.image_size.setRange(0, 1024)
        self.image_size.setValue(256)
        self.max_seconds = QSpinBox()
        self.max_seconds.setRange(0, 600)
        self.max_seconds.setSpecialValueText("task's")
        self.begin_button = QPushButton("Open recording session")
        self.begin_button.clicked.connect(self.begin)
        self.end_button = QPushButton("End session (q)")
        self.end_button.clicked.connect(lambda: self.press("q"))
        self.keys: QueuedKeys | None = None
        self.key_buttons: dict[str, QPushButton] = {}
        keys_row = QHBoxLayout()
        for label, key in TAKE_KEYS:
            button = QPushButton(f"{label} ({key})")
            button.clicked.connect(lambda _=False, k=key: self.press(k))
            self.key_buttons[key] = button
            keys_row.addWidget(button)
        self.status = QLabel("")
        self.status.setWordWrap(True)
        form = QFormLayout()
        form.addRow("dataset", self.out)
        form.addRow("episodes to save", self.episodes)
        form.addRow("twin views (px)", self.image_size)
        form.addRow("take limit (s)", self.max_seconds)
        row = QHBoxLayout()
        row.addWidget(self.begin_button)
        row.addWidget(self.end_button)
        form.addRow(row)
        form.addRow(keys_row)
        form.addRow(self.status)
        return form

    def _episodes_panel(self, form: QFormLayout) -> QWidget:
        """The left panel: the session ``form`` above the recorded episodes' table and its
        refresh and play buttons."""
        self.table = QTableWidget(0, 4)
        self.table.setHorizontalHeaderLabels(["episode", "frames", "object", "success"])
        self.table.setSelectionBehavior(QTableWidget.SelectionBehavior.SelectRows)
        self.table.cellDoubleClicked.connect(lambda row, _: self.play(row))
        self.refresh_button = QPushButton("Refresh episodes")
        self.refresh_button.clicked.connect(self.refresh)
        self.play_button = QPushButton("Play selected")
        self.play_button.clicked.connect(lambda: self.play(self.table.currentRow()))
        left = QVBoxLayout()
        left.addLayout(form)
        left.addWidget(self.table)
        buttons = QHBoxLayout()
        buttons.addWidget(self.refresh_button)
        buttons.addWidget(self.play_button)
        left.addLayout(buttons)
        left_box = QWidget()
        left_box.setLayout(left)
        left_box.setMaximumWidth(460)
        return left_box

    def _views_layout(self) -> QGridLayout:
        """The right side: the live views, the playback views with their scrubber and the
        recorded actions' plot."""
        self.live = LiveViews()
        self.playback_views = LiveViews()
        self.scrubber = QSlider(Qt.Orientation.Horizontal)
        self.scrubber.valueChanged.connect(self.seek)
        self.actions_plot = pg.PlotWidget(title="recorded actions")
        self.actions_plot.setBackground("#202024")
        self.scrub_line = pg.InfiniteLine(angle=90, pen="y")
        self.frame_label = QLabel("no episode loaded")
        right = QGridLayout()
        right.addWidget(QLabel("<b>live</b>"), 0, 0)
        right.addWidget(self.live, 1, 0)
        right.addWidget(QLabel("<b>playback</b>"), 2, 0)
        right.addWidget(self.playback_views, 3, 0)
        right.addWidget(self.scrubber, 4, 0)
        right.addWidget(self.frame_label, 5, 0)
        right.addWidget(self.actions_plot, 6, 0)
        return right

    def restore(self, s: QSettings) -> None:
        self.out.setText(str(s.value("record/out", "")))

    def save(self, s: QSettings) -> None:
        s.setValue("record/out", self.out.text())

    def _set_recording(self, on: bool) -> None:
        self.begin_button.setEnabled(not on)
        self.end_button.setEnabled(on)
        for button in self.key_buttons.values():
            button.setEnabled(on)

    # ----------------------------------------------------------------- recording
    def begin(self) -> None:
        out = self.out.text()
        if not out:
            self.studio.show_error("record", "error: choose the dataset folder first")
            return
        try:
            rig = self.studio.rig_request()
            request = RecordRequest(
                out=Path(out),
                rig=rig.rig,
                episodes=self.episodes.value(),
                seed=rig.seed,
                realtime=rig.realtime,
                scripted=False,
                config=rig.config,
                image_size=self.image_size.value(),
                max_seconds=self.max_seconds.value() or None,
            )
        except ValueError as err:
            self.studio.show_error("record", f"error: {err}")
            return
        if self.studio.take_rig("record") is None:
            return
        keys = self.keys = QueuedKeys()
        estop = self.studio.new_estop("record")

        def on_frame(frame: FrameRecord, snap: RigSnapshot) -> None:
            self.frames.put((frame, snap))

        def job(cancel: Cancel, progress: ProgressFn) -> RecordResult:
            return record(request, keys, progress, cancel, on_frame=on_frame, estop=estop)

        self._set_recording(True)
        self.status.setText("session open: press Start take (s)")
        self.studio.run_job("record", job, self._recorded, self._progress, self._ended)

    def press(self, key: str) -> None:
        """Press ``key`` as ``r2s2r record --keyboard`` reads it."""
        if self.keys is None:
            return
        self.keys.push(key)
        self.status.setText(f"pressed {key}")

    def _show_frame(self) -> None:
        item = self.frames.take()
        if item is None:
            return
        frame, snap = item
        self.live.show_views(frame.images)
        self.studio.snapshots.put(snap)
        self.status.setText(f"take {frame.take}: frame {frame.frame} ({frame.timestamp:.2f} s)")

    def _progress(self, p: Any) -> None:
        self.status.setText(f"saved {p.done}/{p.total} {p.message}")
        self.refresh()

    def _recorded(self, result: RecordResult) -> None:
        self.result = result
        self.status.setText(
            f"{result.out}: saved {len(result.saved)} episodes ({result.successful} "
            f"successful), discarded {result.discarded} takes"
        )

    def _ended(self) -> None:
        self.keys = None
        self._set_recording(False)
        self.refresh()

    # ----------------------------------------------------------------- episodes
    def refresh(self) -> None:
        out = self.out.text()
        try:
            episodes = list_episodes(out) if out else []
        except Exception as err:  # noqa: BLE001 - shown in the window
            self.studio.show_error("playback", f"error: {err}")
            return
        self.table.setRowCount(len(episodes))
        for row, ep in enumerate(episodes):
            cells = [
                str(ep.index),
                str(ep.frames),
                ", ".join(ep.objects),
                "yes" if ep.success else "no",
            ]
            for col, text in enumerate(cells):
                self.table.setItem(row, col, QTableWidgetItem(text))

    def play(self, row: int) -> None:
        out = self.out.text()
        if row < 0 or not out:
            return

        def job(cancel: Cancel, progress: ProgressFn) -> EpisodePlayback:
            return load_episode(out, row)

        self.frame_label.setText(f"loading episode {row}…")
        self.studio.run_job("playback", job, self._loaded)

    def _loaded(self, playback: EpisodePlayback) -> None:
        self.playback = playback
        frames = len(playback.actions)
        self.actions_plot.clear()
        for k in range(playback.actions.shape[1]):
            self.actions_plot.plot(
                playback.timestamps,
                playback.actions[:, k],
                pen=pg.intColor(k, playback.actions.shape[1]),
            )
        self.actions_plot.addItem(self.scrub_line)
        self.scrubber.setRange(0, max(frames - 1, 0))
        self.scrubber.setValue(0)
        self.seek(0)

    def seek(self, frame: int) -> None:
        pb = self.playback
        if pb is None or not len(pb.actions):
            return
        frame = int(np.clip(frame, 0, len(pb.actions) - 1))
        self.playback_views.show_views(
            {name: v[min(frame, len(v) - 1)] for name, v in pb.views.items() if len(v)}
        )
        self.scrub_line.setValue(float(pb.timestamps[frame]))
        t = pb.timestamps[frame]
        self.frame_label.setText(
            f"episode {pb.index}: frame {frame + 1}/{len(pb.actions)} ({t:.2f} s)"
        )
