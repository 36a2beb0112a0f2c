"""r2s2r Studio: the desktop app for a robot cell (calibration, teleop recording,
co-training and live deployment), built on the service layer ``r2s2r.app``."""

import os

# The services draw their report plots with matplotlib on worker threads: never with a GUI
# backend (with PySide6 present matplotlib would pick Qt's, which must stay on one thread).
os.environ.setdefault("MPLBACKEND", "Agg")
