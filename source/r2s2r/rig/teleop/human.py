"""How the scripted operator perceives and moves like a person: what it sees of the cell
(``Eyes``, ``TwinEyes``), minimum-jerk movement segments with detours, and the per-episode
variability of a person's timing, paths, tremor and grasp (``Style``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from r2s2r.geometry.trajectory import blend, bump
from r2s2r.rig.interfaces import Rig


class Eyes(Protocol):
    """What the operator perceives of the cell."""

    def now(self) -> float: ...

    def object_pose(self) -> np.ndarray:
        """The presented object's pose (7,) in the cell frame."""
        ...

    def hand_pose(self, side: str) -> np.ndarray:
        """Where the robot's TCP of arm ``side`` is (7,) in the cell frame."""
        ...

    def belt_speed(self) -> float: ...


class TrackedRig(Rig, Protocol):
    """A rig that tracks the object it presents (the twin, ``TwinRig.object_pose``)."""

    def object_pose(self) -> np.ndarray:
        """Pose (7,) of the presented object in the cell frame."""
        ...


class TwinEyes:
    """A person's view of the twin.

    ``object_pose`` asks the twin where the object is (``TwinRig.object_pose``), standing in
    for a person seeing the object on the belt. It reveals no hidden world parameters
    (camera, belt or controller offsets), only where the object visibly is. The robot hand
    is seen through the arm's public state; the belt speed through the conveyor.
    """

    def __init__(self, rig: TrackedRig) -> None:
        self.rig = rig

    def now(self) -> float:
        return self.rig.now()

    def object_pose(self) -> np.ndarray:
        return self.rig.object_pose()

    def hand_pose(self, side: str) -> np.ndarray:
        return np.array(self.rig.arms[side].state().tcp_pose)

    def belt_speed(self) -> float:
        return self.rig.conveyor.speed()


@dataclass
class Segment:
    """A minimum-jerk move from ``start`` to a (possibly moving) goal through a detour."""

    t0: float
    duration: float
    start: np.ndarray
    goal: Callable[[float], np.ndarray]
    via: np.ndarray = field(default_factory=lambda: np.zeros(3))

    def at(self, t: float) -> np.ndarray:
        tau = (t - self.t0) / self.duration
        return blend(self.start, self.goal(t), tau) + self.via * bump(tau)

    def done(self, t: float) -> bool:
        return t - self.t0 >= self.duration


@dataclass
class Style:
    """One episode's human variability, drawn when it begins."""

    reaction_s: float
    reach_s: float
    hover_s: float
    hesitate_s: float
    descend_s: float
    close_s: float
    hold_s: float
    lift_s: float
    lift_m: float
    carry_s: float
    correct_s: float
    via_reach: np.ndarray
    via_carry: np.ndarray
    overshoot: np.ndarray
    grasp_offset: np.ndarray
    grasp_scale: float
    wobble: np.ndarray
    tremor_amp: np.ndarray
    tremor_hz: np.ndarray
    tremor_phase: np.ndarray

    @classmethod
    def draw(cls, rng: np.random.Generator, p_hesitate: float, p_overshoot: float) -> Style:
        overshoot = np.zeros(3)
        if rng.random() < p_overshoot:
            direction = rng.normal(size=3) * [1.0, 1.0, 0.4]
            overshoot = direction / np.linalg.norm(direction) * rng.uniform(0.02, 0.04)
        return cls(
            reaction_s=rng.uniform(0.25, 0.6),
            reach_s=rng.uniform(1.0, 1.5),
            hover_s=rng.uniform(0.25, 0.45),
            hesitate_s=rng.uniform(0.3, 0.8) if rng.random() < p_hesitate else 0.0,
            descend_s=rng.uniform(0.7, 0.95),
            close_s=rng.uniform(0.3, 0.45),
            hold_s=rng.uniform(0.15, 0.3),
            lift_s=rng.uniform(0.8, 1.1),
            lift_m=rng.uniform(0.2, 0.25),
            carry_s=rng.uniform(1.3, 1.8),
            correct_s=rng.uniform(0.3, 0.5),
            via_reach=rng.normal(0.0, 1.0, 3) * [0.02, 0.02, 0.01] + [0.0, 0.0, 0.04],
            via_carry=rng.normal(0.0, 1.0, 3) * [0.02, 0.02, 0.01] + [0.0, 0.0, 0.03],
            overshoot=overshoot,
            grasp_offset=rng.normal(0.0, 1.0, 3) * [0.003, 0.003, 0.002],
            grasp_scale=rng.uniform(0.97, 1.08),
            wobble=rng.normal(0.0, np.radians(2.0), 3),
            tremor_amp=rng.uniform(0.0004, 0.0009, 3),
            tremor_hz=rng.uniform(8.0, 12.0, 3),
            tremor_phase=rng.uniform(0.0, 2 * np.pi, 3),
        )
