"""The Wuji Hand 2 through ``wujihandpy`` (the 'wuji' extra).

The SDK reads and writes joint positions as (5, 4) arrays in radians: one row per finger,
thumb first, four joints per finger from the palm outwards. The rig's ``Hand`` interface uses
the same order flattened to (20,). Clamping targets to the joint ranges is the safety
supervisor's job; this driver only rejects arrays of the wrong shape or with non-finite values.

Assumptions about the ``wujihandpy`` API (from its README and examples; not checked against
a device from here): ``Hand()`` or ``Hand(serial_number=...)`` opens the USB device,
``write_joint_enabled(True)`` enables the joints, ``read_joint_actual_position()`` returns a
(5, 4) array and ``write_joint_target_position(array)`` takes one; its joints 1-4 of a finger
are the model's j1 (abduction), j2 (MCP), j3 (PIP), j4 (DIP), with the same zero and sign.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from r2s2r.optional import missing_extra
from r2s2r.rig.interfaces import HandState

FINGERS, JOINTS_PER_FINGER = 5, 4


def import_wujihandpy() -> Any:
    """The one place r2s2r imports the Wuji hand SDK."""
    try:
        import wujihandpy
    except ImportError as err:
        raise missing_extra(err, "wuji") from err
    return wujihandpy


def to_grid(q: np.ndarray, what: str = "hand joint targets") -> np.ndarray:
    """Joint vector (20,) thumb first → the SDK's (5, 4) finger-by-joint array."""
    arr = np.asarray(q, dtype=np.float64)
    if arr.shape != (FINGERS * JOINTS_PER_FINGER,):
        raise ValueError(f"{what}: expected 20 joint values (thumb first), got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError(f"{what}: non-finite values {arr}")
    return arr.reshape(FINGERS, JOINTS_PER_FINGER).copy()


def from_grid(grid: Any) -> np.ndarray:
    """The SDK's (5, 4) finger-by-joint array → joint vector (20,) thumb first."""
    arr = np.asarray(grid, dtype=np.float64)
    if arr.shape != (FINGERS, JOINTS_PER_FINGER):
        raise ValueError(f"the hand reported joint positions of shape {arr.shape}, not (5, 4)")
    return arr.reshape(-1).copy()


class WujiHand:
    """One Wuji hand (the ``Hand`` interface); opens and enables it on construction.

    ``sdk`` defaults to the imported ``wujihandpy``; pass another module object with the same
    API to run the driver without a hand.
    """

    def __init__(
        self,
        name: str = "hand",
        serial_number: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        sdk: Any = None,
    ) -> None:
        self.name = name
        self._clock = clock
        sdk = import_wujihandpy() if sdk is None else sdk
        self._hand = sdk.Hand() if serial_number is None else sdk.Hand(serial_number=serial_number)
        self._hand.write_joint_enabled(True)

    def state(self) -> HandState:
        q = from_grid(self._hand.read_joint_actual_position())
        return HandState(self._clock(), q)

    def send_joint_targets(self, q: np.ndarray) -> None:
        self._hand.write_joint_target_position(to_grid(q, f"{self.name} joint targets"))

    def close(self) -> None:
        """Disable the joints (the fingers go limp)."""
        self._hand.write_joint_enabled(False)
