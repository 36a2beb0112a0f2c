"""Behavior statistics of generated episodes and source demos: grasp type (fingers and palm
on the object when it left the belt), path length, jerk and time to grasp; the study's
evidence that adapted episodes look like the human demos and planned ones like a planner.
"""

from __future__ import annotations

import numpy as np

from r2s2r.behavior.demo import SourceDemo, active_arm
from r2s2r.behavior.execute import LIFT_M, Attempt


def _tcp_stats(tcp: np.ndarray, fps: int) -> dict[str, float]:
    """Path length (m) and RMS jerk (m/s^3) of a TCP path (T, 3)."""
    step = np.diff(tcp, axis=0)
    jerk = np.diff(tcp, n=3, axis=0) * fps**3
    return {
        "path_length_m": float(np.linalg.norm(step, axis=1).sum()),
        "jerk_ms3_rms": float(np.sqrt((jerk**2).sum(axis=1).mean())) if len(jerk) else 0.0,
    }


def episode_stats(result: Attempt, fps: int) -> dict[str, float | None]:
    """Grasp type (fingers and palm on the object when it left the belt), path length,
    jerk and time to grasp of one executed attempt."""
    tcp = result.states[:, :14].reshape(-1, 2, 7)
    arm = active_arm(tcp)
    lift = result.lift_step
    return {
        **_tcp_stats(tcp[:, arm, :3], fps),
        "time_to_grasp_s": None if lift is None else lift / fps,
        "fingers_in_contact": float(result.fingers_in_contact),
        "palm_in_contact": float(result.palm_in_contact),
    }


def demo_stats(demo: SourceDemo) -> dict[str, float | None]:
    """The same statistics for a source demo (no contacts are recorded on a real cell)."""
    z = demo.objects[:, 2]
    lifted = np.flatnonzero(z - z[0] > LIFT_M)
    return {
        **_tcp_stats(demo.tcp[:, demo.arm, :3], demo.fps),
        "time_to_grasp_s": float(lifted[0]) / demo.fps if lifted.size else None,
        "fingers_in_contact": None,
        "palm_in_contact": None,
    }


def mean_stats(rows: list[dict[str, float | None]]) -> dict[str, float | None]:
    """Each statistic's mean over the rows that have it."""
    keys = sorted({k for r in rows for k in r})
    out: dict[str, float | None] = {}
    for k in keys:
        values = [r[k] for r in rows if r.get(k) is not None]
        out[k] = float(np.mean(values)) if values else None  # type: ignore[arg-type]
    return out
