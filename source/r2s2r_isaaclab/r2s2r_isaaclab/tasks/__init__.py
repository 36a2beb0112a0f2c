"""Task registration: every ``names.task_variants`` task in gymnasium's registry, the way
Isaac Lab registers its own (``entry_point`` and ``env_cfg_entry_point``). This module is the
package's ``isaaclab.tasks`` entry point."""

from __future__ import annotations

import gymnasium as gym

from r2s2r_isaaclab.names import task_variants

ENV_ENTRY_POINT = "r2s2r_isaaclab.env:PickSortIsaacEnv"
MIMIC_ENTRY_POINT = "r2s2r_isaaclab.mimic:PickSortMimicEnv"


def register_tasks() -> tuple[str, ...]:
    """Register every task not yet in the registry; returns all the task ids."""
    ids = []
    for variant in task_variants():
        ids.append(variant.task_id)
        if variant.task_id in gym.registry:
            continue
        gym.register(
            id=variant.task_id,
            entry_point=MIMIC_ENTRY_POINT if variant.mimic else ENV_ENTRY_POINT,
            kwargs={"env_cfg_entry_point": f"r2s2r_isaaclab.env_cfg:{variant.cfg_class_name}"},
            disable_env_checker=True,
        )
    return tuple(ids)


TASK_IDS = register_tasks()
