"""cuRobo (NVIDIA's GPU motion generator, NVlabs/curobo v0.7) as the planner's carry
backend: ``CuroboCarry`` runs cuRobo's ``MotionGen`` on the configuration that
``r2s2r.behavior.curobo_config`` makes of the cell. This is the one place r2s2r imports
cuRobo; it needs an NVIDIA GPU and a source install (``CUROBO_INSTALL``).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from r2s2r.behavior.curobo_config import (
    DEFAULT_CUROBO,
    CuroboCfg,
    cell_arm_urdf,
    joint_names,
    robot_config,
    world_cuboids,
)
from r2s2r.behavior.kinematics import ArmKinematics
from r2s2r.sim.cell import Cell

END_TOL_RAD = 1e-3  # The most a cuRobo route may miss its ends by.
CUROBO_INSTALL = "pip install git+https://github.com/NVlabs/curobo.git --no-build-isolation"


def missing_curobo(err: ImportError) -> ImportError:
    """The error to raise when cuRobo failed to import (it is no pip extra of r2s2r)."""
    return ImportError(
        f"cuRobo is needed for the cuRobo carry planner but could not be imported ({err}). "
        "It is not on PyPI and needs an NVIDIA GPU with CUDA: install PyTorch with CUDA, "
        f"then cuRobo from source: {CUROBO_INSTALL} "
        "(https://curobo.org/get_started/1_install_instructions.html)."
    )


def _import_curobo() -> SimpleNamespace:
    """cuRobo's modules: the one place r2s2r imports cuRobo."""
    try:
        from curobo.geom.sdf import world
        from curobo.types import base, state
        from curobo.wrap.reacher import motion_gen
    except ImportError as err:
        raise missing_curobo(err) from err
    return SimpleNamespace(world=world, base=base, state=state, motion_gen=motion_gen)


class CuroboCarry:
    """The carry on cuRobo's ``MotionGen`` (GPU): per arm and hand posture, one motion
    generator (built and warmed up on first use) in the cell frame, the other arm at home."""

    name = "curobo"

    def __init__(self, cell: Cell, cfg: CuroboCfg = DEFAULT_CUROBO) -> None:
        self._cu = _import_curobo()
        world, task = cell.scene.world, cell.scene.task
        if world.assets.arm_mjcf:
            raise ValueError("the cuRobo carry models the project's Rizon 4s, not a vendor arm")
        self.model, self.cfg = cell.scene.model, cfg
        self.dt = 1.0 / task.control_hz
        self.home = cell.home_qpos
        self.retract = np.asarray(world.controller.home, float)
        self._sweep = world.layout.belt.texture_period / 2  # The belt slab's travel.
        self._dir = tempfile.TemporaryDirectory(prefix="r2s2r_curobo_")
        self._gens: dict[tuple[str, bytes], Any] = {}

    def _motion_gen(self, side: str, hand: np.ndarray) -> Any:
        key = (side, np.round(np.asarray(hand, float), 4).tobytes())
        if key not in self._gens:
            cu = self._cu
            urdf = Path(self._dir.name) / f"{side}.urdf"
            urdf.write_text(cell_arm_urdf(self.model, side))
            robot = robot_config(self.model, side, hand, str(urdf), self.retract, self.cfg)
            world = world_cuboids(self.model, side, self.home, self._sweep)
            config = cu.motion_gen.MotionGenConfig.load_from_robot_config(
                robot,
                world,
                cu.base.TensorDeviceType(),
                interpolation_dt=self.dt,
                collision_checker_type=cu.world.CollisionCheckerType.PRIMITIVE,
                collision_cache={"obb": len(world["cuboid"])},
            )
            gen = cu.motion_gen.MotionGen(config)
            gen.warmup(warmup_js_trajopt=True)
            self._gens[key] = gen
        return self._gens[key]

    def carry(
        self, kin: ArmKinematics, q0: np.ndarray, q1: np.ndarray, hand: np.ndarray
    ) -> np.ndarray | None:
        """Joint positions (T, 7) every control step after q0 (7,) up to q1 (7,), both at
        rest, clear of the cell with the hand in posture ``hand`` (20,); None if cuRobo
        finds no route. (As ``OmplCarry``: q0 is not a row, q1 the last.)"""
        cu, gen = self._cu, self._motion_gen(kin.side, hand)
        names = joint_names(kin.side)

        def state(q: np.ndarray) -> Any:
            position = gen.tensor_args.to_device(np.asarray(q, float).reshape(1, 7))
            return cu.state.JointState.from_position(position, joint_names=names)

        query = cu.motion_gen.MotionGenPlanConfig(
            max_attempts=self.cfg.max_attempts,
            timeout=self.cfg.timeout_s,
            time_dilation_factor=self.cfg.vel_share if self.cfg.vel_share < 1 else None,
        )
        result = gen.plan_single_js(state(q0), state(q1), query)
        if not bool(result.success.view(-1)[0].item()):
            return None
        plan = result.get_interpolated_plan().get_ordered_joint_state(names)
        path = np.asarray(plan.position.detach().cpu().numpy(), float).reshape(-1, 7)
        # cuRobo counts a goal within 0.05 rad reached and works in float32: start at q0 and
        # end exactly at q1, or not at all.
        if np.abs(path[0] - q0).max() > END_TOL_RAD or np.abs(path[-1] - q1).max() > END_TOL_RAD:
            return None
        path[-1] = q1
        return path[1:] if len(path) > 1 else path
