"""The behaviors that make an episode's commands for a task instance, by name.

``adapted`` (grounded behavior): a source demo chosen for the instance and adapted to it
(``adapt.py``). ``planned`` (ungrounded behavior): a synthesized grasp and a planned route
(``plan.py``). Both are ``Behavior``s, built by name from ``BEHAVIORS`` out of one
``BehaviorSetup``; ``commands(instance, rng)`` gives the episode's actions, or the reason there
are none (the attempt's failure reason).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from r2s2r.behavior.adapt import (
    AdaptCfg,
    AdaptError,
    adapt,
    equivalent_turn,
    instance_of,
    symmetry_period,
)
from r2s2r.behavior.demo import SourceDemo
from r2s2r.behavior.execute import Executor
from r2s2r.behavior.instance import TaskInstance
from r2s2r.behavior.plan import PlanError, Planner
from r2s2r.spec import TaskSpec, WorldSpec
from r2s2r.spec.registry import Registry


@dataclass(frozen=True)
class Commands:
    """What a behavior made for one instance: actions (T, 54) at the control rate, or None
    with the ``reason`` (one of ``execute.REASONS``) and what went wrong; and the source demo
    it adapted, if any."""

    actions: np.ndarray | None
    source_demo: str | None = None
    reason: str | None = None
    detail: str = ""


class Behavior(Protocol):
    """Makes the commands of an episode for a task instance."""

    # What making the commands is called in an attempt's timings ("adapt", "plan").
    making: str

    def commands(self, instance: TaskInstance, rng: np.random.Generator) -> Commands:
        """The episode's commands for ``instance``, drawing what is random from ``rng``."""
        ...


@dataclass(frozen=True)
class BehaviorSetup:
    """What a behavior is built from: the world and task, the executor that runs commands in
    simulation (the planner's grasp trials use it), and each behavior's own choices."""

    task: TaskSpec
    world: WorldSpec
    executor: Executor
    # Real demonstrations (needed to adapt).
    demos: Sequence[SourceDemo] = ()
    # Which source demo an instance adapts: the nearest or one at random.
    select: str = "nearest"
    adapt: AdaptCfg = field(default_factory=AdaptCfg)
    # The planned behavior's carry planner, a name in ``planners.CARRY_PLANNERS``: "cpu"
    # (OMPL) or "curobo" (NVIDIA GPU).
    planner: str = "cpu"


class AdaptedBehavior:
    """A source demo handling the instance's object, adapted to the instance."""

    making = "adapt"

    def __init__(
        self,
        demos: Sequence[SourceDemo],
        task: TaskSpec,
        world: WorldSpec,
        select: str = "nearest",
        cfg: AdaptCfg | None = None,
    ) -> None:
        if not demos:
            raise ValueError("the adapted behavior needs real demonstrations: pass --source DIR")
        if select not in ("nearest", "random"):
            raise ValueError(f"select: expected nearest or random, got {select!r}")
        self.demos, self.task, self.world = list(demos), task, world
        self.select, self.cfg = select, cfg or AdaptCfg()
        # Where each demo's own instance sits, for choosing the nearest demo.
        self._own = [instance_of(d, task, world) for d in self.demos]

    def choose(self, instance: TaskInstance, rng: np.random.Generator) -> SourceDemo:
        """The source demo for ``instance``: one handling the same object, at random or the
        nearest in spawn offset, turn (up to the object's symmetry) and belt speed."""
        mine = [j for j, d in enumerate(self.demos) if d.object_name == instance.object_name]
        if self.select == "random":
            return self.demos[mine[int(rng.integers(len(mine)))]]
        period = symmetry_period(self.task, instance.object_name)
        spawn, belt = self.task.spawn, self.task.belt

        def distance(j: int) -> float:
            # The turn counts most: a hand can follow a turned box only so far (15 degrees
            # weigh as much as the whole spawn offset or belt speed range).
            own = self._own[j]
            turn = abs(equivalent_turn(own.yaw - instance.yaw, period)) / (np.pi / 12)
            lateral = abs(own.lateral - instance.lateral) / max(spawn.lateral_jitter, 1e-3)
            speed = abs(own.belt_speed - instance.belt_speed) / np.ptp(belt.speed_range)
            return turn + lateral + speed

        return self.demos[min(mine, key=distance)]

    def commands(self, instance: TaskInstance, rng: np.random.Generator) -> Commands:
        demo = self.choose(instance, rng)
        try:
            actions = adapt(demo, instance, self.task, self.world, rng, self.cfg)
        except AdaptError as err:
            return Commands(None, demo.name, "unreachable", str(err))
        return Commands(actions, demo.name)


class PlannedBehavior:
    """A synthesized grasp and a planned, collision-free route (``Planner``)."""

    making = "plan"

    def __init__(self, planner: Planner) -> None:
        self.planner = planner

    def commands(self, instance: TaskInstance, rng: np.random.Generator) -> Commands:
        try:
            return Commands(self.planner.plan(instance).actions)
        except PlanError as err:
            return Commands(None, None, "planner_failure", str(err))


class BehaviorFactory(Protocol):
    def __call__(self, setup: BehaviorSetup) -> Behavior: ...


def _adapted(setup: BehaviorSetup) -> Behavior:
    return AdaptedBehavior(setup.demos, setup.task, setup.world, setup.select, setup.adapt)


def _planned(setup: BehaviorSetup) -> Behavior:
    cell = setup.executor.env.cell
    planner = Planner(setup.world, setup.task, cell, trial=setup.executor.run, carry=setup.planner)
    return PlannedBehavior(planner)


# The behaviors by name.
BEHAVIORS: Registry[BehaviorFactory] = Registry("behavior")
BEHAVIORS.register("adapted", _adapted)
BEHAVIORS.register("planned", _planned)


def make_behavior(name: str, setup: BehaviorSetup) -> Behavior:
    """The behavior ``name`` (see ``BEHAVIORS``) built from ``setup``."""
    return BEHAVIORS.get(name)(setup)
