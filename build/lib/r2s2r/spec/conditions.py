"""The evaluation conditions: named transforms of the task and world specs.

A condition maps the (TaskSpec, WorldSpec) of a cell to the pair its episodes run in; the
env, the vector env and the twin apply the named one before they build the scene. The
shifts leave the scene's contents alone (every object of ``task.all_objects`` stays in it),
so a condition changes only what the spec fields say: the key light's colour, the belt's
``fixed_speed`` and the spawn ``pool``. ``all_shifts`` is the composition of the three.
"""

from __future__ import annotations

from collections.abc import Callable

from r2s2r.spec.base import SpecError
from r2s2r.spec.registry import Registry
from r2s2r.spec.task import TaskSpec
from r2s2r.spec.world import WorldSpec

Condition = Callable[[TaskSpec, WorldSpec], tuple[TaskSpec, WorldSpec]]
CONDITIONS: Registry[Condition] = Registry("condition")


def compose(*conditions: Condition) -> Condition:
    """The condition that applies ``conditions`` in order."""

    def composed(task: TaskSpec, world: WorldSpec) -> tuple[TaskSpec, WorldSpec]:
        for condition in conditions:
            task, world = condition(task, world)
        return task, world

    return composed


def apply_condition(name: str, task: TaskSpec, world: WorldSpec) -> tuple[TaskSpec, WorldSpec]:
    """The task and world of condition ``name`` (a registered name)."""
    return CONDITIONS.get(name)(task, world)


@CONDITIONS.add("nominal")
def nominal(task: TaskSpec, world: WorldSpec) -> tuple[TaskSpec, WorldSpec]:
    """The cell as specified."""
    return task, world


@CONDITIONS.add("red_light")
def red_light(task: TaskSpec, world: WorldSpec) -> tuple[TaskSpec, WorldSpec]:
    """The key light in the task's red (``shifts.red_light_rgb``), at its own intensity."""
    lighting = world.lighting.replace(rgb=task.shifts.red_light_rgb)
    return task, world.replace(lighting=lighting)


@CONDITIONS.add("fast_belt")
def fast_belt(task: TaskSpec, world: WorldSpec) -> tuple[TaskSpec, WorldSpec]:
    """Every episode at the belt's ``fast_speed`` (no speed is drawn)."""
    return task.replace(belt=task.belt.replace(fixed_speed=task.belt.fast_speed)), world


@CONDITIONS.add("novel_objects")
def novel_objects(task: TaskSpec, world: WorldSpec) -> tuple[TaskSpec, WorldSpec]:
    """Objects drawn from the task's ``novel_objects`` only."""
    if not task.novel_objects:
        raise SpecError(f"condition novel_objects: task {task.name} has no novel_objects")
    return task.replace(spawn=task.spawn.replace(pool="novel_objects")), world


CONDITIONS.register("all_shifts", compose(red_light, fast_belt, novel_objects))
