"""r2s2r Studio: the desktop app for a robot cell (calibration, teleop recording,
co-training and live deployment), built on the service layer ``r2s2r.app``."""
