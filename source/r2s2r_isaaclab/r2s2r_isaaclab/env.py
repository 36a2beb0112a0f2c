"""The Isaac Lab env of the pick-and-sort tasks: the core's cell on Newton / MuJoCo Warp.

``PickSortIsaacEnv`` is what ``gym.make("Isaac-R2S2R-PickSort-...-v0", cfg=env_cfg)``
builds. It is the core's ``PickSortVectorEnv`` (same episode logic, same observation and
action contract, same info keys) with its physics on Newton's ``SolverMuJoCo``
(``NewtonPhysics``), configured from the env config: ``scene.num_envs`` worlds on
``sim.device``, with the solver options of ``sim.physics.solver_cfg``. A policy trained on
r2s2r data therefore runs on it unchanged.

Isaac Lab's own ``SimulationContext`` builds its Newton model from a USD stage; this env
builds it from the cell's MJCF instead (Newton reads MJCF directly, see ``newton_physics``),
and the USD export (``r2s2r.sim.usd``) is the scene for Isaac Sim's renderer.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import mujoco

from r2s2r.sim.physics import Physics
from r2s2r.sim.vector_env import PickSortVectorEnv
from r2s2r_isaaclab.env_cfg import PickSortEnvCfg
from r2s2r_isaaclab.newton_physics import NewtonPhysics


def solver_options(cfg: PickSortEnvCfg) -> dict[str, Any]:
    """``SolverMuJoCo`` keyword options from the config's ``MJWarpSolverCfg``."""
    solver = cfg.sim.physics.solver_cfg
    return {
        "njmax": solver.njmax,
        "nconmax": solver.nconmax,
        "iterations": solver.iterations,
        "ls_iterations": solver.ls_iterations,
        "solver": solver.solver,
        "integrator": solver.integrator,
        "cone": solver.cone,
        "impratio": solver.impratio,
        "use_mujoco_cpu": solver.use_mujoco_cpu,
        "use_mujoco_contacts": solver.use_mujoco_contacts,
        "disable_contacts": solver.disable_contacts,
    }


class PickSortIsaacEnv(PickSortVectorEnv, gym.Env):  # type: ignore[misc]
    """``cfg.scene.num_envs`` pick-and-sort cells on Newton's MuJoCo Warp solver.

    Batched like Isaac Lab's own envs, and like them a ``gymnasium.Env`` as well (which
    ``gym.make`` requires); every method is the vector env's.
    """

    def __init__(self, cfg: PickSortEnvCfg, render_mode: str | None = None, **kwargs: Any):
        if render_mode is not None:
            raise ValueError(
                f"render_mode={render_mode!r}: this env has no viewer; set cfg.images=True "
                "for camera observations"
            )
        # gym.make passes the registration's config entry points along, as Isaac Lab's envs
        # get them; anything else is a mistake.
        unknown = [k for k in kwargs if not k.endswith("_cfg_entry_point")]
        if unknown:
            raise TypeError(f"PickSortIsaacEnv: unknown arguments {sorted(unknown)}")
        self.cfg = cfg
        task, world = cfg.specs()
        options = solver_options(cfg)

        def newton(model: mujoco.MjModel, num_worlds: int, device: str | None) -> Physics:
            return NewtonPhysics(model, task, world, num_worlds, device, options)

        super().__init__(
            cfg.scene.num_envs,
            world=world,
            task=task,
            action_mode=cfg.action_mode,  # type: ignore[arg-type]
            images=cfg.images,
            device=cfg.sim.device,
            env_state=cfg.env_state,
            physics=newton,
        )
        # The condition was applied to the specs above; keep its name for the record.
        self.condition = cfg.condition

    @property
    def device(self) -> str:
        return self.cfg.sim.device

    @property
    def unwrapped(self) -> PickSortIsaacEnv:
        return self
