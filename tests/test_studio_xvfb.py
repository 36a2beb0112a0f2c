"""The real Studio window under a real X server (Xvfb, PySide6's xcb platform): a screenshot
of every tab, each with something in it (``r2s2r-studio --screenshots``). ``make setup``
installs Xvfb and the xcb libraries (``make studio-deps``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("PySide6", reason="the studio extra: pip install -e '.[studio]'")

ROOT = Path(__file__).resolve().parents[1]
TABS = ("rig", "calibration", "teleop", "co-training", "deployment")


@pytest.mark.slow
def test_the_real_window_under_xvfb_saves_a_screenshot_of_every_tab(tmp_path: Path) -> None:
    xvfb_run = shutil.which("xvfb-run")
    assert xvfb_run is not None, "Xvfb is missing: run `make studio-deps` (xvfb, xauth)"
    import cv2
    import numpy as np

    env = {
        **os.environ,
        "QT_QPA_PLATFORM": "xcb",
        "PYTHONPATH": os.pathsep.join(
            [str(ROOT / "source"), str(ROOT / "tools"), os.environ.get("PYTHONPATH", "")]
        ),
    }
    out = tmp_path / "shots"
    cmd = [xvfb_run, "-a", "-s", "-screen 0 1600x1000x24", sys.executable, "-m", "r2s2r_studio"]
    cmd += ["--screenshots", str(out), "--settings", str(tmp_path / "studio.ini")]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    # It ran on the X server, not offscreen.
    assert "offscreen" not in done.stderr
    shots = sorted(out.glob("*.png"))
    assert [p.stem.split("_", 1)[1] for p in shots] == list(TABS)
    for path in shots:
        image = cv2.imread(str(path))
        assert image is not None and image.shape[1] == 1100, path
        # A real picture: many colours, not a blank or a single-colour frame.
        assert len(np.unique(image.reshape(-1, 3), axis=0)) > 500, path
    # The rig tab shows the twin's views (the head view has the belt, arms and the board).
    rig = cv2.imread(str(shots[0]))
    assert rig.std() > 20
