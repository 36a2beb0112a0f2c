"""r2s2r: real2sim2real co-training for dexterous bimanual manipulation.

Importing the package registers the gymnasium environments:
``R2S2R/PickSort-v0`` (kwargs ``world``, ``condition``, ``physics``, ...; with
``gym.make_vec(id, num_envs=N, vectorization_mode="vector_entry_point")`` the N worlds run
in one MuJoCo Warp batch),
``R2S2R/PickSort-Ungrounded-v0`` (the nominal CAD world) and ``R2S2R/PickSort-Grounded-v0``
(the world that grounding writes to ``config/world/grounded.yaml``).
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

ENV_IDS = ("R2S2R/PickSort-v0", "R2S2R/PickSort-Grounded-v0", "R2S2R/PickSort-Ungrounded-v0")


def _make_pick_sort(**kwargs: Any) -> Any:
    # Imported here so that `import r2s2r` stays light (no MuJoCo or OpenGL at import time).
    from r2s2r.sim.env import PickSortEnv

    return PickSortEnv(**kwargs)


def _make_pick_sort_vector(**kwargs: Any) -> Any:
    from r2s2r.sim.vector_env import PickSortVectorEnv

    return PickSortVectorEnv(**kwargs)


def _register() -> None:
    import gymnasium as gym

    defaults = {
        "R2S2R/PickSort-v0": {},
        "R2S2R/PickSort-Grounded-v0": {"world": "grounded"},
        "R2S2R/PickSort-Ungrounded-v0": {"world": "nominal"},
    }
    for env_id, kwargs in defaults.items():
        if env_id not in gym.registry:
            gym.register(
                id=env_id,
                entry_point=_make_pick_sort,
                vector_entry_point=_make_pick_sort_vector,
                kwargs=kwargs,
                max_episode_steps=None,
                disable_env_checker=True,
            )


_register()
