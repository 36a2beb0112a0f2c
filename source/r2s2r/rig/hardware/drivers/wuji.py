"""The Wuji Hand 2 through ``wujihandpy`` (the 'wuji' extra).

Written for ``wujihandpy`` 1.8.0 and checked at open (``WUJIHANDPY``): a release other than
1.8.x is refused with both versions named. The SDK reads and writes joint positions as (5, 4)
arrays in radians: row ``f - 1`` is the vendor's finger ``f`` (the thumb first), column
``k - 1`` its joint ``k``, the joint the vendor's description
(``wuji-hand-description``, ``mjcf/{side}.xml``) names ``{side}_finger{f}_joint{k}``; the
vendor's own examples flex fingers 2-5 by writing rows ``[y, 0, y, y]`` (joint 1 flexes the
knuckle, joint 2 turns the finger sideways).

The driver maps the cell's hand joints to that grid by name, never by position: it is given
the embodiment's joint names (the vendor's, without the side) and places each value in the
row and column its name says, so a model that lists its joints in another order still
commands the joint it names. Clamping targets to the joint ranges is the safety supervisor's
job; this driver only rejects arrays of the wrong shape or with non-finite values.

Assumptions about the device (from the SDK's stubs and the vendor's examples; not checked
against a hand from here): ``Hand()`` or ``Hand(serial_number=...)`` opens the USB device,
``write_joint_enabled(True)`` enables the joints, and positions have the description's zero
and sign.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from r2s2r.optional import missing_extra
from r2s2r.rig.hardware.drivers.sdk import SdkRequirement, require_sdk
from r2s2r.rig.interfaces import HandState
from r2s2r.sim.robots.wuji_hand import FINGERS, JOINTS_PER_FINGER, WUJI_JOINT_NAMES

WUJIHANDPY = SdkRequirement(
    dist="wujihandpy",
    written_for="1.8.0",
    supported="==1.8.*",
    what="the Wuji hand driver",
    install="pip install 'wujihandpy==1.8.0'",
)
_NAME = re.compile(r"(?:(?:right|left)_)?finger([1-5])_joint([1-4])")


def import_wujihandpy() -> Any:
    """The one place r2s2r imports the Wuji hand SDK."""
    try:
        import wujihandpy
    except ImportError as err:
        raise missing_extra(err, "wuji") from err
    return wujihandpy


def sdk_index(name: str) -> tuple[int, int]:
    """The SDK grid's (row, column) of the vendor's joint ``name`` (with or without its side:
    ``right_finger2_joint1`` or ``finger2_joint1``)."""
    match = _NAME.fullmatch(name)
    if match is None:
        raise ValueError(
            f"{name!r} is not a Wuji hand joint name (the vendor's: finger{{1-5}}_joint{{1-4}}, "
            "optionally after right_ or left_)"
        )
    return int(match[1]) - 1, int(match[2]) - 1


class JointMap:
    """Where each of the cell's hand joints (``names``, in the cell's order) sits in the SDK's
    (5, 4) grid."""

    def __init__(self, names: Sequence[str] = WUJI_JOINT_NAMES) -> None:
        self.names = tuple(names)
        cells = [sdk_index(n) for n in self.names]
        if sorted(cells) != [(f, k) for f in range(FINGERS) for k in range(JOINTS_PER_FINGER)]:
            raise ValueError(
                f"hand joints {list(self.names)}: need each of the vendor's 20 joints "
                "(finger1..5 x joint1..4) exactly once"
            )
        self.rows = np.array([r for r, _ in cells])
        self.cols = np.array([c for _, c in cells])

    def to_grid(self, q: np.ndarray, what: str = "hand joint targets") -> np.ndarray:
        """Joint vector (20,) in the cell's order → the SDK's (5, 4) finger-by-joint array."""
        arr = np.asarray(q, dtype=np.float64)
        if arr.shape != (len(self.names),):
            raise ValueError(
                f"{what}: expected {len(self.names)} joint values (the cell's order), got "
                f"shape {arr.shape}"
            )
        if not np.isfinite(arr).all():
            raise ValueError(f"{what}: non-finite values {arr}")
        grid = np.empty((FINGERS, JOINTS_PER_FINGER))
        grid[self.rows, self.cols] = arr
        return grid

    def from_grid(self, grid: Any) -> np.ndarray:
        """The SDK's (5, 4) finger-by-joint array → joint vector (20,) in the cell's order."""
        arr = np.asarray(grid, dtype=np.float64)
        if arr.shape != (FINGERS, JOINTS_PER_FINGER):
            raise ValueError(f"the hand reported joint positions of shape {arr.shape}, not (5, 4)")
        return arr[self.rows, self.cols].copy()


class WujiHand:
    """One Wuji hand (the ``Hand`` interface); opens and enables it on construction.

    ``joints`` are the cell's hand joint names in its order (the embodiment's
    ``hand_joints``). ``sdk`` defaults to the imported ``wujihandpy``; pass another module
    object with the same API to run the driver without a hand.
    """

    def __init__(
        self,
        name: str = "hand",
        serial_number: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        sdk: Any = None,
        joints: Sequence[str] = WUJI_JOINT_NAMES,
    ) -> None:
        self.name = name
        self._clock = clock
        self.map = JointMap(joints)
        sdk = import_wujihandpy() if sdk is None else sdk
        self.sdk_version = require_sdk(WUJIHANDPY, sdk, name)
        self._hand = sdk.Hand() if serial_number is None else sdk.Hand(serial_number=serial_number)
        self._hand.write_joint_enabled(True)

    def state(self) -> HandState:
        q = self.map.from_grid(self._hand.read_joint_actual_position())
        return HandState(self._clock(), q)

    def send_joint_targets(self, q: np.ndarray) -> None:
        self._hand.write_joint_target_position(self.map.to_grid(q, f"{self.name} joint targets"))

    def close(self) -> None:
        """Disable the joints (the fingers go limp)."""
        self._hand.write_joint_enabled(False)
