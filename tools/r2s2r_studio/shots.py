"""A screenshot of every tab of the real window (``r2s2r-studio --screenshots DIR``), with
something in each: the twin connected, a board view captured, a scripted episode deployed."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QApplication

from r2s2r.app.session import RigRequest

WIDTH = 1100  # Screenshots are scaled to this width (small PNGs for the README).


def _spin(seconds: float, until: Any = None) -> None:
    app = QApplication.instance()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        app.processEvents()  # type: ignore[union-attr]
        if until is not None and until():
            return
        time.sleep(0.01)
    if until is not None:
        raise TimeoutError(f"not ready within {seconds:.0f} s")


def _grab(window: Any, path: Path) -> None:
    """The window as the screen shows it (the X server's pixels where there is one)."""
    _spin(0.8)
    screen = QGuiApplication.primaryScreen()
    pixmap = screen.grabWindow(window.winId()) if screen is not None else window.grab()
    if pixmap.isNull() or pixmap.width() < 10:
        pixmap = window.grab()
    pixmap.scaledToWidth(WIDTH).save(str(path))


def take_screenshots(window: Any, out: Path, seed: int = 0) -> list[Path]:
    """Save ``out/<n>_<tab>.png`` for every tab; returns the paths."""
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="studio-shots-"))
    window.resize(1500, 950)
    window.rig_tab.realtime.setChecked(True)
    window.connect_rig(RigRequest(seed=seed, realtime=True, image_size=256))
    _spin(300, lambda: window.session is not None and window.session.periods > 150)
    cal = window.calibration_tab
    cal.out.setText(str(work / "capture"))
    cal.placement.setValue(1)
    cal.capture_view()
    _spin(120, lambda: cal.last_view is not None)
    deploy = window.deploy_tab
    paths = []
    for index in range(window.tabs.count()):
        tab = window.tabs.widget(index)
        window.tabs.setCurrentIndex(index)
        if tab is deploy:
            window.disconnect_rig()
            deploy.source.setCurrentText("scripted")
            deploy.max_seconds.setValue(4)
            deploy.start()
            _spin(300, lambda: deploy.result is not None or bool(window.errors))
        name = window.tabs.tabText(index).split()[0].lower().replace("&", "")
        path = out / f"{index + 1}_{name}.png"
        _grab(window, path)
        paths.append(path)
    window.disconnect_rig()
    return paths
