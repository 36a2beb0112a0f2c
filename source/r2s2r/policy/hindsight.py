"""Hindsight targets: what a take did later, read back from its own recorded proprio.

A demonstration's frames before the reach all show the arms at home; what tells the policy
to start is the object's place along the belt, one or two pixels wide at CPU image sizes,
and the flow-matching loss says so only on the few frames where the chunk holds the start.
These targets say it on every frame: how long until the active arm leaves home, which arm
it is, and where its hand closed. A small head predicts them from the observation tokens
(``PolicyCfg.hindsight_weight``), so the encoder is asked for the object's place and kind
at every step. Everything here comes from the recorded state, which a real take has too;
no simulator truth is read.

Per frame, ``HINDSIGHT_DIM`` values (NaN where the take does not show them):
    0  seconds until the active arm's TCP is ``START_M`` from where it began (0 after;
       at most ``WAIT_CAP_S``)
    1  the active arm: +1 the first side, -1 the second (0 on a one-arm embodiment)
    2-4  the active arm's TCP position (m) where it grasped: its lowest point while its hand
       was at least half closed

``place_targets`` gives a second set, the object's place on the belt until the grasp (the
grasp point carried back by the belt's speed), which the locator (``PolicyCfg.locator_weight``)
learns to read from the views.
"""

from __future__ import annotations

import numpy as np

from r2s2r.sim.contract import Contract

HINDSIGHT_DIM = 5
# The object's place on the belt (x, y, z in the cell frame, m), and the cell frame's axis
# the belt runs along.
PLACE_DIM = 3
BELT_AXIS = 0
START_M = 0.02
WAIT_CAP_S = 4.0
# A hand whose joints moved less than this (rad, norm over the hand) never grasped.
MIN_CLOSE_RAD = 0.1


def _take(states: np.ndarray, contract: Contract) -> tuple[np.ndarray, np.ndarray, int]:
    """A take's TCP positions (T, arms, 3), hand joints (T, arms, J) and its active arm: the
    one whose TCP went furthest from where it began."""
    e = contract.embodiment
    layout = contract.state_layout()
    tcp = states[:, layout["tcp_pose"]].reshape(len(states), e.num_arms, -1)[..., :3]
    hand = states[:, layout["hand_joints"]].reshape(len(states), e.num_arms, -1)
    moved = np.linalg.norm(tcp - tcp[:1], axis=-1)  # (T, arms)
    return tcp, hand, int(np.argmax(moved.max(axis=0)))


def _grasp_frame(tcp: np.ndarray, hand: np.ndarray, arm: int) -> int | None:
    """The frame where ``arm``'s hand grasped: the lowest point of its TCP while the hand was
    at least half closed (the operator may shape the hand on the way down, and closes it
    fully on the object); None if the hand never closed."""
    closed = np.linalg.norm(hand[:, arm] - hand[:1, arm], axis=-1)
    if closed.max() < MIN_CLOSE_RAD:
        return None
    held = np.flatnonzero(closed >= 0.5 * closed.max())
    return int(held[np.argmin(tcp[held, arm, 2])])


def episode_targets(states: np.ndarray, contract: Contract, fps: float) -> np.ndarray:
    """The hindsight targets (T, HINDSIGHT_DIM) float32 of one take's states (T, S)."""
    states = np.asarray(states, dtype=np.float64)
    out = np.full((len(states), HINDSIGHT_DIM), np.nan, dtype=np.float32)
    if len(states) == 0:
        return out
    tcp, hand, arm = _take(states, contract)
    moved = np.linalg.norm(tcp[:, arm] - tcp[:1, arm], axis=-1)
    if moved.max() < START_M:
        return out  # Neither arm left home: the take shows no reach.
    start = int(np.argmax(moved >= START_M))
    frames = np.arange(len(states))
    out[:, 0] = np.clip((start - frames) / fps, 0.0, WAIT_CAP_S)
    out[:, 1] = 0.0 if contract.embodiment.num_arms == 1 else (1.0 if arm == 0 else -1.0)
    grasp = _grasp_frame(tcp, hand, arm)
    if grasp is not None:
        out[:, 2:] = tcp[grasp, arm]
    return out


def place_targets(
    states: np.ndarray, contract: Contract, fps: float, belt_speed: float
) -> np.ndarray:
    """Where the object is, frame by frame until the grasp, read back from the take itself
    (T, PLACE_DIM) float32, NaN after the grasp and in a take without one.

    The hand closed at the grasp point; before that the object rode the belt at the drive's
    speed, along the cell frame's x (``BELT_AXIS``), so at frame f it was
    ``grasp - speed * (grasp_frame - f) / fps`` along the belt, at the grasp point's lateral
    place and height. This is the grasp point carried back by the belt, which is what the
    reach must meet (on the twin's 100-take benchmark set it is 1.9 cm ahead of the object's
    true centre along the belt and 0.9 cm aside, with spreads of 2.6 and 2.1 cm: the hand
    grasps at an offset). A real take has all of it: the proprio and the drive's speed."""
    states = np.asarray(states, dtype=np.float64)
    out = np.full((len(states), PLACE_DIM), np.nan, dtype=np.float32)
    if len(states) == 0 or not np.isfinite(belt_speed):
        return out
    tcp, hand, arm = _take(states, contract)
    grasp = _grasp_frame(tcp, hand, arm)
    if grasp is None:
        return out
    before = np.arange(grasp + 1)
    out[before] = tcp[grasp, arm]
    out[before, BELT_AXIS] -= belt_speed * (grasp - before) / fps
    return out


def standardization(targets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-entry (mean, std) of targets (N, HINDSIGHT_DIM) over their known values; an entry
    never known gets (0, 1), a constant one std 1."""
    targets = np.asarray(targets, dtype=np.float64)
    known = np.isfinite(targets)
    count = known.sum(axis=0)
    filled = np.where(known, targets, 0.0)
    mean = filled.sum(axis=0) / np.maximum(count, 1)
    var = (np.where(known, targets - mean, 0.0) ** 2).sum(axis=0) / np.maximum(count, 1)
    std = np.sqrt(var)
    std = np.where(std > 1e-6 * np.maximum(1.0, np.abs(mean)), std, 1.0)
    return mean.astype(np.float32), std.astype(np.float32)
