"""Drivers for the real cell's devices, each behind a rig interface.

Every vendor SDK is an optional extra, imported in one function of its driver's module when
a device is opened: ``flexivrdk`` (flexiv), ``wujihandpy`` (wuji), ``pyzed`` (zed, from the
ZED SDK installer), ``pyzmq`` (teleop) and ``openvr`` (vive). Importing this package needs
none of them. Each driver states the SDK release it was written for and checks the installed
one when its device opens (``SDK_REQUIREMENTS``, ``r2s2r.rig.hardware.drivers.sdk``).
"""

from r2s2r.rig.hardware.drivers.flexiv import (
    FLEXIVRDK,
    CartesianLimits,
    FlexivArm,
    FlexivBringUp,
    FlexivError,
)
from r2s2r.rig.hardware.drivers.manual import ManualConveyor, OperatorPresenter
from r2s2r.rig.hardware.drivers.manus import PYZMQ, ManusGlove, skeleton_to_keypoints
from r2s2r.rig.hardware.drivers.opencv_camera import OPENCV, OpenCVCamera
from r2s2r.rig.hardware.drivers.sdk import SdkRequirement, SdkVersionError, require_sdk
from r2s2r.rig.hardware.drivers.vive import (
    OPENVR,
    OpenVRSession,
    ViveTracker,
    openvr_matrix_to_pose,
)
from r2s2r.rig.hardware.drivers.wuji import WUJIHANDPY, WujiHand
from r2s2r.rig.hardware.drivers.zed import PYZED, ZedCamera, split_side_by_side

# The SDK each driver was written for, by driver.
SDK_REQUIREMENTS: dict[str, SdkRequirement] = {
    "FlexivArm": FLEXIVRDK,
    "WujiHand": WUJIHANDPY,
    "ManusGlove": PYZMQ,
    "ViveTracker": OPENVR,
    "ZedCamera": PYZED,
    "OpenCVCamera": OPENCV,
}

__all__ = [
    "CartesianLimits",
    "FlexivArm",
    "FlexivBringUp",
    "FlexivError",
    "ManualConveyor",
    "ManusGlove",
    "OpenCVCamera",
    "OpenVRSession",
    "OperatorPresenter",
    "SDK_REQUIREMENTS",
    "SdkRequirement",
    "SdkVersionError",
    "ViveTracker",
    "WujiHand",
    "ZedCamera",
    "openvr_matrix_to_pose",
    "require_sdk",
    "skeleton_to_keypoints",
    "split_side_by_side",
]
