"""The named worlds and tasks (explicit registries), and how a name, a path or a spec
becomes one.

Worlds: ``nominal`` (the CAD world, a packaged preset) and ``grounded`` (written by world
grounding into the user's ``config/world/grounded.yaml``). Tasks: ``pick_sort``. A preset is
read from the user's config folder first (``r2s2r.paths``), so a user's own
``config/world/nominal.yaml`` overrides the packaged one.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.resources.abc import Traversable
from pathlib import Path

from r2s2r.paths import find_config, user_config_dir
from r2s2r.spec.base import SpecError
from r2s2r.spec.registry import Registry
from r2s2r.spec.task import TaskSpec
from r2s2r.spec.world import WorldSpec

WORLDS: Registry[Callable[[], WorldSpec]] = Registry("world")
TASKS: Registry[Callable[[], TaskSpec]] = Registry("task")


def grounded_world_path() -> Path:
    """Where the grounded world is read from (the user's config folder)."""
    return user_config_dir() / "world" / "grounded.yaml"


@WORLDS.add("nominal")
def nominal_world() -> WorldSpec:
    """The CAD world (``world/nominal.yaml``)."""
    return WorldSpec.load(_preset("world", "nominal"))


@WORLDS.add("grounded")
def grounded_world() -> WorldSpec:
    """The world grounding wrote (``world/grounded.yaml`` in the user's config folder)."""
    path = grounded_world_path()
    if not path.is_file():
        raise SpecError(
            f"the grounded world does not exist yet ({path} is missing). "
            "World grounding writes it: run `r2s2r ground all --rig twin` (or --rig hardware) "
            "and copy DIR/grounded.yaml there, or pass world=<path to a WorldSpec YAML>."
        )
    return WorldSpec.load(path)


@TASKS.add("pick_sort")
def pick_sort_task() -> TaskSpec:
    """The pick-and-sort task (``task/pick_sort.yaml``)."""
    return TaskSpec.load(_preset("task", "pick_sort"))


def _preset(kind: str, name: str) -> Path | Traversable:
    found = find_config(kind, name)
    if found is None:
        raise SpecError(
            f"preset {kind}/{name}.yaml is neither in {user_config_dir()} nor in the package's "
            "presets (a broken install?)"
        )
    return found


def _is_path(source: str | Path) -> bool:
    candidate = Path(source)
    return candidate.suffix in (".yaml", ".yml") or candidate.is_file()


def load_world(world: str | Path | WorldSpec) -> WorldSpec:
    """A WorldSpec from a spec, a registered name or a YAML path."""
    if isinstance(world, WorldSpec):
        return world
    if _is_path(world):
        return WorldSpec.load(world)
    if str(world) not in WORLDS:
        raise SpecError(f"{WORLDS.unknown(world)}; or pass a path to a WorldSpec YAML file")
    return WORLDS.get(str(world))()


def world_at(
    size: int | tuple[int, int] | None, world: str | Path | WorldSpec = "nominal"
) -> WorldSpec:
    """``world`` (a spec, a registered name or a YAML path) delivering ``size`` px views:
    square for an int, (width, height) for a pair, the world's own size when None."""
    spec = load_world(world)
    if size is None:
        return spec
    obs_size = size if isinstance(size, tuple) else (size, size)
    return spec.replace(render={"obs_size": obs_size})


def load_task(task: str | Path | TaskSpec) -> TaskSpec:
    """A TaskSpec from a spec, a registered name or a YAML path."""
    if isinstance(task, TaskSpec):
        return task
    if _is_path(task):
        return TaskSpec.load(task)
    if str(task) not in TASKS:
        raise SpecError(f"{TASKS.unknown(task)}; or pass a path to a TaskSpec YAML file")
    return TASKS.get(str(task))()


def sorting_arm(task: TaskSpec, world: WorldSpec, object_name: str) -> str:
    """The arm that sorts ``object_name``: the one on its bin's side of the cell."""
    obj = task.object_named(object_name)
    bin_x = world.layout.bins[task.bin_for(obj).name].pos[0]
    return "left" if bin_x < 0 else "right"
