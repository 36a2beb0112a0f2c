"""The Isaac Lab task names: world variant x evaluation condition (x Mimic), Kit- and
Isaac-Lab-free so that anything can list them.

``Isaac-R2S2R-PickSort-<World>[-<Condition>][-Mimic]-v0``: ``<World>`` is ``Grounded`` (the
WorldSpec world grounding wrote, ``grounded``) or ``Ungrounded`` (the CAD world,
``nominal``); ``<Condition>`` is one of the core's shifted evaluation conditions
(``r2s2r.spec.conditions.CONDITIONS``) in CamelCase, left out for ``nominal``.
"""

from __future__ import annotations

from dataclasses import dataclass

from r2s2r.spec import TaskSpec, WorldSpec
from r2s2r.spec.conditions import CONDITIONS, apply_condition
from r2s2r.spec.worlds import load_task, load_world

# The world variants: task-name word -> the core's world name.
WORLD_VARIANTS: dict[str, str] = {"Grounded": "grounded", "Ungrounded": "nominal"}
TASK_PREFIX = "Isaac-R2S2R-PickSort"


def camel(name: str) -> str:
    """``red_light`` -> ``RedLight``."""
    return "".join(part.capitalize() for part in name.split("_"))


@dataclass(frozen=True)
class TaskVariant:
    """One registered task: its world variant, condition and whether it is the Mimic env."""

    variant: str  # "Grounded" or "Ungrounded"
    condition: str  # a name in CONDITIONS
    mimic: bool = False

    @property
    def world(self) -> str:
        """The core's world name (``grounded`` or ``nominal``)."""
        return WORLD_VARIANTS[self.variant]

    @property
    def task_id(self) -> str:
        parts = [TASK_PREFIX, self.variant]
        if self.condition != "nominal":
            parts.append(camel(self.condition))
        if self.mimic:
            parts.append("Mimic")
        return "-".join(parts) + "-v0"

    @property
    def cfg_class_name(self) -> str:
        """The env config class registered for this task (``r2s2r_isaaclab.env_cfg``)."""
        cond = "" if self.condition == "nominal" else camel(self.condition)
        return f"PickSort{self.variant}{cond}{'Mimic' if self.mimic else ''}EnvCfg"


def variant_specs(
    world: str, condition: str, task: str = "pick_sort"
) -> tuple[TaskSpec, WorldSpec]:
    """The task and world an env of ``world`` under ``condition`` runs (condition applied)."""
    return apply_condition(condition, load_task(task), load_world(world))


def variant_of(task_id: str) -> TaskVariant | None:
    """The registered task called ``task_id``, or None."""
    return next((v for v in task_variants() if v.task_id == task_id), None)


def task_variants() -> tuple[TaskVariant, ...]:
    """Every task: both world variants under every condition, and each world's Mimic env
    (nominal condition: Mimic generates from the demos of the nominal cell)."""
    out = [TaskVariant(v, c) for v in WORLD_VARIANTS for c in CONDITIONS.names()]
    out += [TaskVariant(v, "nominal", mimic=True) for v in WORLD_VARIANTS]
    return tuple(out)


def task_ids() -> tuple[str, ...]:
    return tuple(t.task_id for t in task_variants())
