"""A scripted picker: a small state machine that intercepts an object on the belt.

It is a demonstration and test driver for the env (a moving belt, an arm that meets an
object, a power grasp, a carry to the bin), not a behavior model; the scripted human
operator and the planners that produce training data come with the rig and behavior stages.

The hand comes down palm-first over the object with its fingers pointing across the belt,
follows the object at the belt's speed, wraps the fingers around its far side, and lifts it
over its bin.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from r2s2r.sim.closures import POWER_GRASP, posture
from r2s2r.sim.env import PickSortEnv
from r2s2r.sim.scene import PALM_DOWN_QUAT

# Hand postures of the Wuji hand (20 joints in the vendor's order, ``closures.posture``).
PRESHAPE = posture((0.55, 0.0, 0.0, 0.05), (0.2, 0.0, 0.1, 0.1))
OPEN_HAND = np.zeros(len(PRESHAPE))


@dataclass
class _State:
    arm: int  # 0 left, 1 right
    meet_x: float
    phase: str = "approach"
    phase_t: float = 0.0


class ScriptedPicker:
    """Picks the episode's first object with the arm on its bin's side."""

    # The TCP (the knuckles) sits this far beyond the object's centre, across the belt.
    reach = 0.03
    # Palm height above the object's top when grasping, and the hover height above that.
    palm_gap = 0.015
    hover = 0.12

    def __init__(self, env: PickSortEnv) -> None:
        self.env = env
        self.state: _State | None = None

    def reset(self, obs: dict, info: dict) -> None:
        layout = self.env.world_spec.layout
        bin_name = info["assigned_bins"][0]
        self.bin_pos = np.asarray(layout.bins[bin_name].pos)
        arm = 0 if self.bin_pos[0] < 0 else 1
        base_x = layout.robots["left" if arm == 0 else "right"].pos[0]
        # The left arm meets objects just downstream of its base; the right arm reaches
        # upstream so that slow belts still bring the object within the episode.
        self.state = _State(arm=arm, meet_x=base_x + (0.05 if arm == 0 else -0.25))
        self.home = obs["tcp_pose"].copy()
        cell = self.env.cell
        self.top_offset = cell.objects[cell.chosen[0, 0]].rest_height

    def act(self, obs: dict, info: dict) -> np.ndarray:
        s = self.state
        if s is None:
            raise RuntimeError("call ScriptedPicker.reset() before act()")
        s.phase_t += self.env.cell.dt
        obj = info["object_pos"][0]
        speed = info["belt_speed"]
        top = obj[2] + self.top_offset
        over = np.array([obj[0], obj[1] + self.reach, top + self.palm_gap])
        lead = np.array([speed * 0.15, 0.0, 0.0])  # Aim a little ahead of the moving object.
        target = self.home[s.arm].copy()
        hand = PRESHAPE
        if s.phase == "approach":
            target[:3] = [max(s.meet_x, obj[0] + speed), over[1], over[2] + self.hover]
            target[3:] = PALM_DOWN_QUAT
            if obj[0] + speed * 1.2 >= s.meet_x:
                self._next("descend")
        elif s.phase == "descend":
            target[:3] = over + lead + [0.0, 0.0, max(0.0, self.hover * (1 - s.phase_t / 0.8))]
            target[3:] = PALM_DOWN_QUAT
            if s.phase_t > 1.0:
                self._next("close")
        elif s.phase == "close":
            target[:3] = over + lead
            target[3:] = PALM_DOWN_QUAT
            hand = POWER_GRASP
            if s.phase_t > 0.6:
                self.lift_from = target[:3].copy()
                self._next("lift")
        elif s.phase in ("lift", "carry", "release"):
            hand = POWER_GRASP if s.phase != "release" else OPEN_HAND
            target[3:] = PALM_DOWN_QUAT
            above_bin = self.bin_pos + [0.0, self.reach, 0.3]
            if s.phase == "lift":
                target[:3] = self.lift_from + [0.0, 0.0, 0.25]
                if s.phase_t > 0.8:
                    self._next("carry")
            else:
                target[:3] = above_bin
                if s.phase == "carry" and s.phase_t > 1.5:
                    self._next("release")
        contract = self.env.contract
        arm = self.home.copy()
        hands = np.tile(OPEN_HAND, (len(arm), 1))
        arm[s.arm] = target
        hands[s.arm] = hand
        return contract.join_action(arm, hands)

    @property
    def phase(self) -> str:
        return "idle" if self.state is None else self.state.phase

    def _next(self, phase: str) -> None:
        assert self.state is not None
        self.state.phase, self.state.phase_t = phase, 0.0
