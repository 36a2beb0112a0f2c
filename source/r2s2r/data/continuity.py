"""Channel continuity in recorded state and action vectors.

The writer keeps every quaternion of an episode on one hemisphere (``continuous``); ``verify``
flags a quaternion that flips and any other channel that steps further in one frame than a
cell can move (``discontinuities``); ``repair`` rewrites datasets recorded before that.
Quaternions are found by their feature names (four consecutive ``*_qw *_qx *_qy *_qz``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from r2s2r.geometry.rotations import continuous_quaternions

QUAT_SUFFIXES = ("_qw", "_qx", "_qy", "_qz")
# Steps in one frame that no recording of a cell makes: a position (names ending _x, _y, _z)
# by more than JUMP_M metres, any other channel by more than JUMP_RAD (joint angles, radians).
JUMP_M = 0.1
JUMP_RAD = 1.0


def quaternion_starts(names: Sequence[str] | None) -> tuple[int, ...]:
    """Where each quaternion starts among a vector feature's entry ``names``."""
    if not names:
        return ()
    names = list(names)
    return tuple(
        i
        for i in range(len(names) - 3)
        if all(str(names[i + k]).endswith(QUAT_SUFFIXES[k]) for k in range(4))
        and str(names[i])[:-3] == str(names[i + 3])[:-3]
    )


def continuous(x: np.ndarray, names: Sequence[str] | None) -> np.ndarray:
    """One episode's vectors (T, D) with their quaternions made continuous."""
    return continuous_quaternions(x, quaternion_starts(names))


@dataclass(frozen=True)
class Jump:
    """A discontinuity: the frame it lands on, the channel and what happened."""

    frame: int
    channel: str
    detail: str


def discontinuities(x: np.ndarray, names: Sequence[str] | None) -> list[Jump]:
    """Every discontinuity of one episode's vectors (T, D), in frame order."""
    x = np.asarray(x, dtype=np.float64)
    if len(x) < 2 or not names:
        return []
    names = [str(n) for n in names]
    starts = quaternion_starts(names)
    in_quat = {s + k for s in starts for k in range(4)}
    found: list[Jump] = []
    for s in starts:
        dots = np.einsum("ij,ij->i", x[1:, s : s + 4], x[:-1, s : s + 4])
        for k in np.flatnonzero(dots < 0):
            channel = names[s][:-1] + "*"
            found.append(Jump(int(k) + 1, channel, f"flips hemisphere (dot {dots[k]:+.2f})"))
    steps = np.abs(np.diff(x, axis=0))
    for j, name in enumerate(names):
        if j in in_quat:
            continue
        limit = JUMP_M if name.endswith(("_x", "_y", "_z")) else JUMP_RAD
        for k in np.flatnonzero(steps[:, j] > limit):
            found.append(Jump(int(k) + 1, name, f"steps {steps[k, j]:.3f} (limit {limit})"))
    return sorted(found, key=lambda j: (j.frame, j.channel))
