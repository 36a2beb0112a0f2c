"""A scripted picker: a simple state machine that intercepts an object on the belt.

It is a demonstration and test driver for the env (a moving belt, an arm that meets an
object, a power grasp, a carry to the bin), not a behavior model; the scripted human
operator and the planners that produce training data come with the rig and behavior stages.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from r2s2r.sim.cell import ACTION_PER_ARM, HAND_DOF
from r2s2r.sim.env import PickSortEnv

# Hand postures (20 joints, thumb first): open, and a power grasp.
OPEN_HAND = np.zeros(HAND_DOF)
POWER_GRASP = np.array([1.2, 0.5, 0.5, 0.4] + [0.0, 1.3, 1.1, 0.8] * 4)
PRESHAPE = np.array([0.6, 0.1, 0.1, 0.1] + [0.0, 0.3, 0.2, 0.1] * 4)


@dataclass
class _Plan:
    arm: int  # 0 left, 1 right
    phase: str = "approach"
    phase_t: float = 0.0


class ScriptedPicker:
    """Picks the first object of the episode with the arm on its bin's side."""

    # Palm offset from the object along the belt (the palm faces upstream), and heights of
    # the TCP (at the knuckles) above the object's top when hovering and grasping.
    palm_offset = 0.045
    hover = 0.15
    grasp_height = 0.035

    def __init__(self, env: PickSortEnv) -> None:
        self.env = env
        self.plan: _Plan | None = None

    def reset(self, obs: dict, info: dict) -> None:
        cell = self.env.cell
        obj = cell.objects[cell.chosen[0, 0]]
        bin_x = self.env.world_spec.layout.bins[info["assigned_bins"][0]].pos[0]
        self.plan = _Plan(arm=0 if bin_x < 0 else 1)
        self.home = obs["tcp_pose"].copy()
        self.obj_top = obj.rest_height
        self.bin_pos = np.asarray(self.env.world_spec.layout.bins[info["assigned_bins"][0]].pos)
        # Where the arm meets the object along the belt.
        base_x = self.env.world_spec.layout.robots["left" if self.plan.arm == 0 else "right"].pos[0]
        self.meet_x = base_x + (0.05 if self.plan.arm == 0 else -0.3)

    def act(self, obs: dict, info: dict) -> np.ndarray:
        assert self.plan is not None, "call reset() first"
        p, dt = self.plan, self.env.cell.dt
        p.phase_t += dt
        action = np.concatenate([np.concatenate([pose, OPEN_HAND]) for pose in self.home])
        action = action.reshape(2, ACTION_PER_ARM)
        obj = info["object_pos"][0]
        speed = info["belt_speed"]
        target = self.home[p.arm].copy()
        hand = PRESHAPE
        top = obj[2] + self.obj_top
        follow_x = obj[0] + self.palm_offset
        if p.phase == "approach":
            # Wait above the meeting point until the object is close, then follow it down.
            target[:3] = [self.meet_x, obj[1], top + self.hover]
            if obj[0] + speed * 0.8 >= self.meet_x - self.palm_offset:
                self._next("descend")
        elif p.phase == "descend":
            target[:3] = [follow_x + speed * 0.1, obj[1], top + self.grasp_height]
            if p.phase_t > 0.8:
                self._next("close")
        elif p.phase == "close":
            target[:3] = [follow_x + speed * 0.1, obj[1], top + self.grasp_height]
            hand = POWER_GRASP
            if p.phase_t > 0.6:
                self._next("lift")
        elif p.phase == "lift":
            target[:3] = self.env.cell.motion.pose[0, p.arm, :3] * 0 + [
                follow_x,
                obj[1],
                self.bin_pos[2] + 0.35,
            ]
            hand = POWER_GRASP
            if p.phase_t > 0.8:
                self._next("carry")
        elif p.phase == "carry":
            target[:3] = [
                self.bin_pos[0] + self.palm_offset,
                self.bin_pos[1],
                self.bin_pos[2] + 0.3,
            ]
            hand = POWER_GRASP
            if p.phase_t > 1.5:
                self._next("release")
        else:
            target[:3] = [
                self.bin_pos[0] + self.palm_offset,
                self.bin_pos[1],
                self.bin_pos[2] + 0.3,
            ]
            hand = OPEN_HAND
        action[p.arm, :7] = target
        action[p.arm, 7:] = hand
        return action.reshape(-1)

    def _next(self, phase: str) -> None:
        assert self.plan is not None
        self.plan.phase, self.plan.phase_t = phase, 0.0
