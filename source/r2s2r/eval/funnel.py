"""The trial funnel: how far a trial got on its way to "sorted", judged from the twin's
readings every control period (``r2s2r.sim.progress``). Learning shows here before it shows
as sorted trials: a policy that reaches but never grasps is not the policy that never moves.

The stages, each needing the one before it:

- ``reached``: a hand came within ``REACH_M`` of the object (nearest hand geom centre to the
  object's centre; the scripted operator's grasps come within 3.7-4.6 cm);
- ``grasped``: at least ``GRASP_PARTS`` parts of one hand (palm, fingers) touched the object
  in the same period;
- ``lifted``: the object rose ``LIFT_M`` above where it first rode the belt while grasped;
- ``over_bin``: after the lift, the object's centre passed over the bin it belongs in;
- ``sorted``: the trial's outcome.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from r2s2r.sim.progress import ProgressReading

STAGES = ("reached", "grasped", "lifted", "over_bin", "sorted")
# The furthest stage of a trial that reached none of them.
NO_STAGE = "none"
REACH_M = 0.06
GRASP_PARTS = 2
LIFT_M = 0.03


@dataclass(frozen=True)
class FunnelResult:
    """A finished trial's funnel: its furthest stage and the nearest a hand came."""

    stage: str
    # None when no period was read.
    min_hand_distance_m: float | None


class Funnel:
    """Accumulates one trial's readings (``update``) into its furthest stage (``result``)."""

    def __init__(self) -> None:
        self._rest_z: float | None = None
        self._min_distance = np.inf
        self._stage = 0  # Stages passed, in STAGES order (0: none).

    def update(self, reading: ProgressReading) -> None:
        z = float(reading.object_pos[2])
        if self._rest_z is None:
            self._rest_z = z
        nearest = float(np.min(reading.hand_distance_m))
        self._min_distance = min(self._min_distance, nearest)
        grasping = int(np.max(reading.touching)) >= GRASP_PARTS
        checks = (
            nearest < REACH_M,
            grasping,
            grasping and z > self._rest_z + LIFT_M,
            reading.over_assigned_bin,
        )
        # Every stage needs the one before it, in this period or an earlier one.
        while self._stage < len(checks) and checks[self._stage]:
            self._stage += 1

    def result(self, outcome: str) -> FunnelResult:
        """The trial's funnel, given how it ended (a sorted trial passed every stage)."""
        stage = len(STAGES) if outcome == "sorted" else self._stage
        name = STAGES[stage - 1] if stage else NO_STAGE
        distance = float(self._min_distance) if np.isfinite(self._min_distance) else None
        return FunnelResult(name, distance)


def funnel_counts(stages: Iterable[str | None]) -> dict[str, int] | None:
    """Trials that passed each stage (a trial counts for its stage and every one before),
    from the trials' furthest stages; None when any trial has no funnel (a real-cell trial,
    or one logged before funnels were recorded)."""
    stages = list(stages)
    if not stages or any(s is None for s in stages):
        return None
    order = {name: i + 1 for i, name in enumerate(STAGES)}
    reached = [order.get(s, 0) for s in stages if s is not None]
    return {name: sum(r >= i + 1 for r in reached) for i, name in enumerate(STAGES)}
