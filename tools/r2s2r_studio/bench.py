"""How fast the Studio's camera views update while the twin runs, and whether memory grows
(``r2s2r-studio --bench SECONDS``)."""

from __future__ import annotations

import os
import platform
import resource
import time
from typing import Any

from PySide6.QtWidgets import QApplication

from r2s2r.app.session import RigRequest


def _rss_mb() -> float:
    """This process's resident memory now (MB), from /proc where there is one."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _spin(seconds: float) -> None:
    app = QApplication.instance()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        app.processEvents()  # type: ignore[union-attr]
        time.sleep(0.002)


def bench_views(window: Any, seconds: float, seed: int = 0, image_size: int = 256) -> dict:
    """Connect ``window`` to the real-time twin, let it warm up, then count the frames each
    view shows over ``seconds`` and the memory before and after."""
    window.connect_rig(RigRequest(seed=seed, realtime=True, image_size=image_size))
    deadline = time.monotonic() + 300
    while window.session is None or window.session.periods < 100:
        if time.monotonic() > deadline:
            raise RuntimeError("the twin did not start within 300 s")
        _spin(0.1)
    views = window.rig_tab.views.views
    _spin(2.0)
    start_frames = {n: v.frames for n, v in views.items()}
    start_periods, start_rss = window.session.periods, _rss_mb()
    t0 = time.monotonic()
    _spin(seconds / 2)
    mid_rss = _rss_mb()
    _spin(seconds / 2)
    elapsed = time.monotonic() - t0
    fps = {n: round((v.frames - start_frames[n]) / elapsed, 1) for n, v in views.items()}
    end_rss = _rss_mb()
    figures = {
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()}",
        "seconds": round(elapsed, 1),
        "image_size": image_size,
        "view_fps": fps,
        "rig_periods_per_s": round((window.session.periods - start_periods) / elapsed, 1),
        "dropped_snapshots": window.snapshots.dropped,
        "rss_mb_start": round(start_rss, 1),
        "rss_mb_mid": round(mid_rss, 1),
        "rss_mb_end": round(end_rss, 1),
    }
    window.disconnect_rig()
    return figures
