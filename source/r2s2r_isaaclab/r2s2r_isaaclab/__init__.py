"""r2s2r's Isaac Lab extension: the pick-and-sort tasks in grounded and ungrounded world
variants under every evaluation condition, on Newton's MuJoCo Warp solver (no Kit needed).

Importing it registers the tasks (``TASK_IDS``). Public API:

- ``TASK_IDS``, ``task_variants()``: the registered task ids and what each one is.
- ``register_tasks()``: registers them (idempotent; done on import).
- ``make_env_cfg(task_id, device="cpu", num_envs=None)``: the config a task id registers
  (as ``isaaclab_tasks.utils.parse_env_cfg`` gives it).
- ``make_env(task_id, device="cpu", num_envs=None)``: the built env.

Modules: ``env_cfg`` (config classes), ``env`` (the env), ``mimic`` (the Mimic env),
``mdp`` (its observation, success and recorder terms), ``scene_state`` (its ``scene``:
Isaac Lab's ``get_state`` / ``reset_to``), ``newton_physics`` (the physics backend), ``hdf5``
(dataset conversion to and from Isaac Lab's HDF5 format). The USD export of the cell is in
the core: ``r2s2r.sim.usd``.
"""

from __future__ import annotations

from typing import Any

from r2s2r_isaaclab.names import TaskVariant, task_variants
from r2s2r_isaaclab.tasks import TASK_IDS, register_tasks


def make_env_cfg(task_id: str, device: str = "cpu", num_envs: int | None = None) -> Any:
    """The env config registered for ``task_id`` with ``device`` and ``num_envs`` set."""
    from isaaclab_tasks.utils import parse_env_cfg

    _check_id(task_id)
    return parse_env_cfg(task_id, device=device, num_envs=num_envs)


def make_env(task_id: str, device: str = "cpu", num_envs: int | None = None) -> Any:
    """``gym.make(task_id, cfg=make_env_cfg(...))``: the env, built."""
    import gymnasium as gym

    return gym.make(task_id, cfg=make_env_cfg(task_id, device, num_envs)).unwrapped


def _check_id(task_id: str) -> None:
    if task_id not in TASK_IDS:
        import difflib

        close = difflib.get_close_matches(task_id, TASK_IDS, n=3)
        hint = f"; did you mean {' or '.join(close)}?" if close else ""
        raise KeyError(f"unknown task {task_id!r}{hint} (known: {', '.join(TASK_IDS)})")


__all__ = ["TASK_IDS", "TaskVariant", "make_env", "make_env_cfg", "register_tasks", "task_variants"]
