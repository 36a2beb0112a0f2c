"""Excitation commands for system identification: TCP target runs for an arm and
joint-target episodes for a hand, at the control rate, inside the safety limits."""

from __future__ import annotations

import numpy as np

from r2s2r.geometry.rotations import quat_mul, rotvec_to_quat
from r2s2r.rig.safety import SafetyLimits
from r2s2r.sim.robots.wuji_hand import ABDUCTION_JOINT, JOINTS_PER_FINGER, towards_thumb


def arm_excitation(
    start: np.ndarray,
    duration_s: float = 80.0,
    seed: int = 0,
    hz: float = 50.0,
    box: tuple[float, float, float] = (0.16, 0.12, 0.10),
    max_angle_deg: float = 25.0,
    limits: SafetyLimits | None = None,
) -> np.ndarray:
    """TCP targets (T, 7) at ``hz`` around ``start`` (7,): held at first, then a random mix
    of fast moves across the box (hitting the arm's speed and acceleration limits), small
    steps in position and orientation, slow creeps and multi-sine sweeps; back to
    ``start`` and held at the end. Target speeds stay within 92 % (linear) and 88 %
    (angular) of the supervisor's limits."""
    lim = limits or SafetyLimits()
    rng = np.random.default_rng(seed)
    dt, half = 1.0 / hz, np.asarray(box)
    vmax, wmax = 0.92 * lim.max_lin_vel, 0.88 * lim.max_ang_vel
    amax = np.radians(max_angle_deg)
    pos, rot = [np.zeros(3)], [np.zeros(3)]  # offsets from start; rotation as world rotvec

    def go(p: np.ndarray, r: np.ndarray, speed: float, turn: float, hold: float) -> None:
        p0, r0 = pos[-1], rot[-1]
        n = int(np.ceil(max(np.linalg.norm(p - p0) / speed, np.linalg.norm(r - r0) / turn) * hz))
        for s in np.arange(1, n + 1) / max(n, 1):
            pos.append(p0 + s * (p - p0))
            rot.append(r0 + s * (r - r0))
        pos.extend([p] * int(hold * hz))
        rot.extend([r] * int(hold * hz))

    def rand_rot(scale: float) -> np.ndarray:
        r = rng.normal(size=3)
        return r / np.linalg.norm(r) * amax * scale * rng.uniform(0.3, 1.0)

    go(pos[-1], rot[-1], vmax, wmax, 1.0)
    total = int(duration_s * hz)
    # Leave time to return to the start and hold it (the next run starts from rest there).
    body = total - int(2.5 * hz)
    kinds: list[str] = []
    while len(pos) < body:
        if not kinds:
            # Every cycle has two fast moves, so even short runs reach the speed limit.
            kinds = [str(k) for k in rng.permutation(["dash", "dash", "nudge", "creep", "sweep"])]
        kind = kinds.pop()
        here = pos[-1]
        if kind == "dash":
            # Corner to corner: long enough to reach the arm's top speed.
            far = -np.sign(here + 1e-9) * half * rng.uniform(0.9, 1.0, 3)
            go(far, rand_rot(1.0), vmax, wmax, rng.uniform(0.4, 0.9))
        elif kind == "nudge":
            for _ in range(rng.integers(2, 5)):
                step = rng.normal(size=3)
                step *= rng.uniform(0.002, 0.012) / np.linalg.norm(step)
                turn = rng.normal(size=3)
                turn *= np.radians(rng.uniform(0.3, 3.0)) / np.linalg.norm(turn)
                go(np.clip(pos[-1] + step, -half, half), rot[-1] + turn, vmax, wmax, 0.35)
        elif kind == "creep":
            go(rng.uniform(-half, half), rand_rot(0.5), rng.uniform(0.02, 0.08), 0.3, 0.3)
        else:
            n = int(rng.uniform(4.0, 8.0) * hz)
            tt = np.arange(1, n + 1) * dt
            env = np.sin(np.pi * tt / tt[-1]) ** 2
            p0, r0 = pos[-1], rot[-1]
            wave = np.zeros((n, 6))
            for k in range(6):
                for f in rng.uniform(0.2, 1.6, 3):
                    wave[:, k] += np.sin(2 * np.pi * f * tt + rng.uniform(0, 2 * np.pi))
            wave *= rng.uniform(0.3, 1.0, 6) / 3.0
            for i in range(n):
                pos.append(np.clip(p0 + env[i] * wave[i, :3] * half, -half, half))
                rot.append(r0 + env[i] * wave[i, 3:] * amax * 0.5)
    del pos[body:], rot[body:]
    pos[:] = list(_rate_limit(np.asarray(pos), vmax * dt))
    rot[:] = list(_rate_limit(np.clip(np.asarray(rot), -amax, amax), wmax * dt))
    go(np.zeros(3), np.zeros(3), vmax, wmax, 0.0)
    if len(pos) > total:
        raise ValueError(f"duration_s={duration_s} is too short for an excitation; use >= 5 s")
    p = np.concatenate([np.asarray(pos), np.zeros((total - len(pos), 3))])
    r = np.concatenate([np.asarray(rot), np.zeros((total - len(rot), 3))])
    # Inside the supervisor's workspace box with a centimetre to spare.
    p = np.clip(
        p,
        np.asarray(lim.workspace_min) + 0.01 - start[:3],
        np.asarray(lim.workspace_max) - 0.01 - start[:3],
    )
    quat = quat_mul(rotvec_to_quat(r), np.broadcast_to(start[3:], (total, 4)))
    return np.concatenate([start[:3] + p, quat], axis=1)


def _rate_limit(x: np.ndarray, max_step: float) -> np.ndarray:
    """Limit the Euclidean change per row of ``x`` (T, 3) to ``max_step``."""
    out = x.copy()
    for i in range(1, len(out)):
        d = out[i] - out[i - 1]
        n = np.linalg.norm(d)
        if n > max_step:
            out[i] = out[i - 1] + d * (max_step / n)
    return out


HAND_EPISODE_KINDS = ("steps", "chirp", "sines")


def hand_excitation(
    episodes: int,
    ranges: np.ndarray,
    duration_s: float = 4.0,
    seed: int = 0,
    hz: float = 50.0,
    margin: float = 0.1,
    side: str = "right",
) -> list[np.ndarray]:
    """Joint-target episodes (each (T, H), the vendor's order) cycling through random steps,
    chirps (0.3 to 5 Hz) and multi-sines on every joint at once, kept ``margin`` (a fraction
    of each range) inside the joint ranges ``ranges`` (H, 2) (the embodiment's
    ``hand_limits``) of hand ``side``.

    The fingers' sideways (abduction) joints fan out together and never point at each other,
    and the thumb stays beside the palm (the start of its first joints' ranges,
    ``THUMB_SHARE``), so fingers rarely touch: contacts would couple joints the fit
    treats as independent.
    """
    rng = np.random.default_rng(seed)
    ranges = np.asarray(ranges, dtype=float)
    span = ranges[:, 1] - ranges[:, 0]
    lo, hi = ranges[:, 0] + margin * span, ranges[:, 1] - margin * span
    # The thumb swings across the palm's front at its first two joints: kept to the start of
    # those ranges it stays beside the palm, clear of the fingers.
    hi[:4] = lo[:4] + THUMB_SHARE * (hi[:4] - lo[:4])
    mid, amp = (lo + hi) / 2, (hi - lo) / 2
    n = int(round(duration_s * hz))
    t = np.arange(n) / hz
    out = []
    for e in range(episodes):
        kind = HAND_EPISODE_KINDS[e % len(HAND_EPISODE_KINDS)]
        u = np.zeros((n, len(ranges)))  # Normalised to [-1, 1] per joint.
        for j in range(len(ranges)):
            if kind == "steps":
                i = 0
                level = rng.uniform(-1, 1)
                while i < n:
                    hold = int(rng.uniform(0.25, 0.6) * hz)
                    u[i : i + hold, j] = level
                    level = rng.uniform(-1, 1)
                    i += hold
            elif kind == "chirp":
                f0, f1 = 0.3, rng.uniform(3.0, 5.0)
                phase = 2 * np.pi * (f0 * t + (f1 - f0) * t**2 / (2 * duration_s))
                u[:, j] = rng.uniform(0.4, 1.0) * np.sin(phase + rng.uniform(0, 2 * np.pi))
            else:
                for f in rng.uniform(0.3, 3.0, 3):
                    u[:, j] += np.sin(2 * np.pi * f * t + rng.uniform(0, 2 * np.pi)) / 3
        q = mid + amp * np.clip(u, -1.0, 1.0)
        # Fan: spread in [0.3, 1] of the range, the outer fingers turning most.
        spread = 0.65 + 0.35 * u[:, _ABDUCTION[0]]
        fan = _FAN * towards_thumb(side)
        reach = np.where(fan > 0, hi[_ABDUCTION], -lo[_ABDUCTION])
        q[:, _ABDUCTION] = spread[:, None] * (fan * reach)[None]
        out.append(q)
    return out


# Sideways joints of the four fingers (index to little) and how far each fans out towards the
# thumb (negative: away from it).
_ABDUCTION = np.array([JOINTS_PER_FINGER * f + ABDUCTION_JOINT for f in range(1, 5)], dtype=int)
_FAN = np.array([1.0, 0.35, -0.35, -1.0])
# The share of each thumb joint's range (from its start) that the excitation uses.
THUMB_SHARE = np.array([0.3, 0.3, 0.7, 1.0])
