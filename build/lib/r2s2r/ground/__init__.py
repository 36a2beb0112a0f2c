"""World grounding: camera calibration, scene registration and system identification turn
captures taken through a rig into a grounded WorldSpec and a report."""
