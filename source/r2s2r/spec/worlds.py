"""Named world and task variants: ``nominal`` (CAD), ``grounded`` (written by grounding)."""

from __future__ import annotations

from pathlib import Path

from r2s2r.paths import config_dir
from r2s2r.spec import SpecError, TaskSpec, WorldSpec, resolve_config

WORLD_NAMES = ("nominal", "grounded")


def grounded_world_path() -> Path:
    return config_dir() / "world" / "grounded.yaml"


def load_world(world: str | Path | WorldSpec) -> WorldSpec:
    """A WorldSpec from a spec, a preset name or a YAML path."""
    if isinstance(world, WorldSpec):
        return world
    if str(world) == "grounded" and not grounded_world_path().is_file():
        raise SpecError(
            f"the grounded world does not exist yet ({grounded_world_path()} is missing). "
            "World grounding writes it: run `r2s2r ground all --rig twin` (or --rig hardware) "
            "and copy DIR/grounded.yaml there, or pass world=<path to a WorldSpec YAML>."
        )
    path = resolve_config("world", world)
    if not path.is_file():
        raise SpecError(
            f"unknown world {str(world)!r}: expected one of {WORLD_NAMES} or a "
            f"path to a WorldSpec YAML file ({path} does not exist)"
        )
    return WorldSpec.load(path)


def load_task(task: str | Path | TaskSpec) -> TaskSpec:
    """A TaskSpec from a spec, a preset name or a YAML path."""
    if isinstance(task, TaskSpec):
        return task
    path = resolve_config("task", task)
    if not path.is_file():
        raise SpecError(f"unknown task {str(task)!r}: {path} does not exist")
    return TaskSpec.load(path)


def sorting_arm(task: TaskSpec, world: WorldSpec, object_name: str) -> str:
    """The arm that sorts ``object_name``: the one on its bin's side of the cell."""
    obj = task.object_named(object_name)
    bin_x = world.layout.bins[task.bin_for(obj).name].pos[0]
    return "left" if bin_x < 0 else "right"
