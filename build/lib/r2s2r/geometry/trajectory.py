"""Time profiles of smooth motions on [0, 1]: minimum jerk, blends between poses, detours."""

from __future__ import annotations

import numpy as np


def min_jerk(tau: float) -> float:
    """The minimum-jerk profile 10t^3 - 15t^4 + 6t^5 on [0, 1]."""
    t = min(max(tau, 0.0), 1.0)
    return t**3 * (10.0 + t * (-15.0 + 6.0 * t))


def blend(a: np.ndarray, b: np.ndarray, tau: float) -> np.ndarray:
    """``a`` moved towards ``b`` along the minimum-jerk profile at ``tau`` in [0, 1]."""
    return a + (b - a) * min_jerk(tau)


def bump(tau: float) -> float:
    """A smooth detour profile, 0 with zero slope at both ends and 1 at the middle."""
    t = min(max(tau, 0.0), 1.0)
    return 16.0 * t * t * (1.0 - t) ** 2
