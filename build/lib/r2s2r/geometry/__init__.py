"""Shared maths below every stage: poses, rotations (quaternions w, x, y, z), smooth time
profiles and the calibration board."""
