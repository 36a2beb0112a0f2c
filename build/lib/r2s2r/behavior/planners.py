"""The carry planners by name (``r2s2r generate --planner``): ``cpu`` (OMPL's RRT-Connect,
``routes.OmplCarry``) and ``curobo`` (cuRobo's motion generator on an NVIDIA GPU,
``curobo.CuroboCarry``; cuRobo itself is imported only when one is built)."""

from __future__ import annotations

from typing import Protocol

from r2s2r.behavior.curobo import CuroboCarry
from r2s2r.behavior.routes import CarryPlanner, JointLimits, OmplCarry
from r2s2r.sim.cell import Cell
from r2s2r.spec.registry import Registry


class CarryFactory(Protocol):
    """Builds a carry planner for ``cell``'s arms: free-space ``limits``, the control period
    ``dt`` (s) and a time budget ``plan_s`` (s) per carry (each backend uses what applies)."""

    def __call__(
        self, cell: Cell, limits: JointLimits, dt: float, plan_s: float
    ) -> CarryPlanner: ...


CARRY_PLANNERS: Registry[CarryFactory] = Registry("planner")


@CARRY_PLANNERS.add("cpu")
def ompl_carry(cell: Cell, limits: JointLimits, dt: float, plan_s: float) -> CarryPlanner:
    """OMPL's RRT-Connect with MuJoCo as the validity checker, timed with ruckig."""
    return OmplCarry(limits, dt, plan_s)


@CARRY_PLANNERS.add("curobo")
def curobo_carry(cell: Cell, limits: JointLimits, dt: float, plan_s: float) -> CarryPlanner:
    """cuRobo's ``MotionGen`` (its own limits and budget, ``CuroboCfg``)."""
    return CuroboCarry(cell)
