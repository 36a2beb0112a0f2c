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
"""

from __future__ import annotations

import numpy as np

from r2s2r.sim.contract import Contract

HINDSIGHT_DIM = 5
START_M = 0.02
WAIT_CAP_S = 4.0
# A hand whose joints moved less than this (rad, norm over the hand) never grasped.
MIN_CLOSE_RAD = 0.1


def episode_targets(states: np.ndarray, contract: Contract, fps: float) -> np.ndarray:
    """The hindsight targets (T, HINDSIGHT_DIM) float32 of one take's states (T, S)."""
    states = np.asarray(states, dtype=np.float64)
    out = np.full((len(states), HINDSIGHT_DIM), np.nan, dtype=np.float32)
    if len(states) == 0:
        return out
    e = contract.embodiment
    layout = contract.state_layout()
    tcp = states[:, layout["tcp_pose"]].reshape(len(states), e.num_arms, -1)[..., :3]
    hand = states[:, layout["hand_joints"]].reshape(len(states), e.num_arms, -1)
    moved = np.linalg.norm(tcp - tcp[:1], axis=-1)  # (T, arms)
    arm = int(np.argmax(moved.max(axis=0)))
    if moved[:, arm].max() < START_M:
        return out  # Neither arm left home: the take shows no reach.
    start = int(np.argmax(moved[:, arm] >= START_M))
    frames = np.arange(len(states))
    out[:, 0] = np.clip((start - frames) / fps, 0.0, WAIT_CAP_S)
    out[:, 1] = 0.0 if e.num_arms == 1 else (1.0 if arm == 0 else -1.0)
    closed = np.linalg.norm(hand[:, arm] - hand[:1, arm], axis=-1)
    if closed.max() >= MIN_CLOSE_RAD:
        # The lowest point of the hand while at least half closed: the operator may shape
        # the hand on the way down, and closes it fully on the object.
        held = np.flatnonzero(closed >= 0.5 * closed.max())
        out[:, 2:] = tcp[held[np.argmin(tcp[held, arm, 2])], arm]
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
