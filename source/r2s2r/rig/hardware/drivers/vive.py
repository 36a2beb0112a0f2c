"""The Vive Tracker 3.0 through ``openvr`` (pyopenvr, the 'vive' extra), SteamVR headless.

OpenVR reports a device's pose as a 3x4 row-major matrix ``[R | t]`` in its tracking
universe: metres, right-handed, y up (the standing universe has its origin on the floor).
This driver returns it as ``[x, y, z, qw, qx, qy, qz]`` in that frame (the "tracker frame"
of the teleop calibration); mapping it into the cell is the calibration's job.

Written for pyopenvr 2.12.1401 (OpenVR 2.12) and checked at open (``OPENVR``); each name
below is in that release's ``openvr`` module. Assumptions about its behaviour (from its
documentation and examples; not checked against a device from here):
``init(VRApplication_Other)`` returns the ``IVRSystem``;
``getDeviceToAbsoluteTrackingPose(TrackingUniverseStanding, 0.0, k_unMaxTrackedDeviceCount)``
(a third argument that is not a ctypes array makes it allocate one of the maximum count)
returns the poses, each with ``bPoseIsValid`` and ``mDeviceToAbsoluteTracking`` (indexable as
``m[row][col]``); ``getTrackedDeviceClass(i)`` and
``getStringTrackedDeviceProperty(i, Prop_SerialNumber_String)`` identify the tracker.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from r2s2r.geometry.poses import matrix_to_pose
from r2s2r.optional import missing_extra
from r2s2r.rig.hardware.drivers.sdk import SdkRequirement, require_sdk

# pyopenvr's releases follow OpenVR's (2.12.1401 is OpenVR 2.12.14); 2.5 and older import
# pkg_resources, which current setuptools no longer ships.
OPENVR = SdkRequirement(
    dist="openvr",
    written_for="2.12.1401",
    supported=">=2.12,<3",
    what="the Vive tracker driver (pyopenvr)",
    install="pip install 'r2s2r[vive]'",
)


def import_openvr() -> Any:
    """The one place r2s2r imports pyopenvr."""
    try:
        import openvr
    except ImportError as err:
        raise missing_extra(err, "vive") from err
    return openvr


def openvr_matrix_to_pose(m: Any) -> np.ndarray:
    """Pose (7,) ``[x, y, z, qw, qx, qy, qz]`` of an OpenVR ``HmdMatrix34_t`` (or a 3x4 array)."""
    mat = np.array([[float(m[r][c]) for c in range(4)] for r in range(3)])
    return matrix_to_pose(mat)


class OpenVRSession:
    """One connection to SteamVR, shared by all trackers; ``sdk`` defaults to ``openvr``."""

    def __init__(self, sdk: Any = None) -> None:
        self.sdk = import_openvr() if sdk is None else sdk
        self.sdk_version = require_sdk(OPENVR, self.sdk, "OpenVR session")
        self.system = self.sdk.init(self.sdk.VRApplication_Other)

    def find_tracker(self, serial: str) -> int:
        """The device index of the generic tracker with serial number ``serial``."""
        sdk, found = self.sdk, []
        for i in range(sdk.k_unMaxTrackedDeviceCount):
            if self.system.getTrackedDeviceClass(i) != sdk.TrackedDeviceClass_GenericTracker:
                continue
            name = self.system.getStringTrackedDeviceProperty(i, sdk.Prop_SerialNumber_String)
            if name == serial:
                return i
            found.append(name)
        raise RuntimeError(
            f"no Vive tracker with serial {serial!r} is connected (found {found}); is it paired "
            "and is SteamVR running?"
        )

    def poses(self) -> Any:
        return self.system.getDeviceToAbsoluteTrackingPose(
            self.sdk.TrackingUniverseStanding, 0.0, self.sdk.k_unMaxTrackedDeviceCount
        )

    def close(self) -> None:
        self.sdk.shutdown()


class ViveTracker:
    """One tracker; ``read_pose()`` gives (stamp, pose (7,)) in the tracking universe."""

    def __init__(
        self,
        serial: str,
        session: OpenVRSession,
        name: str = "tracker",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name, self.session, self._clock = name, session, clock
        self.index = session.find_tracker(serial)

    def read_pose(self) -> tuple[float, np.ndarray]:
        """The newest pose; NaN while the tracker has lost tracking."""
        stamp = self._clock()
        pose = self.session.poses()[self.index]
        if not pose.bPoseIsValid:
            return stamp, np.full(7, np.nan)
        return stamp, openvr_matrix_to_pose(pose.mDeviceToAbsoluteTracking)
