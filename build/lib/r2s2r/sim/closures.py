"""The Wuji hand's postures for grasping (20 joint targets, thumb first, four joints per
finger from the knuckle's sideways joint out): what the scripted operator forms with its own
hand and what the planner commands.

- ``RELAXED``: open and at rest; ``PRESHAPE``: flat and open, before a power grasp.
- ``POWER_GRASP``: fingers wrapped, thumb opposed; ``FLAT_GRASP``: the same with the thumb
  closed only half way (a fully flexed thumb reaches the belt under a flat object first).
- ``CLAW_OPEN`` / ``CLAW_SHUT``: for low objects. The thumb is tucked under the palm, its tip
  7 cm behind the knuckles and 4.5 cm below them; the fingers are hooked at the middle and
  end joints with straight knuckles, their tips 7 cm beyond the knuckles. Closing bends only
  the knuckles, sweeping the hooked tips down and back towards the thumb, which pinches
  anything up to 11 cm long between them.
"""

from __future__ import annotations

import numpy as np

RELAXED = np.array([0.3, 0.1, 0.1, 0.05] + [0.0, 0.1, 0.1, 0.05] * 4)
PRESHAPE = np.array([0.0, 0.0, 0.0, 0.0] + [0.0, 0.05, 0.0, 0.0] * 4)
POWER_GRASP = np.array([1.3, 0.7, 0.6, 0.5] + [0.0, 1.4, 1.2, 0.9] * 4)
FLAT_GRASP = np.concatenate([[0.6, 0.2, 0.2, 0.2], POWER_GRASP[4:]])
CLAW_OPEN = np.array([1.2, 0.6, 1.0, 1.4] + [0.0, 0.0, 0.7, 0.5] * 4)
CLAW_SHUT = np.array([1.3, 0.6, 1.0, 1.4] + [0.0, 1.0, 0.7, 0.5] * 4)

# Where each closure puts the TCP (the knuckles), palm down. A power grasp puts them this far
# beyond the object's far side, level with its top, and closes the thumb only half way for
# objects whose half-height is below ``FLAT_BELOW_M``. Objects whose half-height is below
# ``CLAW_BELOW_M`` get the claw instead, when the side it spans reaches at most
# ``CLAW_SPAN_M`` from the centre: the knuckles over the centre, ``CLAW_HEIGHT_M`` above the
# belt or, for taller objects, high enough that the palm's underside (1.5 cm below the
# knuckles) clears the object's top by 1 cm (``PALM_CLEAR_M`` above the top).
POWER_REACH_M = 0.012
FLAT_BELOW_M = 0.028
CLAW_BELOW_M = 0.026
CLAW_SPAN_M = 0.056
CLAW_HEIGHT_M = 0.06
PALM_CLEAR_M = 0.025


def claw_fits(rest_height: float, half: float) -> bool:
    """Whether the claw takes an object of half-height ``rest_height`` whose side the hand
    spans reaches ``half`` from its centre."""
    return rest_height < CLAW_BELOW_M and half <= CLAW_SPAN_M


def claw_offset(rest_height: float) -> np.ndarray:
    """Where the claw puts the TCP relative to the object's centre (3,): over it, the palm
    clear of its top."""
    height = max(CLAW_HEIGHT_M, 2.0 * rest_height + PALM_CLEAR_M) - rest_height
    return np.array([0.0, 0.0, height])


def power_offset(rest_height: float, half: float, fingers: np.ndarray) -> np.ndarray:
    """Where a power grasp puts the TCP relative to the object's centre (3,): just beyond
    its far side along the (horizontal) ``fingers`` direction, level with its top."""
    return fingers * (half + POWER_REACH_M) + [0.0, 0.0, rest_height]


def power_shut(rest_height: float) -> np.ndarray:
    """The power grasp's closed posture: the thumb half closed for flat objects."""
    return FLAT_GRASP if rest_height < FLAT_BELOW_M else POWER_GRASP
