"""The Wuji hand's postures for grasping (20 joint targets in the vendor's order: the thumb's
four, then for each of fingers 2-5 its knuckle's flexion, its sideways turn, its middle and its
end joint): what the scripted operator forms with its own hand and what the planner commands.

- ``RELAXED``: open and at rest; ``PRESHAPE``: flat and open, before a power grasp.
- ``POWER_GRASP``: fingers wrapped, thumb opposed; ``FLAT_GRASP``: the same with the thumb
  closed only half way (a fully flexed thumb reaches the belt under a flat object first).
- ``CLAW_OPEN`` / ``CLAW_SHUT``: for low objects. The thumb is tucked under the palm, its tip
  3 cm behind the TCP and 5 cm below it (the vendor's thumb sits high on the palm and reaches
  no further back); the fingers are hooked at the middle and end joints with straight
  knuckles, their tips 7.7 cm beyond the TCP. Closing bends only the knuckles, sweeping the
  hooked tips down and back towards the thumb, which pinches what lies between them.
"""

from __future__ import annotations

import numpy as np


def posture(thumb: tuple[float, ...], finger: tuple[float, ...]) -> np.ndarray:
    """The hand's 20 joint targets (rad): ``thumb`` (joints 1-4), then ``finger`` (knuckle
    flexion, sideways turn, middle, end) for each of fingers 2-5."""
    return np.array(list(thumb) + list(finger) * 4, dtype=float)


RELAXED = posture((0.3, 0.0, 0.1, 0.05), (0.1, 0.0, 0.1, 0.05))
PRESHAPE = posture((0.05, 0.0, 0.0, 0.0), (0.05, 0.0, 0.0, 0.0))
POWER_GRASP = posture((1.4, 0.0, 0.6, 0.5), (1.4, 0.0, 1.2, 0.9))
FLAT_GRASP = np.concatenate([[0.8, -0.1, 0.0, 0.05], POWER_GRASP[4:]])
CLAW_OPEN = posture((0.24, -0.13, 1.5, 1.05), (0.0, 0.0, 0.7, 0.5))
CLAW_SHUT = posture((0.24, -0.13, 1.5, 1.05), (1.0, 0.0, 0.7, 0.5))

# Where each closure puts the TCP (the knuckles), palm down. A power grasp puts them this far
# beyond the object's far side, level with its top, and closes the thumb only half way for
# objects whose half-height is below ``FLAT_BELOW_M``. Objects whose half-height is below
# ``CLAW_BELOW_M`` get the claw instead, when the side it spans reaches at most
# ``CLAW_SPAN_M`` from the centre: the knuckles placed so that the tucked thumb, ``CLAW_THUMB_M``
# behind them, comes down ``CLAW_CLEAR_M`` behind the object's near side, ``CLAW_HEIGHT_M``
# above the belt or, for taller objects, high enough that the palm's underside (1.5 cm below
# the knuckles) clears the object's top by 1 cm (``PALM_CLEAR_M`` above the top). The span
# keeps the hooked tips a centimetre beyond the far side.
POWER_REACH_M = 0.012
FLAT_BELOW_M = 0.028
CLAW_BELOW_M = 0.026
CLAW_SPAN_M = 0.056
# The claw takes an object surely only up to this far from its centre along the fingers: beyond
# it the hooked tips come down on its top (the tips reach 7.7 cm beyond the TCP).
CLAW_REACH_M = 0.042
CLAW_HEIGHT_M = 0.06
CLAW_THUMB_M = 0.031
CLAW_CLEAR_M = 0.015
PALM_CLEAR_M = 0.025


def claw_fits(rest_height: float, half: float) -> bool:
    """Whether the claw takes an object of half-height ``rest_height`` whose side the hand
    spans reaches ``half`` from its centre."""
    return rest_height < CLAW_BELOW_M and half <= CLAW_SPAN_M


def claw_offset(
    rest_height: float, half: float, fingers: np.ndarray, clear: float | None = None
) -> np.ndarray:
    """Where the claw puts the TCP relative to the object's centre (3,) for an object whose
    side along the (horizontal) ``fingers`` direction reaches ``half`` from its centre: the
    thumb ``clear`` (default ``CLAW_CLEAR_M``) behind its near side, the palm clear of its
    top."""
    height = max(CLAW_HEIGHT_M, 2.0 * rest_height + PALM_CLEAR_M) - rest_height
    back = half + (CLAW_CLEAR_M if clear is None else clear) - CLAW_THUMB_M
    return np.asarray(fingers, dtype=float) * -back + [0.0, 0.0, height]


def power_offset(rest_height: float, half: float, fingers: np.ndarray) -> np.ndarray:
    """Where a power grasp puts the TCP relative to the object's centre (3,): just beyond
    its far side along the (horizontal) ``fingers`` direction, level with its top."""
    return fingers * (half + POWER_REACH_M) + [0.0, 0.0, rest_height]


def power_shut(rest_height: float) -> np.ndarray:
    """The power grasp's closed posture: the thumb half closed for flat objects."""
    return FLAT_GRASP if rest_height < FLAT_BELOW_M else POWER_GRASP
