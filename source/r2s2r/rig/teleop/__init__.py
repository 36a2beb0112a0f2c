"""Teleoperation: a tracked human hand drives an arm and a hand of any rig.

``session`` (calibration, the tracker-to-robot mapping and ``TeleopSession``), ``retarget``
(human keypoints to hand joint targets), ``operator`` (the scripted operator, a
``HandTracker`` that moves like a person) and ``human`` (what that operator sees and how a
person moves).
"""

from r2s2r.rig.teleop.session import TeleopMapper, TeleopSession, TrackerCalibration

__all__ = ["TeleopMapper", "TeleopSession", "TrackerCalibration"]
